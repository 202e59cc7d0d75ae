"""The one git wrapper. Every git call patchkit makes goes through :class:`Repo` (and :mod:`patchkit.proc`).

Git runs with a fixed configuration, so nothing about the machine or the target can change what
patchkit writes or reads: commit ids, refreshed patches and the bytes of patched files are the same
everywhere.

- The system and global config files are switched off, the locale is C, pathspecs are literal, and
  the repository-locating ``GIT_*`` variables of the caller's environment are dropped (so a
  ``GIT_DIR`` or ``GIT_INDEX_FILE`` left in a shell cannot redirect a command to another repository).
- :data:`FIXED_CONFIG` is passed as ``-c`` options, which beat the target's own ``.git/config``:
  no line-ending conversion (``core.autocrlf``, ``core.eol``), no hooks, no fsmonitor, no colour,
  a fixed diff algorithm and context, no signatures or notes in format-patch, and so on.
- Read-only commands take no optional locks (``GIT_OPTIONAL_LOCKS=0``): ``git status`` never
  rewrites the index behind a user's concurrent git.
- Every git child runs in its own process group: a terminal's Ctrl-C reaches patchkit only, which
  rolls back or finishes; git is never killed half way by the terminal.

The work tree is never written through git's checkout (see :mod:`patchkit.patchset.transaction`),
so in-tree ``.gitattributes`` (``eol=crlf``, filters) cannot turn the bytes of a patch into others.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchkit import fsutil, proc
from patchkit.errors import BadInput, Internal

#: Identity of every commit patchkit creates itself (base commits, committer of patch commits).
PATCHKIT_NAME = "patchkit"
PATCHKIT_EMAIL = "patchkit@localhost"

FIXED_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",  # status and diff never rewrite the index (no index.lock of ours)
    "GIT_NO_REPLACE_OBJECTS": "1",  # refs/replace cannot substitute the objects we read
    "GIT_LITERAL_PATHSPECS": "1",  # paths from patches are names, never glob patterns
    "GIT_PAGER": "cat",
    "GIT_EDITOR": ":",
    "LC_ALL": "C",
    "LANG": "C",
}

#: ``-c`` options of every git call: they override the target's own config.
FIXED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.autocrlf", "false"),
    ("core.eol", "lf"),
    ("core.safecrlf", "false"),
    ("core.symlinks", "true"),
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.attributesFile", os.devnull),
    ("core.quotePath", "false"),
    ("color.ui", "false"),
    ("diff.algorithm", "myers"),
    ("diff.context", "3"),
    ("diff.interHunkContext", "0"),
    ("diff.indentHeuristic", "true"),
    ("diff.noprefix", "false"),
    ("diff.mnemonicPrefix", "false"),
    ("diff.relative", "false"),
    ("diff.renames", "false"),
    ("diff.suppressBlankEmpty", "false"),
    ("diff.submodule", "short"),
    ("format.signOff", "false"),
    ("format.notes", "false"),
    ("format.useAutoBase", "false"),
    ("format.coverLetter", "false"),
    ("format.from", "false"),
    ("format.forceInBodyFrom", "false"),
    ("log.showSignature", "false"),
    ("log.mailmap", "false"),
    ("i18n.commitEncoding", "UTF-8"),
    ("i18n.logOutputEncoding", "UTF-8"),
    ("mailinfo.scissors", "false"),
    ("apply.whitespace", "nowarn"),
    ("apply.ignoreWhitespace", "no"),
    ("status.renames", "false"),
    ("commit.gpgSign", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("advice.detachedHead", "false"),
)

#: Caller variables that may pass through to git (transport and tracing); every other GIT_* is dropped.
_PASS_THROUGH = ("GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_ASKPASS", "GIT_PROXY_COMMAND",
                 "GIT_SSL_NO_VERIFY", "GIT_SSL_CAINFO", "GIT_HTTP_", "GIT_CURL_VERBOSE", "GIT_TRACE", "GIT_EXEC_PATH")


def _config_args() -> list[str]:
    return [arg for key, value in FIXED_CONFIG for arg in ("-c", f"{key}={value}")]


def base_env() -> dict[str, str]:
    """The caller's environment without repository-locating git variables, plus :data:`FIXED_ENV`."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k.startswith(_PASS_THROUGH)}
    return {**kept, **FIXED_ENV}


class GitFailed(Internal):
    """A git command exited non-zero where that was not expected (exit 3 unless the caller translates it).

    The message carries the command, exit code and the tail of stderr.
    """

    def __init__(self, args: Sequence[str], status: int, stderr: str):
        tail = "\n".join(stderr.strip().splitlines()[-20:])
        super().__init__(f"git {' '.join(args)} failed with exit code {status}\n{tail}")
        self.args_run = tuple(args)
        self.status = status
        self.stderr = stderr


def identity_env(name: str, email: str, date: str, *, committer: bool = True) -> dict[str, str]:
    """Environment for commit-tree: author ``name <email>`` at ``date``; committer = patchkit."""
    env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
    if committer:
        env |= {"GIT_COMMITTER_NAME": PATCHKIT_NAME, "GIT_COMMITTER_EMAIL": PATCHKIT_EMAIL}
        env["GIT_COMMITTER_DATE"] = date
    return env


@dataclass(frozen=True, kw_only=True)
class StatusEntry:
    """One ``git status --porcelain`` entry: the two-letter code (``??`` untracked) and the path."""

    code: str
    path: str

    def __str__(self) -> str:
        return f"{self.code} {self.path}"


class Repo:
    """A git repository (work tree root ``path``). ``env`` is added to every call (e.g. a quarantine)."""

    def __init__(self, path: Path, env: Mapping[str, str] | None = None):
        self.path = Path(path)
        self.env = dict(env or {})
        self._dirs: dict[str, Path] = {}

    def with_env(self, env: Mapping[str, str]) -> Repo:
        """The same repository with ``env`` added to every call (the git directories are shared)."""
        other = Repo(self.path, {**self.env, **env})
        other._dirs = self._dirs
        return other

    # ------------------------------------------------------------------ running git
    def run_bytes(
        self,
        *args: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> tuple[int, bytes, str]:
        """Run ``git args``; return (exit status, stdout bytes, stderr text). Raise GitFailed if ``check``."""
        argv = [str(a) for a in args]
        done = proc.run_bytes(
            ["git", *_config_args(), *argv],
            cwd=self.path,
            env={**base_env(), **self.env, **(env or {})},
            replace_env=True,
            check=False,
            timeout=timeout,
            input=input,
            own_group=True,
        )
        err_text = done.stderr.decode("utf-8", "replace")
        if check and done.returncode != 0:
            raise GitFailed(argv, done.returncode, err_text)
        return done.returncode, done.stdout, err_text

    def run(
        self,
        *args: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        input: bytes | str | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> str:
        """Run ``git args`` and return stdout as text without the trailing newline."""
        data = input.encode("utf-8", "surrogateescape") if isinstance(input, str) else input
        _, out, _ = self.run_bytes(*args, env=env, input=data, check=check, timeout=timeout)
        return out.decode("utf-8", "surrogateescape").rstrip("\n")

    def ok(self, *args: str, env: Mapping[str, str] | None = None) -> bool:
        """True when ``git args`` exits 0."""
        return self.run_bytes(*args, env=env, check=False)[0] == 0

    def names_z(self, *args: str | os.PathLike[str]) -> list[str]:
        """The NUL-separated names a ``-z`` command prints."""
        out = self.run_bytes(*args)[1]
        return [n.decode("utf-8", "surrogateescape") for n in out.split(b"\0") if n]

    # ------------------------------------------------------------------ where things are
    def _dir(self, key: str, flag: str) -> Path:
        if key not in self._dirs:
            self._dirs[key] = (self.path / self.run("rev-parse", flag)).resolve()
        return self._dirs[key]

    @property
    def git_dir(self) -> Path:
        """This work tree's git directory (``.git``, or ``.git/worktrees/<name>`` of a linked worktree)."""
        return self._dir("git", "--git-dir")

    @property
    def common_dir(self) -> Path:
        """Where objects and branch refs live (the main repository's ``.git`` for a linked worktree)."""
        return self._dir("common", "--git-common-dir")

    @property
    def objects_dir(self) -> Path:
        return self.common_dir / "objects"

    @property
    def index_file(self) -> Path:
        return self.git_dir / "index"

    # ------------------------------------------------------------------ queries
    def rev(self, name: str) -> str | None:
        """The full commit id ``name`` resolves to, or None."""
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

    def commit_messages(self, commits: Sequence[str]) -> dict[str, str]:
        """:meth:`commit_message` of several commits, read by one ``git cat-file --batch``."""
        if not commits:
            return {}
        out = self.run_bytes("cat-file", "--batch", input="".join(f"{c}\n" for c in commits).encode())[1]
        messages: dict[str, str] = {}
        at = 0
        for commit in commits:
            header_end = out.index(b"\n", at)
            header = out[at:header_end].decode().split()
            if len(header) != 3 or header[1] != "commit":
                raise Internal(f"git cat-file --batch: {commit} is not a commit ({' '.join(header[1:])})")
            size = header[2]
            raw = out[header_end + 1 : header_end + 1 + int(size)]
            at = header_end + 1 + int(size) + 1  # the object, then one newline
            messages[commit] = raw.split(b"\n\n", 1)[1].decode("utf-8", "surrogateescape") if b"\n\n" in raw else ""
        return messages

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

    def status_entries(self) -> list[StatusEntry]:
        """Uncommitted changes (``git status --porcelain``), untracked files included, renames as D + A."""
        out = self.run_bytes("status", "--porcelain", "-z", "--untracked-files=all", "--no-renames")[1]
        return [
            StatusEntry(code=r[:2].decode(), path=r[3:].decode("utf-8", "surrogateescape"))
            for r in out.split(b"\0")
            if r
        ]

    def porcelain_status(self) -> list[str]:
        """``git status --porcelain`` lines (``XY path``), untracked files included."""
        return [str(entry) for entry in self.status_entries()]

    def unwatched(self) -> list[tuple[str, str]]:
        """Index entries whose work-tree bytes ``git status`` does not compare, as (flag, path): marked
        ``assume-unchanged`` or ``skip-worktree`` (``git update-index``), or unmerged. An edit of such a
        file is invisible to :meth:`status_entries`."""
        flags = {"S": "skip-worktree", "M": "unmerged"}
        found = []
        for record in self.run_bytes("ls-files", "-v", "-z")[1].split(b"\0"):
            tag, path = record[:1].decode(), record[2:].decode("utf-8", "surrogateescape")
            if record and tag != "H":
                found.append(("assume-unchanged" if tag.islower() else flags.get(tag, f"tag {tag}"), path))
        return found

    def untracked(self) -> list[str]:
        """Untracked files that git does not ignore."""
        return self.names_z("ls-files", "--others", "--exclude-standard", "-z")

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
    status, out, err = repo.run_bytes("rev-parse", "--show-toplevel", check=False)
    if status != 0:
        if "dubious ownership" in err:
            raise BadInput(
                f"git refuses to work in {what} {path}: it is owned by another user",
                hint=f"run patchkit as the owner of {path}, or mark it safe: git config --global --add "
                f"safe.directory {path}",
            )
        raise BadInput(f"{what} {path} is not a git repository", hint=_tree_hint(path))
    top = Path(out.decode().strip())
    if top.resolve() == _OWN_CHECKOUT:  # patchkit's own checkout is never an SGLang tree
        raise BadInput(f"{what} {path} is a folder of patchkit's own checkout {top}, not a tree to patch",
                       hint=_tree_hint(path))
    if top.resolve() != path.resolve():
        raise BadInput(f"{what} {path} is inside the git repository {top}, not its top level",
                       hint=f"pass --target {top}")
    return repo


#: The checkout patchkit runs from (an editable install); a plain install's site-packages is no repository.
_OWN_CHECKOUT = Path(__file__).resolve().parents[1]


def _tree_hint(path: Path) -> str:
    """What to pass instead of a folder that holds no tree to patch."""
    if not any(path.iterdir()):
        return f"make the base tree there with `patchkit base fetch --dest {path}`"
    return ("pass --target with a tree `patchkit base fetch` made (without --target: the set's own base tree; "
            "`patchkit base fetch --dest NEW_DIR` makes one elsewhere)")


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
    repository unless the transaction goes ahead, so a refused or interrupted command leaves even
    the object store as it was (the same idea as git's receive-pack quarantine).
    """

    def __init__(self, repo: Repo, directory: Path):
        self.objects = directory / "objects"
        self.objects.mkdir()
        self.target_objects = repo.objects_dir
        env = {"GIT_OBJECT_DIRECTORY": str(self.objects), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(self.target_objects)}
        self.repo = repo.with_env(env)

    def publish(self) -> int:
        """Copy the quarantined loose objects into the repository (each one atomically); return the count."""
        count = 0
        for source in sorted(self.objects.glob("[0-9a-f][0-9a-f]/*")):
            dest = self.target_objects / source.parent.name / source.name
            if dest.exists():
                continue
            dest.parent.mkdir(exist_ok=True)
            partial = dest.with_name(f"tmp_obj_patchkit_{source.name}")
            shutil.copyfile(source, partial)
            os.replace(partial, dest)
            count += 1
        return count


@contextlib.contextmanager
def quarantine(repo: Repo) -> Iterator[Quarantine]:
    """A :class:`Quarantine` for ``repo``, deleted on exit (published objects stay), also when Ctrl-C
    lands in its removal; one a killed patchkit left is removed by the next."""
    with fsutil.scratch_dir("objects") as tmp:
        yield Quarantine(repo, tmp)
