"""Files that are never half written, the one inter-process lock, and text that must be UTF-8.

- :func:`atomic_write`: write aside, fsync, rename over the old file, fsync the directory. A reader
  (or a crash at any moment) sees the old bytes or the new ones, never a mix.
- :func:`file_lock`: an exclusive ``flock`` on a lock file. The kernel drops it when the holder
  exits, however it exits (kill -9 included), so there is never a stale lock to delete by hand; the
  holder writes who it is into the file, so a waiter can say whom it waits for.
- :func:`read_utf8`: a file's text, or BadInput naming the file, line and byte that are not UTF-8.
- :func:`scratch_dir`: a temporary folder that is removed even when Ctrl-C lands in its removal, and
  whose leftovers (a kill -9) the next patchkit removes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from patchkit.errors import BadInput, Location
from patchkit.hooks import pause

#: Prefix of every temporary file patchkit writes next to a file it replaces.
TEMP_PREFIX = ".patchkit-tmp-"


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_aside(path: Path, data: bytes, *, mode: int | None = None, durable: bool = True) -> Path:
    """Write ``data`` to a new temporary file next to ``path`` (fsynced when ``durable``); return it."""
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=f"-{Path(path).name}", dir=Path(path).parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def atomic_write(path: Path, data: bytes | str, *, mode: int | None = None, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring). ``mode`` defaults to the
    old file's permissions, or 0o666 minus the umask for a new file."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~current_umask()
    tmp = write_aside(path, raw, mode=mode, durable=durable)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------- locks
_held_here: set[str] = set()


class LockBusy(BadInput):
    """Another process held the lock for longer than we were willing to wait."""


def _holder(handle: int) -> str:
    os.lseek(handle, 0, os.SEEK_SET)
    return os.read(handle, 512).decode("utf-8", "replace").strip() or "another process"


@contextlib.contextmanager
def file_lock(
    path: Path,
    *,
    what: str,
    holder: str,
    wait_s: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    hint: str | None = None,
) -> Iterator[None]:
    """Hold the exclusive lock ``path`` (created if needed) for the block.

    ``what`` names the locked thing in messages ("the target /x"), ``holder`` who we are
    ("patchkit apply (pid 12)"). ``wait_s`` None waits as long as it takes; otherwise LockBusy after
    that many seconds. ``on_wait`` is told once that we wait, and for whom.
    """
    path = Path(path)
    key = str(path.absolute())
    if key in _held_here:  # re-entrant within a process: flock would wait for ourselves
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise BadInput(
            f"cannot create the lock file {path}: {exc.strerror}",
            location=Location(str(path)),
            hint=hint or f"make {path.parent} writable, or run as its owner",
        ) from None
    try:
        _acquire(handle, what, wait_s, on_wait)
        os.ftruncate(handle, 0)
        os.write(handle, f"{holder}\n".encode())
        _held_here.add(key)
        try:
            yield
        finally:
            _held_here.discard(key)
            os.ftruncate(handle, 0)
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)


def _acquire(handle: int, what: str, wait_s: float | None, on_wait: Callable[[str], None] | None) -> None:
    deadline = None if wait_s is None else time.monotonic() + wait_s
    told = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
        holder = _holder(handle)
        if deadline is not None and time.monotonic() >= deadline:
            raise LockBusy(
                f"{holder} holds {what}; gave up waiting after {wait_s:g} s",
                hint="try again when it has finished (PATCHKIT_LOCK_WAIT=SECONDS waits longer)",
            )
        if not told and on_wait:
            on_wait(f"{holder} holds {what}; waiting")
            told = True
        time.sleep(0.05)


# ---------------------------------------------------------------------- text
def read_utf8(path: Path, what: str = "file") -> str:
    """The text of ``path``; bytes that are not UTF-8 are BadInput naming file, line and byte."""
    data = Path(path).read_bytes()
    return decode_utf8(data, path, what)


def decode_utf8(data: bytes, path: Path | str, what: str = "file") -> str:
    """``data`` (the bytes of ``path``) as text, or BadInput at the line of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise BadInput(
            f"{what} is not valid UTF-8: byte 0x{data[exc.start]:02x} at column {column}",
            location=Location(str(path), line),
            hint="save it as UTF-8",
        ) from None


# ---------------------------------------------------------------------- scratch folders
#: Prefix of every scratch folder patchkit makes in the temporary directory: ``patchkit-<what>-<pid>-``.
SCRATCH_PREFIX = "patchkit-"


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the block, then raise the KeyboardInterrupt one of them would have
    raised: a cleanup (an ``rmtree``) is never cut in half. Only the main thread can hold signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        raise KeyboardInterrupt(signal.Signals(received[0]).name)


@contextlib.contextmanager
def scratch_dir(what: str) -> Iterator[Path]:
    """A fresh folder ``patchkit-<what>-<pid>-XXXX`` in the temporary directory, removed on exit even
    when a signal arrives then (the removal runs with signals held). Folders an earlier process left
    (killed with -9, say: nothing could remove them) are removed first, once their process is gone."""
    prefix = f"{SCRATCH_PREFIX}{what}-"
    remove_orphans(prefix)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    try:
        yield path
    finally:
        with signals_deferred():
            pause(f"scratch-cleanup-{what}")
            _rmtree_quietly(path)


def remove_orphans(prefix: str, directory: Path | None = None) -> int:
    """Remove the ``<prefix><pid>-*`` folders of ours whose process no longer exists; return how many."""
    removed = 0
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    root = directory or Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            match = pattern.match(entry.name)
            if not match or not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
            if not _alive(int(match.group(1))):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rmtree_quietly(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
