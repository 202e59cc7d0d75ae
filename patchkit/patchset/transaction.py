"""One write to a target or a set, all or nothing: the transaction behind apply, refresh, lock and port.

**A target** (a git work tree) is changed in one step, :meth:`Transaction.move`, after everything
else has been done in quarantine (new objects in a temporary object directory, staging in a scratch
index; nothing of the target is touched). The step:

1. *preflight*: everything that could make the work-tree update fail is checked while nothing has
   moved yet: git's ``index.lock``, that every file the move writes or deletes is still the base's
   (an ignored file in the way counts), that no directory on the way is a symlink, and that every
   directory and file involved can be written (permissions, the immutable and append-only flags),
   in the work tree and in the git directories (a linked worktree's common dir included);
2. with SIGINT and SIGTERM held: publish the quarantined objects, write the journal (fsynced),
   move the ref with a compare-and-swap ``update-ref``, write the changed files (each one written
   aside and renamed into place, blob bytes exactly: no line-ending conversion, no filters), update
   the index for exactly those paths, delete the journal. If a file cannot be written after all,
   the files already written are restored, the ref is moved back and the command exits 2 with the
   cause: the target is as it was.

A kill -9 inside step 2 leaves the journal; :func:`recover` (run under the target lock by the next
apply, status, refresh or port) then looks at the ref:

- it had not moved: nothing had been written, so the journal is dropped and nothing is touched;
- it had moved: every path of the move is the base's or the patch's bytes, or something else. Paths
  still at the base are brought to the patch; if any path holds something else (the user edited it
  since), nothing is touched and the command refuses with the list and what to do.

Recovery never deletes a lock file it did not create, and never resets the work tree: files the move
does not concern are not even read.

**A set directory** (patches, series, manifest) is written with :func:`write_files`: every new file
written aside and fsynced, then a journal naming the renames, then the renames, then the journal
removed. :func:`recover_files` rolls an interrupted write forward, so a reader never sees half a set.

Both kinds of write take a lock first (:func:`target_lock`, :func:`set_lock`): a second patchkit on
the same target waits ("... holds <tree>; waiting") and gives up with exit 2 after
``$PATCHKIT_LOCK_WAIT`` seconds (default 120).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit import error_handler, fsutil, hooks, paths
from patchkit.errors import BadInput, Internal, Interrupted, Location
from patchkit.git import GitFailed, Quarantine, Repo, quarantine
from patchkit.hooks import pause

JOURNAL_NAME = "patchkit-apply.json"
LOCK_NAME = "patchkit.lock"
SET_JOURNAL_NAME = ".patchkit-write.json"
LOCK_WAIT_ENV = "PATCHKIT_LOCK_WAIT"
DEFAULT_LOCK_WAIT_S = 120.0
#: How long recovery waits for a running git to release ``index.lock`` before it refuses.
INDEX_LOCK_WAIT_S = 5.0

Progress = Callable[[str], None]

_ZERO = "0" * 40
_GITLINK = "160000"
_SYMLINK = "120000"


# ---------------------------------------------------------------------- signals
@contextlib.contextmanager
def signals_held(what: str) -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the block (the commit step); raise Interrupted after it completed.

    ``what`` says what was completed, for the message.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = hooks.held_signals
    received.clear()
    previous = {
        s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        raise Interrupted(f"interrupted during the commit step, which was completed first: {what}")


# ---------------------------------------------------------------------- locks
def lock_wait_s() -> float:
    value = os.environ.get(LOCK_WAIT_ENV)
    try:
        return float(value) if value else DEFAULT_LOCK_WAIT_S
    except ValueError:
        raise BadInput(f"${LOCK_WAIT_ENV}={value!r} is not a number of seconds") from None


def _holder(command: str) -> str:
    return f"another patchkit {command} (pid {os.getpid()})"


@contextlib.contextmanager
def target_lock(repo: Repo, command: str, progress: Progress | None = None) -> Iterator[None]:
    """The per-target lock (``<git dir>/patchkit.lock``) for the block."""
    with fsutil.file_lock(
        repo.git_dir / LOCK_NAME,
        what=str(repo.path),
        holder=_holder(command),
        wait_s=lock_wait_s(),
        on_wait=_telling(progress),
        hint=f"the target {repo.path} is not writable: make it (and its .git) writable, or run as its owner",
    ):
        yield


@contextlib.contextmanager
def set_lock(set_dir: Path, command: str, progress: Progress | None = None) -> Iterator[None]:
    """The lock of a set directory (kept in the patchkit home: the set directory itself stays as committed)."""
    key = hashlib.sha256(str(Path(set_dir).resolve()).encode()).hexdigest()[:16]
    with fsutil.file_lock(
        paths.locks_dir() / f"set-{key}.lock",
        what=f"the set {set_dir}",
        holder=_holder(command),
        wait_s=lock_wait_s(),
        on_wait=_telling(progress),
    ):
        yield


def _telling(progress: Progress | None) -> Progress:
    """Waiting is said on stderr as a line of its own (a spinner would hide it in logs), and to ``progress``."""

    def tell(text: str) -> None:
        sys.stderr.write(f"patchkit: {text}\n")
        sys.stderr.flush()
        if progress:
            progress(text)

    return tell


# ---------------------------------------------------------------------- the work-tree plan
@dataclass(frozen=True, kw_only=True)
class Entry:
    """A file as git records it: mode (100644, 100755, 120000) and blob id."""

    mode: str
    oid: str


@dataclass(frozen=True, kw_only=True)
class Change:
    """One path the move changes: its entry before (None: created) and after (None: deleted)."""

    path: str
    old: Entry | None
    new: Entry | None


def plan(repo: Repo, old: str, new: str) -> tuple[Change, ...]:
    """Every path that differs between the commits ``old`` and ``new`` (no rename detection)."""
    out = repo.run_bytes("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", old, new)[1]
    fields = out.split(b"\0")
    changes = []
    for meta, name in zip(fields[0::2], fields[1::2], strict=False):  # a trailing empty field
        if not meta:
            continue
        old_mode, new_mode, old_oid, new_oid, _ = meta[1:].decode().split()
        changes.append(
            Change(
                path=name.decode("utf-8", "surrogateescape"),
                old=None if old_mode == "000000" else Entry(mode=old_mode, oid=old_oid),
                new=None if new_mode == "000000" else Entry(mode=new_mode, oid=new_oid),
            )
        )
    return tuple(changes)


class _Hasher:
    """Blob ids of work-tree files, computed here as git does (``blob <size>\\0<bytes>``)."""

    def __init__(self, repo: Repo):
        self.algorithm = repo.run("rev-parse", "--show-object-format", check=False) or "sha1"
        self.filemode = repo.run("config", "--bool", "core.filemode", check=False) != "false"

    def entry(self, root: Path, rel: str) -> Entry | str | None:
        """The work tree's entry at ``rel``: None when absent, "directory" or "other" when not a file."""
        path = root / rel
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return "other"
        if stat.S_ISLNK(info.st_mode):
            return Entry(mode=_SYMLINK, oid=self.oid(os.fsencode(os.readlink(path))))
        if stat.S_ISDIR(info.st_mode):
            return "directory"
        if not stat.S_ISREG(info.st_mode):
            return "other"
        mode = "100755" if info.st_mode & 0o100 else "100644"
        return Entry(mode=mode, oid=self.oid(path.read_bytes()))

    def oid(self, data: bytes) -> str:
        return hashlib.new(self.algorithm, b"blob %d\0" % len(data) + data).hexdigest()

    def same(self, found: Entry | str | None, want: Entry | None) -> bool:
        if found is None or want is None or isinstance(found, str):
            return found is None and want is None
        if not self.filemode and found.mode != _SYMLINK and want.mode != _SYMLINK:
            return found.oid == want.oid
        return found == want


def read_blobs(repo: Repo, oids: Iterable[str]) -> dict[str, bytes]:
    """The bytes of each blob, in one ``git cat-file --batch``."""
    wanted = sorted(set(oids))
    if not wanted:
        return {}
    out = repo.run_bytes("cat-file", "--batch", input="".join(f"{o}\n" for o in wanted).encode())[1]
    blobs: dict[str, bytes] = {}
    position = 0
    for oid in wanted:
        header_end = out.index(b"\n", position)
        header = out[position:header_end].split()
        if len(header) != 3:
            raise Internal(f"git cat-file --batch: object {oid} is missing ({out[position:header_end]!r})")
        size = int(header[2])
        blobs[oid] = out[header_end + 1 : header_end + 1 + size]
        position = header_end + 1 + size + 1
    return blobs


# ---------------------------------------------------------------------- preflight
@dataclass(frozen=True, kw_only=True)
class Problem:
    path: str
    reason: str


class NotWritable(BadInput):
    """Something would make the work-tree update fail; nothing was changed."""


_FS_IOC_GETFLAGS = 0x80086601
_FS_IMMUTABLE_FL = 0x10
_FS_APPEND_FL = 0x20


def _flags_problem(path: Path) -> str | None:
    """'immutable' or 'append-only' when the file carries that attribute (chattr +i / +a)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None  # a symlink, or unreadable: the write itself will tell
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, b"\0" * 8)[:4], sys.byteorder)
    except OSError:
        return None  # the file system keeps no such flags
    finally:
        os.close(fd)
    if flags & _FS_IMMUTABLE_FL:
        return "immutable (chattr +i)"
    if flags & _FS_APPEND_FL:
        return "append-only (chattr +a)"
    return None


def _probe_dir(directory: Path) -> str | None:
    """Why a file cannot be created (and renamed) in ``directory``, or None."""
    flags = _flags_problem(directory)
    if flags:
        return f"directory is {flags}"
    try:
        fd, probe = tempfile.mkstemp(prefix=".patchkit-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _existing_ancestor(root: Path, rel: str) -> Path:
    here = (root / rel).parent
    while not here.exists() and here != root:
        here = here.parent
    return here


def preflight(repo: Repo, changes: Sequence[Change], ref: str, hasher: _Hasher, new_objects: Iterable[Path]) -> None:
    """Refuse (NotWritable, exit 2) anything that could make the update fail; nothing is changed."""
    index_lock = repo.git_dir / "index.lock"
    if index_lock.exists():
        raise NotWritable(
            f"git is busy in {repo.path}: {index_lock} exists",
            location=Location(str(index_lock)),
            hint="wait for the other git command to finish; if none is running, a git process was killed: "
            f"delete {index_lock} yourself, then run patchkit again",
        )
    problems = _worktree_problems(repo, changes, hasher) + _git_dir_problems(repo, ref, new_objects)
    if problems:
        shown = "; ".join(f"{p.path}: {p.reason}" for p in problems[:8]) + (" ..." if len(problems) > 8 else "")
        raise NotWritable(
            f"cannot update the target {repo.path} (nothing was changed): {shown}",
            location=Location(str(repo.path / problems[0].path)),
            hint=_fix_for(problems),
        )


def _fix_for(problems: Sequence[Problem]) -> str:
    reasons = " ".join(p.reason for p in problems)
    if "immutable" in reasons or "append-only" in reasons:
        return "remove the attribute (chattr -i / chattr -a PATH), then run patchkit again"
    if "in the way" in reasons or "symlink" in reasons:
        return "move those files away (they are not part of the base), then run patchkit again"
    return "make the target and its .git writable (e.g. chmod -R u+w), or run patchkit as their owner"


def _worktree_problems(repo: Repo, changes: Sequence[Change], hasher: _Hasher) -> list[Problem]:
    root = repo.path
    deleted = {c.path for c in changes if c.new is None}
    problems: list[Problem] = []
    probed: dict[Path, str | None] = {}
    for change in changes:
        if (change.new and change.new.mode == _GITLINK) or (change.old and change.old.mode == _GITLINK):
            problems.append(Problem(path=change.path, reason="a submodule: patchkit does not move submodules"))
            continue
        parts = change.path.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            if (root / prefix).is_symlink():
                problems.append(Problem(path=prefix, reason="a symlink on the way to " + change.path))
                break
            if (root / prefix).exists() and not (root / prefix).is_dir() and prefix not in deleted:
                problems.append(Problem(path=prefix, reason="a file where a directory must be"))
                break
        found = hasher.entry(root, change.path)
        if not hasher.same(found, change.old):
            what = "in the way (not tracked by git)" if change.old is None else "differs from the base"
            problems.append(Problem(path=change.path, reason=what))
            continue
        if change.old is not None and change.old.mode != _SYMLINK:
            flags = _flags_problem(root / change.path)
            if flags:
                problems.append(Problem(path=change.path, reason=f"file is {flags}"))
        directory = _existing_ancestor(root, change.path)
        if directory not in probed:
            probed[directory] = _probe_dir(directory)
        if probed[directory]:
            rel = directory.relative_to(root).as_posix() if directory != root else "."
            problems.append(Problem(path=rel, reason=f"cannot write there ({probed[directory]})"))
    return _unique(problems)


def _git_dir_problems(repo: Repo, ref: str, new_objects: Iterable[Path]) -> list[Problem]:
    ref_dir = repo.git_dir if ref == "HEAD" else (repo.common_dir / ref).parent
    directories = {repo.git_dir, repo.common_dir, repo.objects_dir, _existing_ancestor(repo.common_dir, ref)}
    fanout = {repo.objects_dir / o.parent.name for o in new_objects}
    directories |= {d for d in fanout if d.exists()}
    if ref_dir.exists():
        directories.add(ref_dir)
    problems = []
    for directory in sorted(directories):
        reason = _probe_dir(directory)
        if reason:
            where = os.path.relpath(directory, repo.path)
            problems.append(Problem(path=where, reason=f"cannot write there ({reason})"))
    return problems


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


# ---------------------------------------------------------------------- writing the work tree
def _write_entry(root: Path, rel: str, entry: Entry | None, data: bytes | None) -> None:
    """Make the work tree's ``rel`` exactly ``entry`` (None: absent), each file written aside and renamed."""
    path = root / rel
    if entry is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        _remove_empty_parents(root, path.parent)
        return
    assert data is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    if entry.mode == _SYMLINK:
        temp = path.with_name(f"{fsutil.TEMP_PREFIX}{os.getpid()}-{path.name}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        os.symlink(os.fsdecode(data), temp)
        os.replace(temp, path)
        return
    mode = (0o777 if entry.mode == "100755" else 0o666) & ~fsutil.current_umask()
    temp = fsutil.write_aside(path, data, mode=mode, durable=False)
    try:
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _remove_empty_parents(root: Path, directory: Path) -> None:
    """Remove directories the deletion left empty, up to the root (as git does)."""
    while directory != root and directory.is_relative_to(root):
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent


def _ordered(changes: Sequence[Change]) -> list[Change]:
    """Deletions first, deepest first (a file may give way to a directory), then the rest."""
    deletions = sorted((c for c in changes if c.new is None), key=lambda c: -c.path.count("/"))
    return deletions + [c for c in changes if c.new is not None]


def _update_index(repo: Repo, changes: Sequence[Change]) -> None:
    """The index entries of exactly these paths, set to the new commit's (other entries untouched)."""
    lines = "".join(
        f"{c.new.mode} {c.new.oid}\t{c.path}\0" if c.new else f"0 {_ZERO}\t{c.path}\0" for c in changes
    )
    repo.run_bytes("update-index", "-z", "--index-info", input=lines.encode("utf-8", "surrogateescape"))
    repo.run_bytes("update-index", "-q", "--refresh", check=False)  # stat data only; never content


# ---------------------------------------------------------------------- the journal
def journal_path(repo: Repo) -> Path:
    return repo.git_dir / JOURNAL_NAME


def pending(repo: Repo) -> bool:
    """Whether an interrupted move left its journal (see :func:`recover`)."""
    return journal_path(repo).exists()


def _write_journal(repo: Repo, *, command: str, ref: str, old: str, new: str, label: str) -> None:
    record = {"version": 2, "command": command, "ref": ref, "old": old, "new": new, "set": label, "pid": os.getpid()}
    fsutil.atomic_write(journal_path(repo), json.dumps(record) + "\n")


def _drop_journal(repo: Repo) -> None:
    journal_path(repo).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        fsutil.fsync_dir(repo.git_dir)


def _cas(repo: Repo, ref: str, new: str, expected: str, message: str) -> bool:
    no_deref = ["--no-deref"] if ref == "HEAD" else []
    return repo.run_bytes("update-ref", *no_deref, "-m", message, ref, new, expected, check=False)[0] == 0


def _current(repo: Repo, ref: str) -> str | None:
    return repo.rev(ref)


# ---------------------------------------------------------------------- the transaction
@dataclass(frozen=True, kw_only=True)
class Moved:
    """What :meth:`Transaction.move` did."""

    ref: str
    old: str
    new: str
    files: int  # work-tree paths written or deleted


@dataclass(frozen=True, kw_only=True)
class Transaction:
    """A write to one target, under its lock. Build objects through :attr:`staging` (quarantined),
    then make them the target's with :meth:`move`; leaving the block without a move changes nothing."""

    repo: Repo  # the target
    objects: Quarantine
    command: str  # "apply", "refresh", "port": named in messages and the journal
    recovered: str | None  # what recovery did before this transaction began, if anything

    @property
    def staging(self) -> Repo:
        """The target with new objects going to quarantine (for staging, commit-tree, format-patch)."""
        return self.objects.repo

    def move(self, *, ref: str, old: str, new: str, label: str) -> Moved:
        """Move ``ref`` from ``old`` to ``new`` and the work tree and index with it (module docstring)."""
        repo = self.repo
        changes = plan(self.staging, old, new)
        hasher = _Hasher(repo)
        new_blobs = read_blobs(self.staging, (c.new.oid for c in changes if c.new))
        old_blobs = read_blobs(repo, (c.old.oid for c in changes if c.old))
        preflight(repo, changes, ref, hasher, self.objects.objects.glob("[0-9a-f][0-9a-f]/*"))
        with signals_held(f"{ref} is at {new[:12]} and the work tree matches it"):
            self.objects.publish()
            _write_journal(repo, command=self.command, ref=ref, old=old, new=new, label=label)
            pause("journal")
            if not _cas(repo, ref, new, old, f"patchkit {self.command} {label}"):
                _drop_journal(repo)
                raise BadInput(
                    f"{ref} of {repo.path} moved while patchkit worked (it is no longer {old[:12]})",
                    hint="another program changed the target; check it, then run patchkit again",
                )
            pause("ref-moved")
            _write_or_roll_back(repo, changes, new_blobs, old_blobs, ref=ref, old=old, new=new)
            _drop_journal(repo)
            error_handler.commit_completed(f"{ref} of {repo.path} is at {new[:12]} and the work tree matches it")
        pause("committed")
        return Moved(ref=ref, old=old, new=new, files=len(changes))


def _write_or_roll_back(
    repo: Repo,
    changes: Sequence[Change],
    new_blobs: Mapping[str, bytes],
    old_blobs: Mapping[str, bytes],
    *,
    ref: str,
    old: str,
    new: str,
) -> None:
    written: list[Change] = []
    try:
        for change in _ordered(changes):
            _write_entry(repo.path, change.path, change.new, new_blobs.get(change.new.oid) if change.new else None)
            written.append(change)
            pause(f"wrote-{len(written)}")
        _update_index(repo, changes)
    except (OSError, GitFailed) as exc:
        cause = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.filename else str(exc)
        _roll_back(repo, written, old_blobs, ref=ref, old=old, new=new)
        raise NotWritable(
            f"could not update the work tree of {repo.path} ({cause.strip().splitlines()[0]}); "
            f"the branch was moved back and the tree is as it was",
            hint="fix the cause (permissions, a full disk, another git running), then run patchkit again",
        ) from None


def _roll_back(
    repo: Repo, written: Sequence[Change], old_blobs: Mapping[str, bytes], *, ref: str, old: str, new: str
) -> None:
    """Restore the files already written, then the ref; leave the journal if that fails too."""
    try:
        for change in reversed(written):
            _write_entry(repo.path, change.path, change.old, old_blobs.get(change.old.oid) if change.old else None)
    except OSError as exc:
        raise Internal(
            f"could not restore {exc.filename} after a failed update ({exc.strerror}); "
            f"{journal_path(repo)} is kept: run `patchkit status` once the cause is fixed"
        ) from None
    if not _cas(repo, ref, old, new, "patchkit: roll back a failed update"):
        raise Internal(f"could not move {ref} back to {old[:12]}; {journal_path(repo)} is kept")
    _drop_journal(repo)


@contextlib.contextmanager
def begin(
    repo: Repo, *, command: str, read_only: bool = False, progress: Progress | None = None
) -> Iterator[Transaction]:
    """Lock the target, finish or roll back an interrupted move, and open a quarantine.

    ``read_only`` (a dry run): no lock and no recovery, so a target nobody may write still works; such
    a transaction must not :meth:`~Transaction.move`.
    """
    with contextlib.nullcontext() if read_only else target_lock(repo, command, progress):
        recovered = None if read_only else recover(repo)
        with quarantine(repo) as held:
            yield Transaction(repo=repo, objects=held, command=command, recovered=recovered)


# ---------------------------------------------------------------------- recovery
class RecoveryRefused(BadInput):
    """An interrupted move cannot be finished without touching the user's changes; nothing was touched."""


def recover_if_pending(repo: Repo, command: str, progress: Progress | None = None) -> str | None:
    """:func:`recover` under the target lock, taking the lock only when there is a journal (status)."""
    if not pending(repo):
        return None
    with target_lock(repo, command, progress):
        return recover(repo)


def recover(repo: Repo) -> str | None:
    """Finish or roll back an interrupted move (caller holds the target lock); say what was done."""
    path = journal_path(repo)
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        ref, old, new = entry["ref"], entry["old"], entry["new"]
        command = entry.get("command", "apply")
    except (ValueError, KeyError, TypeError) as exc:
        aside = path.with_name(path.name + ".unreadable")
        os.replace(path, aside)  # the ref moves only after a complete journal: nothing had changed
        return f"set aside an unreadable journal ({exc.__class__.__name__}) as {aside}; nothing had changed"
    current = _current(repo, ref)
    if current in (old, new):
        _remove_temps(repo, plan(repo, old, new))
    if current == old:
        _drop_journal(repo)
        return (
            f"an interrupted {command} had not moved {ref} (still {old[:12]}): nothing had changed, "
            "nothing was touched"
        )
    if current != new:
        raise RecoveryRefused(
            f"an interrupted {command} left {path}, but {ref} is now at {current}, neither {old[:12]} nor {new[:12]}",
            location=Location(str(path)),
            hint=f"someone moved {ref} since; inspect the repository, then delete {path}",
        )
    written = _finish(repo, ref, old, new, command)
    _drop_journal(repo)
    return f"finished an interrupted {command}: {ref} is at {new[:12]}; {written} file(s) brought up to date"


def _finish(repo: Repo, ref: str, old: str, new: str, command: str) -> int:
    changes = plan(repo, old, new)
    hasher = _Hasher(repo)
    index = _index_entries(repo, [c.path for c in changes])
    todo, foreign = [], []
    for change in changes:
        found = hasher.entry(repo.path, change.path)
        if not (hasher.same(index.get(change.path), change.old) or hasher.same(index.get(change.path), change.new)):
            foreign.append(f"{change.path} (staged)")
        elif hasher.same(found, change.old) and not hasher.same(found, change.new):
            todo.append(change)
        elif not hasher.same(found, change.new):
            foreign.append(change.path)
    if foreign:
        raise RecoveryRefused(_refusal(repo, ref, old, new, command, foreign), hint=_refusal_hint(repo, ref, old, new))
    _wait_for_index_lock(repo)
    blobs = read_blobs(repo, (c.new.oid for c in todo if c.new))
    for change in _ordered(todo):
        _write_entry(repo.path, change.path, change.new, blobs.get(change.new.oid) if change.new else None)
    _update_index(repo, changes)
    return len(todo)


def _remove_temps(repo: Repo, changes: Sequence[Change]) -> None:
    """Delete the temporary files a killed move left next to the paths it was writing (ours by name)."""
    for directory in {(repo.path / c.path).parent for c in changes}:
        for temp in directory.glob(f"{fsutil.TEMP_PREFIX}*") if directory.is_dir() else ():
            with contextlib.suppress(OSError):
                temp.unlink()


def _refusal(repo: Repo, ref: str, old: str, new: str, command: str, foreign: Sequence[str]) -> str:
    return (
        f"an interrupted {command} had moved {ref} of {repo.path} to {new[:12]} but not yet the files, and these "
        f"now hold changes that are neither the base's nor the patch's: {', '.join(foreign[:10])}"
        + (" ..." if len(foreign) > 10 else "")
        + "; nothing was touched"
    )


def _refusal_hint(repo: Repo, ref: str, old: str, new: str) -> str:
    where = f"git -C {repo.path}"
    no_deref = " --no-deref" if ref == "HEAD" else ""
    return (
        f"save your changes first (copy those files aside or `{where} stash`); then either go back to the base: "
        f"`{where} update-ref{no_deref} {ref} {old}` (your files stay as they are), or take the patched files: "
        f"`{where} reset --hard {new}`; then delete {journal_path(repo)} and run `patchkit status`"
    )


def _index_entries(repo: Repo, paths_: Sequence[str]) -> dict[str, Entry]:
    if not paths_:
        return {}
    out = repo.run_bytes("ls-files", "-s", "-z", "--", *paths_)[1]
    entries = {}
    for record in out.split(b"\0"):
        if record:
            meta, name = record.split(b"\t", 1)
            mode, oid, _stage = meta.decode().split()
            entries[name.decode("utf-8", "surrogateescape")] = Entry(mode=mode, oid=oid)
    return entries


def _wait_for_index_lock(repo: Repo) -> None:
    """A git still running (it outlives a killed patchkit: its own process group) holds index.lock briefly."""
    lock = repo.git_dir / "index.lock"
    deadline = time.monotonic() + INDEX_LOCK_WAIT_S
    while lock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if lock.exists():
        raise RecoveryRefused(
            f"cannot finish the interrupted update of {repo.path}: {lock} exists and patchkit did not create it",
            location=Location(str(lock)),
            hint=f"wait for the other git command to finish; if none is running, delete {lock} yourself, "
            "then run `patchkit status`",
        )


# ---------------------------------------------------------------------- set directories
def write_files(directory: Path, contents: Mapping[str, bytes | None], *, command: str) -> tuple[str, ...]:
    """Write (bytes) or delete (None) files of ``directory`` as one transaction; return the names changed.

    Files whose bytes are already right are not rewritten. The caller holds :func:`set_lock`.
    """
    directory = Path(directory)
    changed = {n: d for n, d in contents.items() if _current_bytes(directory / n) != d}
    if not changed:
        return ()
    temps: dict[str, Path] = {}
    try:
        for name, data in changed.items():
            if data is not None:
                temps[name] = fsutil.write_aside(directory / name, data, mode=_mode_for(directory / name))
        fsutil.fsync_dir(directory)
        pause("set-written-aside")
    except BaseException:
        for temp in temps.values():
            with contextlib.suppress(OSError):
                temp.unlink()
        raise
    record = {
        "version": 1,
        "command": command,
        "pid": os.getpid(),
        "renames": [[temps[n].name, n] for n in sorted(temps)],
        "deletes": sorted(n for n, d in changed.items() if d is None),
    }
    with signals_held(f"{', '.join(sorted(changed))} written in {directory}"):
        fsutil.atomic_write(directory / SET_JOURNAL_NAME, json.dumps(record) + "\n")
        pause("set-journal")
        _roll_forward(directory, record)
    return tuple(sorted(changed))


def _current_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _mode_for(path: Path) -> int:
    return path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~fsutil.current_umask()


def _roll_forward(directory: Path, record: Mapping[str, Any]) -> None:
    renames: list[list[str]] = record["renames"]
    for number, (temp, name) in enumerate(renames, start=1):
        with contextlib.suppress(FileNotFoundError):  # renamed already (before an interruption)
            os.replace(directory / temp, directory / name)
        pause(f"set-renamed-{number}")
    deletes: list[str] = record["deletes"]
    for name in deletes:
        (directory / name).unlink(missing_ok=True)
    fsutil.fsync_dir(directory)
    (directory / SET_JOURNAL_NAME).unlink(missing_ok=True)
    fsutil.fsync_dir(directory)


def recover_files(directory: Path, command: str) -> str | None:
    """Roll an interrupted :func:`write_files` forward (under the set lock); say what was done."""
    directory = Path(directory)
    journal = directory / SET_JOURNAL_NAME
    if not journal.exists():
        return None
    with set_lock(directory, command):
        if not journal.exists():  # finished by another process while we waited
            return None
        try:
            record = json.loads(journal.read_text(encoding="utf-8"))
            names = [name for _, name in record["renames"]] + list(record["deletes"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BadInput(
                f"an interrupted write left an unreadable journal in {directory} ({exc.__class__.__name__})",
                location=Location(str(journal)),
                hint=f"check the set with `git status {directory}`, then delete {journal}",
            ) from None
        _roll_forward(directory, record)
        return f"finished an interrupted {record.get('command', 'write')} of {directory}: {', '.join(names)}"


def remove_stray_temps(directory: Path) -> None:
    """Delete temporary files an interrupted write left before its journal (caller holds the set lock)."""
    for temp in Path(directory).glob(f"{fsutil.TEMP_PREFIX}*"):
        with contextlib.suppress(OSError):
            temp.unlink()


__all__ = [
    "Change",
    "Entry",
    "Moved",
    "NotWritable",
    "RecoveryRefused",
    "Transaction",
    "begin",
    "pause",
    "pending",
    "plan",
    "recover",
    "recover_files",
    "recover_if_pending",
    "set_lock",
    "signals_held",
    "target_lock",
    "write_files",
]
