"""``patchkit base fetch``: the pinned, unpatched tree as a git repository with one known commit.

pypi bases: ``pip download`` of the exact wheel through pip's configured index (no host written
here), sha256 check, extraction of the members the layout maps (``sglang/`` -> ``python/sglang/``)
and ONE commit with a fixed identity and date, so every machine gets the same base commit id.
The wheel is cached in ``<home>/cache``; a second fetch reuses the tree (or the wheel) offline.
git bases (or ``--from-git PATH``): a local clone checked out at the pinned commit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit import fsutil, paths, proc
from patchkit.errors import BadInput, Location
from patchkit.git import PATCHKIT_EMAIL, PATCHKIT_NAME, Repo, identity_env, init_repo
from patchkit.manifest import BaseKind, Manifest, PypiBase
from patchkit.patchset import state
from patchkit.patchset.safety import path_problem
from patchkit.patchset.series import sha256_file
from patchkit.patchset.staging import Progress
from patchkit.results import CommandResult

BRANCH = "patchkit"
#: Author/committer date of every base commit (fixed so the commit id is reproducible).
BASE_DATE = "2026-01-01T00:00:00+0000"


@dataclass(frozen=True, kw_only=True)
class BaseResult(CommandResult):
    path: str
    kind: BaseKind
    commit: str
    tree: str
    cached: bool  # True when the tree already existed: nothing was downloaded or extracted
    wheel: str | None = None
    wheel_sha256: str | None = None
    downloaded: bool = False  # True when pip downloaded the wheel in this call


def fetch(
    manifest: Manifest, dest: Path | None = None, from_git: Path | None = None, progress: Progress | None = None
) -> BaseResult:
    """Provide the base tree at ``dest`` (default :func:`patchkit.paths.default_target`); reuse it when present."""
    dest = Path(dest) if dest else paths.default_target(manifest)
    key = hashlib.sha256(str(dest.absolute()).encode()).hexdigest()[:16]
    with fsutil.file_lock(paths.locks_dir() / f"tree-{key}.lock", what=f"the base tree {dest}",
                          holder=f"another patchkit base fetch (pid {os.getpid()})", on_wait=progress):
        if from_git is not None or manifest.base_kind == "git":
            return _fetch_git(manifest, dest, from_git)
        return _fetch_pypi(manifest, dest, progress)


# ---------------------------------------------------------------------- pypi
def _fetch_pypi(manifest: Manifest, dest: Path, progress: Progress | None) -> BaseResult:
    pypi = manifest.pypi
    assert pypi is not None
    existing = _existing_base(manifest, dest)
    if existing:
        tree = Repo(dest).tree_of(existing)
        return _result(dest, "pypi", existing, tree, cached=True, wheel=pypi.wheel, wheel_sha256=pypi.sha256)
    wheel, downloaded = cached_wheel(pypi, progress)
    if progress:
        progress(f"extracting {pypi.wheel}")
    commit = _build_tree(pypi, wheel, dest)
    tree = Repo(dest).tree_of(commit)
    return _result(dest, "pypi", commit, tree, cached=False, wheel=pypi.wheel, wheel_sha256=pypi.sha256,
                   downloaded=downloaded)


def _result(dest: Path, kind: BaseKind, commit: str, tree: str, **rest: Any) -> BaseResult:
    return BaseResult(command="base fetch", ok=True, path=str(dest), kind=kind, commit=commit, tree=tree, **rest)


def _free_if_empty(dest: Path) -> None:
    """An empty folder is as good as none (``mkdir`` first, or what an error message suggested)."""
    if dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir()):
        dest.rmdir()


def _existing_base(manifest: Manifest, dest: Path) -> str | None:
    _free_if_empty(dest)
    if not dest.exists():
        return None
    if not (dest / ".git").exists():
        raise BadInput(f"{dest} exists and is not a git repository", hint="remove it or pass --dest")
    commit = state.base_commit(Repo(dest), manifest)
    if commit is None:
        raise BadInput(
            f"{dest} exists but does not hold the base {manifest.base_label()}", hint="remove it or pass --dest"
        )
    return commit


def cached_wheel(pypi: PypiBase, progress: Progress | None = None) -> tuple[Path, bool]:
    """The verified wheel in the cache, downloading it if needed; (path, downloaded)."""
    wheel = paths.cache_dir() / pypi.wheel
    for candidate in (wheel, paths.legacy_cache_dir() / pypi.wheel):  # the home's own cache, before sharing
        if candidate.is_file() and sha256_file(candidate) == pypi.sha256:
            return candidate, False
    paths.cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="download-", dir=paths.cache_dir()) as tmp:
        if progress:
            progress(f"downloading {pypi.wheel} with pip")
        try:
            proc.run(pip_download_command(pypi, Path(tmp)))
        except proc.CommandFailed as failed:
            raise BadInput(
                f"could not download {pypi.wheel} with pip (exit {failed.completed.returncode}): "
                f"{_last_line(failed.completed.stderr)}",
                hint=f"check the network or pip's index settings, or put the wheel into {paths.cache_dir()}",
            ) from None
        got = Path(tmp) / pypi.wheel
        if not got.is_file():
            raise BadInput(f"pip did not produce {pypi.wheel} (found: {sorted(os.listdir(tmp))})")
        actual = sha256_file(got)
        if actual != pypi.sha256:
            raise BadInput(
                f"{pypi.wheel} has sha256 {actual}, the manifest pins {pypi.sha256}",
                hint="the index served a different file; do not trust it",
            )
        got.replace(wheel)
    return wheel, True


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def pip_download_command(pypi: PypiBase, dest: Path) -> list[str]:
    """``pip download`` for exactly the pinned wheel (tags taken from its file name)."""
    parts = pypi.wheel[: -len(".whl")].split("-")
    python_tag, abi_tag, platform_tag = parts[-3], parts[-2], parts[-1]
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-d",
        str(dest),
    ]
    match = re.fullmatch(r"([a-z]+)(\d)(\d+)", python_tag)
    if match:
        argv += ["--implementation", match.group(1), "--python-version", f"{match.group(2)}.{match.group(3)}"]
    if abi_tag != "none":
        argv += ["--abi", abi_tag]
    for platform in platform_tag.split("."):
        argv += ["--platform", platform]
    return [*argv, f"{pypi.package}=={pypi.version}"]


def _build_tree(pypi: PypiBase, wheel: Path, dest: Path) -> str:
    """Extract per layout into a fresh repository next to ``dest``, commit, then rename into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        extract(pypi, wheel, staging)
        repo = init_repo(staging, BRANCH)
        repo.run("add", "-A", "-f", ".")
        tree = repo.run("write-tree")
        env = identity_env(PATCHKIT_NAME, PATCHKIT_EMAIL, BASE_DATE)
        commit = repo.run("commit-tree", "--no-gpg-sign", tree, "-F", "-", env=env, input=state.base_message(pypi))
        repo.run("update-ref", f"refs/heads/{BRANCH}", commit)
        staging.rename(dest)
        return commit
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def extract(pypi: PypiBase, wheel: Path, root: Path) -> int:
    """Write the wheel members the layout maps under ``root``, keeping the executable bit."""
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            target = map_member(pypi.layout, info.filename)
            if target is None or info.is_dir():
                continue
            problem = path_problem(target)
            mode = info.external_attr >> 16
            if problem or stat.S_ISLNK(mode):
                raise BadInput(f"wheel member {info.filename!r}: {problem or 'symlink'}", location=Location(str(wheel)))
            path = root / target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(info))
            path.chmod(0o755 if mode & 0o111 else 0o644)
            count += 1
    return count


def map_member(layout: dict[str, str], name: str) -> str | None:
    """The repository path of wheel member ``name``, or None when the layout drops it."""
    for prefix, repo_prefix in layout.items():
        if name.startswith(prefix):
            return repo_prefix + name[len(prefix) :]
    return None


# ---------------------------------------------------------------------- git
def _fetch_git(manifest: Manifest, dest: Path, from_git: Path | None) -> BaseResult:
    if manifest.git is None:
        raise BadInput(
            "the manifest has no [base.git] table (url, commit) for a git base", location=Location(str(manifest.path))
        )
    commit = manifest.git.commit
    _free_if_empty(dest)
    if dest.exists():
        repo = Repo(dest)
        if not (dest / ".git").exists():
            raise BadInput(f"{dest} exists and is not a git repository", hint="remove it or pass --dest")
        if not repo.rev(commit):
            raise BadInput(f"{dest} exists but does not hold commit {commit}", hint="remove it or pass --dest")
        return _result(dest, "git", commit, repo.tree_of(commit), cached=True)
    source = str(from_git) if from_git is not None else manifest.git.url
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        status, _, err = Repo(dest.parent).run_bytes("clone", "-q", "--no-checkout", source, staging, check=False)
        if status != 0:
            raise BadInput(f"could not clone {source}: {_last_line(err)}",
                           hint="check the [base.git] url (or the --from-git path) and the network")
        clone = Repo(staging)
        if not clone.rev(commit):
            raise BadInput(f"commit {commit} is not in {source}", hint="fetch it there first or fix [base.git] commit")
        clone.run("checkout", "-q", "-B", BRANCH, commit)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _result(dest, "git", commit, Repo(dest).tree_of(commit), cached=False)


def fetch_for_set(
    set_dir: Path | None, dest: Path | None, from_git: Path | None, progress: Progress | None = None
) -> BaseResult:
    """``patchkit base fetch``: :func:`fetch` for the set's manifest."""
    from patchkit.manifest import load

    return fetch(load(paths.resolve_set(set_dir)), dest, from_git, progress)
