"""Two trees of the same set and content get the same verdict from ``patchkit verify``, whichever ran
first: a gate's cached outcome, computed on one tree, is read back on the other with every path and
every covered line placed on that tree (patchkit/verify/cache.py). Real trees (``base fetch`` +
``apply`` of a real one-patch set, twice), the real tests gate with the running interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.checks import imports, settests, xref
from patchkit.testing.verify import _patchkit, applied_example, write_files
from patchkit.verify.cache import ResultCache, on_tree, tree_relative
from patchkit.verify.run import verify

ALGO = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
SET_TEST = ("import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
            "from pkg.algo import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")


@pytest.fixture
def two_trees(tmp_path) -> tuple[Path, Path, Path]:
    """(tree A, tree B, the set): B is the same set applied by ``base fetch --dest`` and ``apply --target``."""
    tree_a, set_dir = applied_example(tmp_path / "ex", {"python/pkg/__init__.py": ""},
                                      {"python/pkg/algo.py": ALGO},
                                      {"verify": {"tests": {"interpreter": "current"},
                                                  "xref": {"family": "add|sub", "check_unused": False}}})
    write_files(set_dir, {"tests/test_algo.py": SET_TEST})
    tree_b = tmp_path / "second"
    _patchkit("base", "fetch", "--set", str(set_dir), "--dest", str(tree_b))
    _patchkit("apply", "--set", str(set_dir), "--target", str(tree_b))
    return tree_a, tree_b, set_dir


def verdict(set_dir: Path, tree: Path, strict: bool = False) -> tuple[int, list[tuple[str, str, int | None, str]]]:
    overrides = {"tests": {"strict_coverage": True}} if strict else {}
    result = verify(set_dir, tree, ["xref", "tests"], registry={"xref": xref, "tests": settests}, overrides=overrides)
    rows = [(f.severity.value, f.file, f.line, f.message) for run in result.gates for f in run.findings]
    return result.exit_code, rows


@pytest.mark.parametrize("strict", [False, True], ids=["warnings", "strict-coverage"])
def test_the_second_tree_gets_the_first_trees_verdict_in_either_order(two_trees, tmp_path, monkeypatch, strict):
    tree_a, tree_b, set_dir = two_trees
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache-ab"))
    a_first = verdict(set_dir, tree_a, strict)
    b_second = verdict(set_dir, tree_b, strict)
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "cache-ba"))
    b_first = verdict(set_dir, tree_b, strict)
    a_second = verdict(set_dir, tree_a, strict)

    assert a_first == b_second == b_first == a_second
    code, rows = a_first
    uncovered = [r for r in rows if "run in no set test" in r[3]]
    assert [(r[0], r[1], r[2]) for r in uncovered] == [("error" if strict else "warning", "python/pkg/algo.py", 6)]
    assert any("added-line coverage: 3 of 4 added statements" in r[3] for r in rows)
    assert any(r[3].startswith("symbol table: 2 family symbols") for r in rows), "the xref gate ran"
    assert code == (1 if strict else 0)


def test_an_import_failure_read_from_another_trees_run_names_this_tree(tmp_path, monkeypatch):
    """The imports gate's cached harness holds tracebacks; read on the second tree they point into it."""
    monkeypatch.setenv("PATCHKIT_VERIFY_PYTHON", __import__("sys").executable)
    tree_a, set_dir = applied_example(tmp_path / "ex", {"python/pkg/__init__.py": ""},
                                      {"python/pkg/bad.py": "import os\n\nX = os.no_such_name\n"})
    tree_b = tmp_path / "second"
    _patchkit("base", "fetch", "--set", str(set_dir), "--dest", str(tree_b))
    _patchkit("apply", "--set", str(set_dir), "--target", str(tree_b))
    rows = {}
    for tree in (tree_a, tree_b):
        result = verify(set_dir, tree, ["imports"], registry={"imports": imports})
        rows[tree] = [(f.severity.value, f.file, f.line, f.message.replace(str(tree), "<tree>"))
                      for run in result.gates for f in run.findings if f.severity.value == "error"]
    assert rows[tree_a] == rows[tree_b]
    assert rows[tree_b] and rows[tree_b][0][1:3] == ("python/pkg/bad.py", 3)


def test_every_spelling_of_the_root_is_placed_and_no_longer_folder_is(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    link = tmp_path / "link"
    stored = tree_relative([f"{link}/x.py", f"{real}/y.py", f"{link}2/z.py", f"{real}2/z.py"], link)
    assert stored == ["<patchkit-tree>/x.py", "<patchkit-tree>/y.py", f"{link}2/z.py", f"{real}2/z.py"]


def test_a_tree_relative_entry_is_read_back_on_the_reading_tree(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    value = {f"{first}/x.py": [1], "tail": f"at {first}/y.py:3 (not {first}b/z.py)", "root": str(first)}
    stored = tree_relative(value, first)
    assert f"{first}/" not in repr(stored) and f"{first}'" not in repr(stored)
    assert on_tree(stored, second) == {f"{second}/x.py": [1], "tail": f"at {second}/y.py:3 (not {first}b/z.py)",
                                       "root": str(second)}
    cache = ResultCache(tmp_path / "cache", "t")
    cache.put("k", value, tree=first)
    assert cache.get("k", tree=first) == value
    assert cache.get("k", tree=second)["root"] == str(second)
