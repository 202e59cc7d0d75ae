"""The one git wrapper. Every git call patchkit makes goes through :class:`Repo` (gitpython).

Git runs with the system and global config files switched off and a fixed locale, so the user's
settings (``diff.renames``, ``core.autocrlf``, aliases, hooks paths) cannot change what patchkit
writes or reads: commit ids and refreshed patches are the same on every machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import git as gitpython

from patchkit.errors import BadInput, Failed

#: Identity of every commit patchkit creates itself (base commits, committer of patch commits).
PATCHKIT_NAME = "patchkit"
PATCHKIT_EMAIL = "patchkit@localhost"

_QUIET_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "LANG": "C",
    "GIT_LITERAL_PATHSPECS": "1",  # paths from patches are names, never glob patterns
}


class GitFailed(Failed):
    """A git command exited non-zero; the message carries the command, exit code and stderr."""

    def __init__(self, args: Sequence[str], status: int, stderr: str):
        tail = "\n".join(stderr.strip().splitlines()[-20:])
        super().__init__(f"git {' '.join(args)} failed with exit code {status}\n{tail}")
        self.status = status
        self.stderr = stderr


def identity_env(name: str, email: str, date: str, *, committer: bool = True) -> dict[str, str]:
    """Environment for commit-tree: author ``name <email>`` at ``date``; committer = patchkit."""
    env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
    if committer:
        env |= {"GIT_COMMITTER_NAME": PATCHKIT_NAME, "GIT_COMMITTER_EMAIL": PATCHKIT_EMAIL}
        env["GIT_COMMITTER_DATE"] = date
    return env


class Repo:
    """A git repository (work tree root ``path``)."""

    def __init__(self, path: Path, env: Mapping[str, str] | None = None):
        self.path = Path(path)
        self.env = dict(env or {})  # added to every call (e.g. a quarantine object directory)
        self._git = gitpython.Git(str(self.path))

    # ------------------------------------------------------------------ running git
    def run_bytes(
        self,
        *args: str | os.PathLike,
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        check: bool = True,
    ) -> tuple[int, bytes, str]:
        """Run ``git args``; return (exit status, stdout bytes, stderr text). Raise on failure if ``check``."""
        argv = [str(a) for a in args]
        full_env = {**_QUIET_ENV, **self.env, **(env or {})}
        with tempfile.TemporaryFile() as stdin:
            if input is not None:
                stdin.write(input)
                stdin.seek(0)
            status, out, err = self._git.execute(
                ["git", *argv],
                istream=stdin,
                with_extended_output=True,
                with_exceptions=False,
                stdout_as_string=False,
                strip_newline_in_stdout=False,
                env=full_env,
            )
        err_text = err.decode("utf-8", "replace") if isinstance(err, bytes) else err
        if check and status != 0:
            raise GitFailed(argv, status, err_text)
        return status, out, err_text

    def run(
        self,
        *args: str | os.PathLike,
        env: Mapping[str, str] | None = None,
        input: bytes | str | None = None,
        check: bool = True,
    ) -> str:
        """Run ``git args`` and return stdout as text without the trailing newline."""
        data = input.encode() if isinstance(input, str) else input
        _, out, _ = self.run_bytes(*args, env=env, input=data, check=check)
        return out.decode("utf-8", "surrogateescape").rstrip("\n")

    def ok(self, *args: str, env: Mapping[str, str] | None = None) -> bool:
        """True when ``git args`` exits 0."""
        return self.run_bytes(*args, env=env, check=False)[0] == 0

    # ------------------------------------------------------------------ queries
    @property
    def git_dir(self) -> Path:
        return (self.path / self.run("rev-parse", "--git-dir")).resolve()

    def rev(self, name: str) -> str | None:
        """The full id ``name`` resolves to, or None."""
        status, out, _ = self.run_bytes("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False)
        return out.decode().strip() if status == 0 else None

    def tree_of(self, commit: str) -> str:
        return self.run("rev-parse", f"{commit}^{{tree}}")

    def head_ref(self) -> str:
        """The ref HEAD points at (``refs/heads/x``), or ``HEAD`` when detached."""
        status, out, _ = self.run_bytes("symbolic-ref", "-q", "HEAD", check=False)
        return out.decode().strip() if status == 0 else "HEAD"

    def commit_message(self, commit: str) -> str:
        """The exact message bytes of ``commit`` (as text), as stored in the commit object."""
        raw = self.run_bytes("cat-file", "commit", commit)[1]
        return raw.split(b"\n\n", 1)[1].decode("utf-8", "surrogateescape") if b"\n\n" in raw else ""

    def blob_bytes(self, obj: str) -> bytes:
        return self.run_bytes("cat-file", "blob", obj)[1]

    def ls_tree(self, tree: str, paths: Sequence[str] = ()) -> dict[str, tuple[str, str]]:
        """path -> (mode, object id) for every file under ``tree`` (restricted to ``paths``)."""
        out = self.run_bytes("ls-tree", "-r", "-z", "--full-tree", tree, "--", *paths)[1]
        entries: dict[str, tuple[str, str]] = {}
        for record in out.split(b"\0"):
            if record:
                meta, name = record.split(b"\t", 1)
                mode, _, oid = meta.decode().split()
                entries[name.decode("utf-8", "surrogateescape")] = (mode, oid)
        return entries

    def porcelain_status(self) -> list[str]:
        """``git status --porcelain`` lines, untracked files included."""
        out = self.run_bytes("status", "--porcelain", "-z", "--untracked-files=all")[1]
        return [r.decode("utf-8", "surrogateescape") for r in out.split(b"\0") if r]

    def first_parent_log(self, stop: str, start: str = "HEAD") -> list[str]:
        """Commits in ``stop..start`` following first parents, oldest first."""
        out = self.run("rev-list", "--first-parent", "--reverse", f"{stop}..{start}")
        return out.split() if out else []


def open_repo(path: Path, what: str = "target") -> Repo:
    """The git repository at ``path`` (its top level), or BadInput naming the path."""
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"{what} {path} does not exist", hint="run `patchkit base fetch` first or pass the right path")
    repo = Repo(path)
    status, out, _ = repo.run_bytes("rev-parse", "--show-toplevel", check=False)
    if status != 0:
        raise BadInput(f"{what} {path} is not a git repository", hint="run `patchkit base fetch` to create it")
    top = Path(out.decode().strip())
    if top.resolve() != path.resolve():
        raise BadInput(f"{what} {path} is inside the git repository {top}, not its top level")
    return repo


def init_repo(path: Path, branch: str = "patchkit") -> Repo:
    """Create an empty repository at ``path`` on ``branch``."""
    path.mkdir(parents=True, exist_ok=True)
    repo = Repo(path)
    repo.run("init", "-q", f"--initial-branch={branch}", ".")
    return repo


def temp_index_env(index_file: Path) -> dict[str, str]:
    """Environment that makes git stage into ``index_file`` instead of the repository's index."""
    return {"GIT_INDEX_FILE": str(index_file)}


class Quarantine:
    """New objects go to a temporary object directory until :meth:`publish` copies them in.

    Staging and commit-tree write blobs, trees and commits; in quarantine they never reach the
    repository unless the transaction goes ahead, so a refused or interrupted apply leaves even
    ``.git/objects`` as it was (the same idea as git's receive-pack quarantine).
    """

    def __init__(self, repo: Repo, directory: Path):
        self.objects = directory / "objects"
        self.objects.mkdir()
        self.target_objects = repo.git_dir / "objects"
        env = {"GIT_OBJECT_DIRECTORY": str(self.objects), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(self.target_objects)}
        self.repo = Repo(repo.path, {**repo.env, **env})

    def publish(self) -> int:
        """Copy the quarantined loose objects into the repository (each one atomically); return the count."""
        count = 0
        for source in sorted(self.objects.glob("[0-9a-f][0-9a-f]/*")):
            dest = self.target_objects / source.parent.name / source.name
            if dest.exists():
                continue
            dest.parent.mkdir(exist_ok=True)
            partial = dest.with_name(f"tmp_{source.name}")
            shutil.copyfile(source, partial)
            os.replace(partial, dest)
            count += 1
        return count


@contextlib.contextmanager
def quarantine(repo: Repo) -> Iterator[Quarantine]:
    """A :class:`Quarantine` for ``repo``, deleted on exit (published objects stay)."""
    with tempfile.TemporaryDirectory(prefix="patchkit-objects-") as tmp:
        yield Quarantine(repo, Path(tmp))
