"""Helpers for the verify tests: real git trees with a base commit and a patch commit."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the repo root holds both packages, patchkit and checks
    sys.path.insert(0, str(REPO))

import git  # noqa: E402

ACTOR = git.Actor("patchkit test", "test@patchkit.invalid")
BASE_PREFIX, SET_PREFIX = "@base/", "@set/"


def write_files(root: Path, files: dict[str, str]) -> list[str]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return list(files)


def commit_all(repo: git.Repo, message: str) -> None:
    repo.git.add("-A")
    repo.index.commit(message, author=ACTOR, committer=ACTOR)


def make_tree(root: Path, base: dict[str, str], patched: dict[str, str]) -> Path:
    """A git tree whose root commit holds ``base`` and whose second commit adds ``patched``."""
    root.mkdir(parents=True)
    repo = git.Repo.init(root)
    write_files(root, {"README": "base\n", **base})
    commit_all(repo, "base")
    write_files(root, patched)
    commit_all(repo, "patch")
    return root


def split_example_files(files: dict[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Example files: ``@base/x`` committed in the base (untouched), ``@set/x`` in the set dir, else patched."""
    base = {k[len(BASE_PREFIX):]: v for k, v in files.items() if k.startswith(BASE_PREFIX)}
    in_set = {k[len(SET_PREFIX):]: v for k, v in files.items() if k.startswith(SET_PREFIX)}
    patched = {k: v for k, v in files.items() if not k.startswith((BASE_PREFIX, SET_PREFIX))}
    return base, patched, in_set


def make_example(root: Path, files: dict[str, str]) -> tuple[Path, Path, dict[str, str]]:
    """An example's tree (``root/tree``) and set dir (``root/set``); returns them and the patched files."""
    base, patched, in_set = split_example_files(files)
    tree = make_tree(root / "tree", base, patched)
    set_dir = root / "set"
    set_dir.mkdir()
    write_files(set_dir, in_set)
    return tree, set_dir, patched
