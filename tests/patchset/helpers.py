"""Builders for the tiny upstream fixture and its 5-patch set, and ways to drive the real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from patchkit.cli import cli
from patchkit.git import Repo, identity_env, init_repo

REPO_ROOT = Path(__file__).resolve().parents[2]
AUTHOR = ("Ada Lovelace", "ada@example.org")

CORE_PY = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))
UTIL_PY = "".join(f"VALUE_{i} = {i}\n" for i in range(30))
OLD_NAME_PY = "".join(f"# line {i}\n" for i in range(20))
RUN_SH = "#!/bin/sh\necho run\n"

BASE_FILES = {
    "pkg/__init__.py": "",
    "pkg/core.py": CORE_PY,
    "pkg/util.py": UTIL_PY,
    "pkg/old_name.py": OLD_NAME_PY,
    "pkg/gone.py": "GONE = True\n",
    "README.txt": "tiny upstream\n",
}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def commit_all(repo: Repo, message: str, date: str, author: tuple[str, str] = AUTHOR) -> str:
    """Stage everything and commit with a fixed identity (so ids are reproducible)."""
    repo.run("add", "-A", "-f", ".")
    tree = repo.run("write-tree")
    parent = repo.rev("HEAD")
    env = identity_env(author[0], author[1], date)
    commit = repo.run("commit-tree", tree, *(["-p", parent] if parent else []), "-F", "-", env=env, input=message)
    repo.run("update-ref", "HEAD", commit)
    return commit


def make_upstream(root: Path) -> tuple[Path, str]:
    """A git repo with a few files, an executable script and a directory symlink; (path, commit)."""
    repo = init_repo(root, "main")
    for rel, text in BASE_FILES.items():
        write(root / rel, text)
    write(root / "bin/run.sh", RUN_SH)
    (root / "bin/run.sh").chmod(0o755)
    os.symlink("pkg", root / "linkdir")
    commit = commit_all(repo, "upstream base\n", "2025-06-01T00:00:00+0000")
    return root, commit


MANIFEST = """\
# Test set for the tiny upstream fixture.
[set]
name = "tiny"
version = "1.0.0"
description = "five patches on the tiny upstream"
python = ["3.11"]

[base]
kind = "git"

[base.git]
url = "{url}"
commit = "{commit}"

[verify.compile]
enabled = true
"""


def edit_series_commits(target: Path) -> None:
    """The five fixture commits on top of the base in ``target``."""
    repo = Repo(target)
    core = CORE_PY.replace("return x + 2\n", "return x + 2  # patched by 0001\n")
    write(target / "pkg/core.py", core)
    commit_all(
        repo,
        "Patch f2 in core\n\nMakes f2 say who patched it.\n\nUpstream-Status: Pending\n",
        "2026-02-01T10:00:00+0000",
    )
    write(target / "pkg/extra.py", "def extra():\n    return 'extra'\n")
    commit_all(repo, "Add pkg/extra.py\n", "2026-02-02T10:00:00+0000")
    write(target / "pkg/util.py", UTIL_PY.replace("VALUE_15 = 15\n", "VALUE_15 = 1500\n"))
    commit_all(repo, "Change VALUE_15 in util\n", "2026-02-03T10:00:00+0000")
    (target / "pkg/old_name.py").rename(target / "pkg/new_name.py")
    write(target / "pkg/new_name.py", OLD_NAME_PY + "# renamed\n")
    (target / "pkg/gone.py").unlink()
    commit_all(repo, "Rename old_name to new_name, drop gone.py\n", "2026-02-04T10:00:00+0000")
    write(target / "bin/run.sh", RUN_SH + "echo patched\n")
    write(target / "pkg/core.py", core.replace("return x + 9\n", "return x + 9000\n"))
    commit_all(repo, "Patch run.sh and f9\n", "2026-02-05T10:00:00+0000")


def invoke(*args: str):
    """Run the real CLI in-process; returns click's Result."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def invoke_json(*args: str) -> tuple[int, dict]:
    result = invoke(*args, "--json")
    return result.exit_code, json.loads(result.stdout)


def run_cli(*args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run ``python -m patchkit`` as a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args], env=cli_env(env), capture_output=True, text=True, **kwargs
    )


def cli_env(extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.update(extra or {})
    return env


def tree_snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file (and symlink target) under ``root``, .git excluded."""
    snap = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if path.is_symlink():
            snap[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            snap[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return snap


def set_snapshot(set_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(set_dir.iterdir()) if p.is_file()}


@dataclass
class Fixture:
    upstream: Path
    base_commit: str
    set_dir: Path
    target: Path

    def repo(self) -> Repo:
        return Repo(self.target)

    def head(self) -> str:
        return self.repo().run("rev-parse", "HEAD")


def build_template(root: Path) -> tuple[Path, str, Path]:
    """Upstream + a locked 5-patch set written by `patchkit refresh` (built once per session)."""
    upstream, commit = make_upstream(root / "upstream")
    set_dir = root / "set"
    set_dir.mkdir()
    write(set_dir / "manifest.toml", MANIFEST.format(url=upstream, commit=commit))
    write(set_dir / "series", "# tiny set: one patch per line\n")
    work = root / "work"
    assert invoke("base", "fetch", "--set", str(set_dir), "--dest", str(work)).exit_code == 0
    edit_series_commits(work)
    result = invoke("refresh", "--set", str(set_dir), "--target", str(work))
    assert result.exit_code == 0, result.output
    return upstream, commit, set_dir


def copy_set(template_set: Path, dest: Path) -> Path:
    shutil.copytree(template_set, dest)
    return dest


def object_files(repo_root: Path) -> set[str]:
    """Names of every file in the repository's object store."""
    objects = repo_root / ".git" / "objects"
    return {p.relative_to(objects).as_posix() for p in objects.rglob("*") if p.is_file()}


# ---------------------------------------------------------------------- real processes at known moments
def start_paused(*args: str, step: str, seconds: float = 60, env: dict | None = None,
                 new_session: bool = False) -> subprocess.Popen:
    """Start ``python -m patchkit ARGS`` and return once it printed the pause marker of ``step``.

    With ``new_session`` it runs in its own session and process group, as a terminal's foreground job
    would: ``os.killpg(proc.pid, SIGINT)`` is then what Ctrl-C sends.
    """
    hook = {"PATCHKIT_TEST_PAUSE": step, "PATCHKIT_TEST_PAUSE_S": str(seconds)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", *args], env=cli_env({**hook, **(env or {})}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=new_session,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.strip() == f"patchkit-test-pause: {step}":
            return proc
    proc.kill()
    raise AssertionError(f"patchkit {' '.join(args)} never reached {step}: {proc.communicate()}")


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def patched_reference(fx: Fixture, dest: Path) -> tuple[str, dict[str, str]]:
    """(HEAD, snapshot) of the set applied to a fresh base at ``dest`` (commit ids are reproducible)."""
    assert invoke("base", "fetch", "--set", str(fx.set_dir), "--dest", str(dest)).exit_code == 0
    assert invoke("apply", "--set", str(fx.set_dir), "--target", str(dest)).exit_code == 0
    return Repo(dest).run("rev-parse", "HEAD"), tree_snapshot(dest)


def journal(fx: Fixture) -> Path:
    return fx.target / ".git" / "patchkit-apply.json"
