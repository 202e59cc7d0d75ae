"""One SGLang server process group: launch, wait for ``/health``, tear down, prove it is gone.

The server runs in its own session (``start_new_session``), so it is its own process-group leader and
Ctrl-C in the terminal reaches only patchkit, which then tears the group down itself. Teardown sends
SIGTERM to the group, SIGKILL after a grace period, and then checks, through psutil, that no process of
the group (nor any descendant seen while it ran, in case one left the group) is still alive.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from patchkit.errors import Failed

POLL_INTERVAL_S = 0.2


class ServerFailed(Failed):
    """The server exited early, never became healthy, or failed a request."""

    def __init__(self, message: str, *, log: Path, log_tail: str):
        super().__init__(message, hint=f"server log: {log}")
        self.log = log
        self.log_tail = log_tail


@dataclass(frozen=True)
class Teardown:
    """How a server group ended: which signals it took and what (if anything) was left alive."""

    sigterm_sent: bool
    sigkill_sent: bool
    seconds: float
    exit_code: int | None
    leftover_pids: tuple[int, ...]

    @property
    def clean(self) -> bool:
        return not self.leftover_pids


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` non-empty lines of a log file ('' if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


#: A line that says what went wrong: a Python exception (``ModuleNotFoundError: ...``), argparse's or a
#: logger's ``error:``, an ``ERROR`` record.
_ERROR_LINE = re.compile(r"^\s*[\w.]*(?:Error|Exception|Exit)(?::|$)|\b[Ee]rror:|\bERROR\b")


def first_error_line(path: Path) -> str:
    """The log's first line that says what went wrong, else its last line ('' for an empty log); the
    command line patchkit writes at the top is not the server's."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("$ ")]
    return next((line for line in lines if _ERROR_LINE.search(line)), lines[-1] if lines else "")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for proc in psutil.process_iter():
        if _pgid(proc.pid) == pgid and _alive(proc):
            members.append(proc)
    return members


class ServerGroup:
    """A server launched in its own process group, with its log file."""

    def __init__(self, name: str, argv: Sequence[str], *, env: Mapping[str, str], log: Path, port: int):
        self.name = name
        self.argv = tuple(argv)
        self.env = dict(env)
        self.log = log
        self.port = port
        self.started_at = 0.0
        self._popen: subprocess.Popen | None = None
        self._descendants: dict[int, psutil.Process] = {}

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server; its stdout and stderr go to the log file."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log_file:
            log_file.write(f"$ {' '.join(self.argv)}\n".encode())
            log_file.flush()
            # The only long-running child patchkit starts; proc.run is for run-to-completion commands.
            try:
                self._popen = subprocess.Popen(  # noqa: S603
                    self.argv, env=self.env, stdout=log_file, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )
            except OSError as error:
                raise self.failure(f"could not start {self.argv[0]}: {error}") from error
        self.started_at = time.monotonic()

    def exit_code(self) -> int | None:
        """The exit code if the server process has exited, else None."""
        return self._popen.poll() if self._popen else None

    def wait_exit(self, seconds: float) -> int | None:
        """The exit code if the server exits within ``seconds``, else None."""
        if not self._popen:
            return None
        try:
            return self._popen.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def remember_descendants(self) -> None:
        """Record every descendant so teardown can find one that moved to another group."""
        if not self._popen:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self._popen.pid).children(recursive=True):
                self._descendants.setdefault(child.pid, child)

    def failure(self, message: str) -> ServerFailed:
        return ServerFailed(f"{self.name} server: {message}", log=self.log, log_tail=log_tail(self.log))

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout_s: float, on_tick: Callable[[str], None] = lambda _line: None) -> float:
        """Poll ``/health`` until it answers 200; return seconds since start.

        Raises :class:`ServerFailed` if the process exits first or ``timeout_s`` passes.
        """
        deadline = self.started_at + timeout_s
        while True:
            self.remember_descendants()
            code = self.exit_code()
            if code is not None:
                said = first_error_line(self.log)
                raise self.failure(f"exited with code {code} before it was ready" + (f": {said}" if said else ""))
            if self.healthy():
                return time.monotonic() - self.started_at
            if time.monotonic() >= deadline:
                raise self.failure(f"not ready after {timeout_s:g}s (no 200 from /health)")
            on_tick(_last_line(self.log))
            time.sleep(POLL_INTERVAL_S)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, sig)
        for proc in self._descendants.values():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                if _alive(proc):
                    proc.send_signal(sig)

    def _survivors(self) -> list[psutil.Process]:
        members = {p.pid: p for p in group_members(self._popen.pid)}
        members.update({pid: p for pid, p in self._descendants.items() if _alive(p)})
        return list(members.values())

    def _wait_gone(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            self._popen.poll()  # reap our direct child so it does not linger as a zombie
            if not self._survivors():
                return True
            time.sleep(0.05)
        return not self._survivors()

    def teardown(self, grace_s: float) -> Teardown:
        """SIGTERM the group, SIGKILL after ``grace_s``, then confirm nothing of it is left."""
        if not self._popen:
            return Teardown(False, False, 0.0, None, ())
        begun = time.monotonic()
        self.remember_descendants()
        if self._popen.poll() is not None and not self._survivors():  # it had exited, and took its group along
            return Teardown(False, False, time.monotonic() - begun, self._popen.poll(), ())
        with _signals_deferred():
            self._signal_group(signal.SIGTERM)
            gone = self._wait_gone(begun + grace_s)
            if not gone:
                self._signal_group(signal.SIGKILL)
                self._wait_gone(time.monotonic() + 5.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=1.0)
        leftover = tuple(sorted(p.pid for p in self._survivors()))
        return Teardown(True, not gone, time.monotonic() - begun, self._popen.poll(), leftover)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold off Ctrl-C and SIGTERM during teardown so a second Ctrl-C cannot leave a half-killed group.

    The signals that arrive are re-raised (as KeyboardInterrupt) once teardown is done.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        raise KeyboardInterrupt(f"signal {received[0]} during teardown")


def _last_line(path: Path) -> str:
    """The last non-empty line of the log, read from its end so big logs stay cheap."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 4096))
            chunk = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    lines = [line for line in chunk.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
