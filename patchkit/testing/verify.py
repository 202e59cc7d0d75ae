"""Test helpers for verify and the gates: real git trees and real manifests in a temp folder.

A tree has upstream history below its base, as a clone of SGLang does: an ``upstream`` commit, the
``base`` commit the set pins (``[base] kind = "git"``), then the patched files in one commit. So a
gate or a runner that mistakes the repository's root commit for the base sees files it must not.

Example files (a gate's ``EXAMPLES``): ``@base/x`` goes into the base commit (present, untouched),
``@set/x`` into the patch-set directory, anything else into the patch commit (touched).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from patchkit import manifest as manifest_mod
from patchkit.git import Repo, identity_env, init_repo
from patchkit.verify.api import VerifyContext

BASE_PREFIX, SET_PREFIX = "@base/", "@set/"
UPSTREAM_FILE = "UPSTREAM.md"  # committed below the base: never touched, never seen by a gate
_DATE = "2026-01-01T00:00:00+00:00"


def write_files(root: Path, files: Mapping[str, str]) -> list[str]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return list(files)


def commit_all(repo: Repo, message: str) -> str:
    """Commit everything in the work tree with the test identity; returns the commit id."""
    env = identity_env("patchkit test", "test@patchkit.invalid", _DATE)
    repo.run("add", "-A", env=env)
    repo.run("commit", "-q", "--allow-empty", "-m", message, env=env)
    commit = repo.rev("HEAD")
    assert commit is not None
    return commit


def make_tree(root: Path, base: Mapping[str, str], patched: Mapping[str, str]) -> tuple[Path, str]:
    """A git tree: an upstream commit, the base commit holding ``base``, a commit adding ``patched``
    (none when it is empty). Returns the tree and the base commit."""
    root.mkdir(parents=True)
    repo = init_repo(root)
    write_files(root, {UPSTREAM_FILE: "upstream history below the base\n"})
    commit_all(repo, "upstream")
    write_files(root, {"README": "base\n", **base})
    base_commit = commit_all(repo, "base")
    if patched:
        write_files(root, patched)
        commit_all(repo, "patch")
    return root, base_commit


def manifest_doc(base_commit: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A complete manifest with a git base pinned at ``base_commit``; ``extra`` is merged in table by
    table (``{"verify": {"xref": {...}}}``, ``{"set": {"python": ["3.12"]}}``)."""
    doc: dict[str, Any] = {
        "set": {"name": "example", "version": "1.0.0", "description": "a test set", "python": ["3.11"]},
        "base": {"kind": "git", "git": {"url": "https://example.invalid/upstream.git", "commit": base_commit}},
    }
    for table, value in (extra or {}).items():
        merged = {**doc.get(table, {}), **value} if isinstance(value, Mapping) else value
        doc[table] = _plain(merged)
    return doc


def _plain(value: Any) -> Any:
    """Mappings as dicts, all the way down (tomli_w writes dicts only)."""
    return {k: _plain(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def write_manifest(set_dir: Path, base_commit: str, extra: Mapping[str, Any] | None = None) -> Path:
    set_dir.mkdir(parents=True, exist_ok=True)
    path = set_dir / manifest_mod.MANIFEST_NAME
    path.write_text(tomli_w.dumps(manifest_doc(base_commit, extra)))
    return path


def split_example_files(files: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Example files -> (base, patched, set) files, prefixes stripped."""
    base = {k[len(BASE_PREFIX):]: v for k, v in files.items() if k.startswith(BASE_PREFIX)}
    in_set = {k[len(SET_PREFIX):]: v for k, v in files.items() if k.startswith(SET_PREFIX)}
    patched = {k: v for k, v in files.items() if not k.startswith((BASE_PREFIX, SET_PREFIX))}
    return base, patched, in_set


def make_example(root: Path, files: Mapping[str, str],
                 extra: Mapping[str, Any] | None = None) -> tuple[Path, Path, dict[str, str]]:
    """An example's tree (``root/tree``) and set dir (``root/set``, with its manifest); returns them and
    the patched files."""
    base, patched, in_set = split_example_files(files)
    tree, base_commit = make_tree(root / "tree", base, patched)
    set_dir = root / "set"
    set_dir.mkdir()
    write_files(set_dir, in_set)
    write_manifest(set_dir, base_commit, extra)
    return tree, set_dir, patched


def example_context(root: Path, files: Mapping[str, str], extra: Mapping[str, Any] | None = None) -> VerifyContext:
    """The context the runner builds for an example (touched files found from the tree, as in a run)."""
    from patchkit.verify.run import build_context

    tree, set_dir, _ = make_example(root, files, extra)
    return build_context(set_dir, tree)


def _patchkit(*args: str) -> None:
    """Run a patchkit command in process; a failure fails the test with patchkit's own output."""
    from click.testing import CliRunner

    from patchkit.cli import cli

    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, f"patchkit {' '.join(args)} exited {result.exit_code}:\n{result.output}"


def applied_example(root: Path, base: Mapping[str, str], patched: Mapping[str, str],
                    extra: Mapping[str, Any] | None = None) -> tuple[Path, Path]:
    """A real one-patch set and a target it is exactly applied to, made the way a user makes them:
    an upstream with history below the base, ``base fetch``, a commit, ``refresh`` (writes the patch,
    series and lock), then ``base fetch`` and ``apply`` into a fresh target. Returns (target, set_dir)."""
    upstream, base_commit = make_tree(root / "upstream", base, {})
    set_dir = root / "set"
    doc = manifest_doc(base_commit, extra)
    doc["base"]["git"]["url"] = str(upstream)
    set_dir.mkdir(parents=True)
    (set_dir / manifest_mod.MANIFEST_NAME).write_text(tomli_w.dumps(doc))
    (set_dir / "series").write_text("# one patch per line\n")
    work = root / "work"
    _patchkit("base", "fetch", "--set", str(set_dir), "--dest", str(work))
    write_files(work, patched)
    commit_all(Repo(work), "[Example] The patched files\n\nWhat the example set changes.")
    _patchkit("refresh", "--set", str(set_dir), "--target", str(work))
    target = root / "target"
    _patchkit("base", "fetch", "--set", str(set_dir), "--dest", str(target))
    _patchkit("apply", "--set", str(set_dir), "--target", str(target))
    return target, set_dir
