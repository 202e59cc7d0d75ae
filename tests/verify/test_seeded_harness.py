"""The seeding harness itself (corpus/seeding.py): a one-line patch edit is realised exactly as the
edited set would apply, ambiguity is refused, and the shared tree always gets its clean file back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.verify import test_seeded_defects as seeded_suite
from tests.verify.corpus.seeding import Edit, load_edits, realise, seeded

from patchkit.checks.registry import GATES

BASE = "import os\n\n\ndef f():\n    return 1\n"


def git(root: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True, env=env).stdout


@pytest.fixture
def two_patch_set(tmp_path: Path) -> tuple[Path, Path]:
    """A set of two patches to one file (the second shifts the first's lines) and the applied tree."""
    tree = tmp_path / "tree"
    tree.mkdir()
    git(tree, "init", "-q")
    (tree / "python").mkdir()
    (tree / "python/mod.py").write_text(BASE)
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "base")
    (tree / "python/mod.py").write_text(BASE + "\n\ndef g():\n    return DDTREE_G\n")
    git(tree, "commit", "-qam", "add g")
    (tree / "python/mod.py").write_text("import sys\n" + BASE + "\n\ndef g():\n    return DDTREE_G\n")
    git(tree, "commit", "-qam", "import sys")
    set_dir = tmp_path / "set"
    set_dir.mkdir()
    git(tree, "format-patch", "-q", "-o", str(set_dir), "HEAD~2")
    names = sorted(p.name for p in set_dir.glob("*.patch"))
    (set_dir / "series").write_text("\n".join(names) + "\n")
    return set_dir, tree


def test_an_edit_is_realised_as_the_edited_series_applies(two_patch_set, tmp_path):
    set_dir, tree = two_patch_set
    seed = realise(set_dir, tree, Edit("g", "0001-*.patch", "return DDTREE_G", "return DDTREE_H"))
    assert (seed.file, seed.line, seed.text) == ("python/mod.py", 10, "    return DDTREE_H")  # shifted by 0002
    # the same edit applied the long way: the edited series on the base, patch by patch
    long_way = tmp_path / "long"
    subprocess.run(["git", "clone", "-q", str(tree), str(long_way)], check=True)
    git(long_way, "checkout", "-q", git(tree, "rev-list", "--max-parents=0", "HEAD").strip())
    for name in (set_dir / "series").read_text().split():
        text = (set_dir / name).read_text()
        if name.startswith("0001"):
            text = text.replace("+    return DDTREE_G", "+    return DDTREE_H")
        (tmp_path / name).write_text(text)
        git(long_way, "apply", str(tmp_path / name))
    assert (long_way / "python/mod.py").read_bytes() == seed.content


def test_ambiguous_or_context_only_edits_are_refused(two_patch_set):
    set_dir, tree = two_patch_set
    with pytest.raises(AssertionError, match="on 0 added lines"):
        realise(set_dir, tree, Edit("context", "0001-*.patch", "return 1", "return 2"))  # a context line
    with pytest.raises(AssertionError, match="matches 0 patches"):
        realise(set_dir, tree, Edit("nowhere", "0009-*.patch", "x", "y"))
    with pytest.raises(AssertionError, match="on only 1 added lines"):
        realise(set_dir, tree, Edit("occurrence", "0001-*.patch", "return DDTREE_G", "y", occurrence=1))


def _series(tmp_path: Path, *contents: str) -> tuple[Path, Path]:
    """A set whose patches take python/mod.py from BASE through ``contents``, and the applied tree."""
    tree = tmp_path / "tree"
    tree.mkdir()
    git(tree, "init", "-q")
    (tree / "python").mkdir()
    (tree / "python/mod.py").write_text(BASE)
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "base")
    for n, content in enumerate(contents):
        (tree / "python/mod.py").write_text(content)
        git(tree, "commit", "-qam", f"step {n}")
    set_dir = tmp_path / "set"
    set_dir.mkdir()
    git(tree, "format-patch", "-q", "-o", str(set_dir), f"HEAD~{len(contents)}")
    (set_dir / "series").write_text("\n".join(sorted(p.name for p in set_dir.glob("*.patch"))) + "\n")
    return set_dir, tree


def test_a_later_patch_with_the_edited_line_as_context_is_carried_over(tmp_path):
    """0002 adds h() right below g(): its context holds the line 0001 adds, as the refreshed series has it."""
    g = BASE + "\n\ndef g():\n    return DDTREE_G\n"
    set_dir, tree = _series(tmp_path, g, g + "\n\ndef h():\n    return 2\n")
    assert " return DDTREE_G" in next(set_dir.glob("0002-*.patch")).read_text()  # context of 0002
    seed = realise(set_dir, tree, Edit("g", "0001-*.patch", "return DDTREE_G", "return DDTREE_H"))
    assert (seed.line, seed.text) == (9, "    return DDTREE_H")
    assert seed.content == (tree / "python/mod.py").read_bytes().replace(b"DDTREE_G", b"DDTREE_H")


def test_an_edit_a_later_patch_rewrites_is_refused_by_name(tmp_path):
    """0002 rewrites the line 0001 adds: the edit never reaches the applied set, so the entry must move."""
    g = BASE + "\n\ndef g():\n    return DDTREE_G\n"
    set_dir, tree = _series(tmp_path, g, g.replace("return DDTREE_G", "return DDTREE_G2"))
    with pytest.raises(AssertionError, match="not in the applied set any more"):
        realise(set_dir, tree, Edit("g", "0001-*.patch", "return DDTREE_G", "return DDTREE_H"))


def test_the_clean_file_comes_back_even_when_the_check_fails(two_patch_set):
    set_dir, tree = two_patch_set
    clean = (tree / "python/mod.py").read_bytes()
    seed = realise(set_dir, tree, Edit("g", "0001-*.patch", "return DDTREE_G", "return DDTREE_H"))
    with pytest.raises(RuntimeError), seeded(tree, seed):
        assert (tree / "python/mod.py").read_bytes() == seed.content
        raise RuntimeError("a failing gate")
    assert (tree / "python/mod.py").read_bytes() == clean


def test_every_gate_and_every_issue_16_class_has_seeded_rows():
    rows = seeded_suite.DEFECTS
    assert len({d.name for d in rows}) == len(rows)
    assert {d.gate for d in rows} == set(GATES)
    names = " ".join(d.name for d in rows)
    for fragment in ("family helper", "reserved names", "capture", "replay", "flag", "decode refusal", "logprob gate",
                     "self attribute", "typed parameter", "@property", "fails through"):
        assert fragment in names, fragment


def test_the_corpus_files_parse_and_name_their_classes():
    here = Path(seeded_suite.__file__).parent / "corpus"
    defects, benign = load_edits(here / "defects.toml", "defect"), load_edits(here / "benign.toml", "benign")
    assert len(defects) >= 20 and len(benign) >= 10
    assert {d.kind for d in defects} == {"family", "capture", "cli", "backend", "request", "names", "precision",
                                         "general"}
