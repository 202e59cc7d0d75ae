"""A fixture upstream with two releases and a six-patch set that meets every status of ``patchkit port``.

Upstream ``v1`` is the set's base; ``v2`` is the port's target. Each patch lands in its own file so that
each meets one status, in series order:

| patch | file | what v2 did to the file | status |
|---|---|---|---|
| 0001 | clean.py (+ adds ddtree.py) | nothing | clean |
| 0002 | offset.py | five lines inserted at the top | offset (+5) |
| 0003 | context.py | changed a line two lines from the patch's, and one far away | context-changed |
| 0004 | upstreamed.py | made the patch's very change | already-upstream |
| 0005 | conflict.py | changed the patch's line differently | conflict |
| 0006 | gone.py | deleted the file | target-gone |

``spec.py`` is not patched; v2 changes its dispatch sites (one appeared, one vanished, one changed).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from patchkit.git import Repo, init_repo
from tests.patchset import helpers

PKG = "python/pkg"
CLEAN = "".join(f"CLEAN_{i} = {i}\n" for i in range(20))
OFFSET = "".join(f"def off_{i}():\n    return {i}\n\n" for i in range(10))
CONTEXT = "".join(f"CTX_{i} = {i}\n" for i in range(30))
UPSTREAMED = "".join(f"UP_{i} = {i}\n" for i in range(10))
CONFLICT = "".join(f"CONF_{i} = {i}\n" for i in range(10))
GONE = "".join(f"GONE_{i} = {i}\n" for i in range(10))
SPEC_V1 = '''\
def pick(algo):
    if algo.is_eagle():
        return "eagle"
    if algo.is_dflash():
        return "dflash"
    return "none"


def size(algo):
    return 2 if algo.is_ngram() else 1
'''
SPEC_V2 = '''\
def pick(algo):
    if algo.is_eagle():
        return "eagle"
    if algo.is_dflash() or algo.is_standalone():
        return "dflash"
    return "none"


def extra(algo):
    if algo.is_dflash():
        return 1
    return 0
'''

V1_FILES = {
    f"{PKG}/__init__.py": "",
    f"{PKG}/clean.py": CLEAN,
    f"{PKG}/offset.py": OFFSET,
    f"{PKG}/context.py": CONTEXT,
    f"{PKG}/upstreamed.py": UPSTREAMED,
    f"{PKG}/conflict.py": CONFLICT,
    f"{PKG}/gone.py": GONE,
    f"{PKG}/spec.py": SPEC_V1,
}
V2_FILES = {
    **{k: v for k, v in V1_FILES.items() if not k.endswith("gone.py")},
    f"{PKG}/offset.py": "".join(f"# upstream note {i}\n" for i in range(5)) + OFFSET,
    f"{PKG}/context.py": CONTEXT.replace("CTX_12 = 12\n", "CTX_12 = 1200\n").replace("CTX_27 = 27\n",
                                                                                   "CTX_27 = 2700\n"),
    f"{PKG}/upstreamed.py": UPSTREAMED.replace("UP_5 = 5\n", "UP_5 = 500\n"),
    f"{PKG}/conflict.py": CONFLICT.replace("CONF_8 = 8\n", "CONF_8 = 'upstream'\n"),
    f"{PKG}/spec.py": SPEC_V2,
    f"{PKG}/new_in_v2.py": "NEW = True\n",
}

MANIFEST = """\
# Port fixture: six patches on upstream v1 (SGLang-shaped: python/ is the source root).
[set]
name = "portfix"
version = "1.0.0"
description = "six patches, one per port status, on upstream v1"
python = ["3.11"]

[base]
kind = "git"

[base.git]
url = "{url}"
commit = "{commit}"

[verify.dispatch]
declarations = "expectations/dispatch.toml"
"""
DECLARATIONS = """\
[[site]]
file = "python/pkg/spec.py"
scope = "size"
expr = "algo.is_ngram()"
treatment = "not_applicable"
reason = "fixture: this site vanishes in v2"

[[site]]
file = "python/pkg/spec.py"
scope = "pick"
expr = "algo.is_dflash()"
treatment = "not_applicable"
reason = "fixture: this site changes in v2"
"""

#: (subject, {file: new content}) per patch, in series order.
PATCHES = [
    ("Patch CLEAN_10 and add ddtree.py", {f"{PKG}/clean.py": CLEAN.replace("CLEAN_10 = 10\n", "CLEAN_10 = 'patched'\n"),
                                          f"{PKG}/ddtree.py": "TREE = 'ddtree'\n"}),
    ("Patch off_7", {f"{PKG}/offset.py": OFFSET.replace("    return 7\n", "    return 'patched 7'\n")}),
    ("Patch CTX_14", {f"{PKG}/context.py": CONTEXT.replace("CTX_14 = 14\n", "CTX_14 = 1400\n")}),
    ("Patch UP_5 as upstream later did", {f"{PKG}/upstreamed.py": UPSTREAMED.replace("UP_5 = 5\n", "UP_5 = 500\n")}),
    ("Patch CONF_8", {f"{PKG}/conflict.py": CONFLICT.replace("CONF_8 = 8\n", "CONF_8 = 'patch'\n")}),
    ("Patch GONE_3", {f"{PKG}/gone.py": GONE.replace("GONE_3 = 3\n", "GONE_3 = 'patched'\n")}),
]
NAMES = [
    "0001-Patch-CLEAN_10-and-add-ddtree.py.patch",
    "0002-Patch-off_7.patch",
    "0003-Patch-CTX_14.patch",
    "0004-Patch-UP_5-as-upstream-later-did.patch",
    "0005-Patch-CONF_8.patch",
    "0006-Patch-GONE_3.patch",
]
#: What the conflict's resolution keeps: both sides' intent.
CONFLICT_RESOLVED = CONFLICT.replace("CONF_8 = 8\n", "CONF_8 = 'patch and upstream'\n")


@dataclass(frozen=True)
class Upstream:
    path: Path
    v1: str
    v2: str
    set_dir: Path


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        helpers.write(root / rel, text)


def make_upstream(root: Path) -> tuple[Path, str, str]:
    repo = init_repo(root, "main")
    write_files(root, V1_FILES)
    v1 = helpers.commit_all(repo, "upstream v1\n", "2025-06-01T00:00:00+0000")
    for rel in V1_FILES:
        (root / rel).unlink()
    write_files(root, V2_FILES)
    v2 = helpers.commit_all(repo, "upstream v2\n", "2025-09-01T00:00:00+0000")
    return root, v1, v2


def build(root: Path) -> Upstream:
    """The upstream repo and the locked set, written by `patchkit refresh` (built once per session)."""
    upstream, v1, v2 = make_upstream(root / "upstream")
    set_dir = root / "set"
    helpers.write(set_dir / "manifest.toml", MANIFEST.format(url=upstream, commit=v1))
    helpers.write(set_dir / "series", "# the port fixture's patches\n")
    helpers.write(set_dir / "expectations" / "dispatch.toml", DECLARATIONS)
    work = root / "work"
    assert helpers.invoke("base", "fetch", "--set", str(set_dir), "--dest", str(work)).exit_code == 0
    repo = Repo(work)
    for number, (subject, files) in enumerate(PATCHES, start=1):
        write_files(work, files)
        helpers.commit_all(repo, f"{subject}\n\nUpstream-Status: Pending\n", f"2026-03-0{number}T10:00:00+0000")
    result = helpers.invoke("refresh", "--set", str(set_dir), "--target", str(work))
    assert result.exit_code == 0, result.output
    assert [e for e in (set_dir / "series").read_text().splitlines() if not e.startswith("#")] == NAMES
    return Upstream(upstream, v1, v2, set_dir)


def truncate_set(set_dir: Path, keep: int) -> None:
    """Keep only the first ``keep`` patches (series, files and lock), e.g. a set that ports without a stop."""
    for name in NAMES[keep:]:
        (set_dir / name).unlink()
    helpers.write(set_dir / "series", "".join(f"{n}\n" for n in NAMES[:keep]))
    assert helpers.invoke("lock", "--set", str(set_dir)).exit_code == 0


def user_git(tree: Path, *args: str) -> str:
    """The user's own git in a port's work tree (a real git process, no user config)."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=tree, env=env, check=True, capture_output=True, text=True).stdout


def resolve_ours_then_edit(tree: Path, patch: str, resolutions: Path) -> None:
    """Resolve a stopped port as a maintainer would, then commit.

    Every conflicting hunk takes the new base's side while git's clean merges stay (``git merge-file
    --ours`` from the index stages); then ``<patch>.resolution.diff`` from ``resolutions``, if there is
    one, re-does the patch's intent on the new code.
    """
    for path in user_git(tree, "diff", "--name-only", "--diff-filter=U").split():
        stages = {}
        for stage in (1, 2, 3):
            stages[stage] = tree / f".stage{stage}"
            shown = subprocess.run(["git", "show", f":{stage}:{path}"], cwd=tree, check=True, capture_output=True)
            stages[stage].write_bytes(shown.stdout)
        merged = subprocess.run(["git", "merge-file", "--ours", "-p", stages[2], stages[1], stages[3]], cwd=tree,
                                capture_output=True, check=False)
        (tree / path).write_bytes(merged.stdout)
        for stage_file in stages.values():
            stage_file.unlink()
    edit = resolutions / patch.replace(".patch", ".resolution.diff")
    if edit.is_file():
        user_git(tree, "apply", str(edit))
    user_git(tree, "add", "-A")
    user_git(tree, "commit", "-q", "--no-edit")
