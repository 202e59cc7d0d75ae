"""``patchkit base fetch``: the pinned, unpatched tree as a git repository with one known commit.

pypi bases: ``pip download`` of the exact wheel through pip's configured index (no host written
here), sha256 check, extraction of the members the layout maps (``sglang/`` -> ``python/sglang/``)
and ONE commit with a fixed identity and date, so every machine gets the same base commit id.
The wheel is cached in ``<home>/cache``; a second fetch reuses the tree (or the wheel) offline.
git bases (or ``--from-git PATH``): a local clone checked out at the pinned commit.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from patchkit import paths, proc
from patchkit.errors import BadInput, Location
from patchkit.git import PATCHKIT_EMAIL, PATCHKIT_NAME, Repo, identity_env, init_repo
from patchkit.manifest import Manifest, PypiBase
from patchkit.patchset.series import sha256_file
from patchkit.results import CommandResult
from patchkit.patchset.safety import path_problem
from patchkit.patchset.staging import Progress
from patchkit.patchset import state

BRANCH = "patchkit"
#: Author/committer date of every base commit (fixed so the commit id is reproducible).
BASE_DATE = "2026-01-01T00:00:00+0000"


@dataclass(frozen=True)
class BaseResult(CommandResult):
    path: str
    kind: str  # "pypi" or "git"
    commit: str
    tree: str
    cached: bool  # True when the tree already existed: nothing was downloaded or extracted
    wheel: str | None = None
    wheel_sha256: str | None = None
    downloaded: bool = False  # True when pip downloaded the wheel in this call


def default_dest(manifest: Manifest) -> Path:
    """``<home>/trees/<package>-<version>`` (pypi) or ``<home>/trees/<repo>-<commit12>`` (git)."""
    if manifest.base_kind == "pypi" and manifest.pypi:
        return paths.trees_dir() / f"{manifest.pypi.package}-{manifest.pypi.version}"
    assert manifest.git is not None
    name = re.sub(r"\.git$", "", manifest.git.url.rstrip("/").rsplit("/", 1)[-1]) or "repo"
    return paths.trees_dir() / f"{name}-{manifest.git.commit[:12]}"




def fetch(
    manifest: Manifest, dest: Path | None = None, from_git: Path | None = None, progress: Progress | None = None
) -> BaseResult:
    """Provide the base tree at ``dest`` (default :func:`default_dest`); reuse it when present."""
    dest = Path(dest) if dest else default_dest(manifest)
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
        return BaseResult("base fetch", True, str(dest), "pypi", existing, tree, True, pypi.wheel, pypi.sha256)
    wheel, downloaded = cached_wheel(pypi, progress)
    if progress:
        progress(f"extracting {pypi.wheel}")
    commit = _build_tree(pypi, wheel, dest)
    tree = Repo(dest).tree_of(commit)
    return BaseResult(
        "base fetch", True, str(dest), "pypi", commit, tree, False, pypi.wheel, pypi.sha256, downloaded=downloaded
    )


def _existing_base(manifest: Manifest, dest: Path) -> str | None:
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
    if wheel.is_file() and sha256_file(wheel) == pypi.sha256:
        return wheel, False
    paths.cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="download-", dir=paths.cache_dir()) as tmp:
        if progress:
            progress(f"downloading {pypi.wheel} with pip")
        proc.run(pip_download_command(pypi, Path(tmp)))
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
    return argv + [f"{pypi.package}=={pypi.version}"]


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
    if dest.exists():
        repo = Repo(dest)
        if not (dest / ".git").exists():
            raise BadInput(f"{dest} exists and is not a git repository", hint="remove it or pass --dest")
        if not repo.rev(commit):
            raise BadInput(f"{dest} exists but does not hold commit {commit}", hint="remove it or pass --dest")
        return BaseResult("base fetch", True, str(dest), "git", commit, repo.tree_of(commit), True)
    source = str(from_git) if from_git is not None else manifest.git.url
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        repo = Repo(dest.parent)
        repo.run("clone", "-q", "--no-checkout", source, staging)
        clone = Repo(staging)
        if not clone.rev(commit):
            raise BadInput(f"commit {commit} is not in {source}", hint="fetch it there first or fix [base.git] commit")
        clone.run("checkout", "-q", "-B", BRANCH, commit)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return BaseResult("base fetch", True, str(dest), "git", commit, Repo(dest).tree_of(commit), False)


def resolve_set(set_dir: Path | None) -> Path:
    """``set_dir`` (a directory, or the name of a set), or the newest set under ddtree_patches/."""
    return paths.find_set(Path(set_dir)) if set_dir else paths.default_set_dir()


def locate(set_dir: Path | None, target: Path | None) -> tuple[Path, Path]:
    """The set directory (default: newest under ddtree_patches/) and target tree (default: the base dest)."""
    from patchkit.manifest import load  # the manifest is read only to find the default target

    set_dir = resolve_set(set_dir)
    return set_dir, Path(target) if target else default_dest(load(set_dir))


def fetch_for_set(
    set_dir: Path | None, dest: Path | None, from_git: Path | None, progress: Progress | None = None
) -> BaseResult:
    """``patchkit base fetch``: :func:`fetch` for the set's manifest."""
    from patchkit.manifest import load

    return fetch(load(resolve_set(set_dir)), dest, from_git, progress)
