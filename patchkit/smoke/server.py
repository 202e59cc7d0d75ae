"""One SGLang server: launch, wait for ``/health``, tear down its whole process tree, prove it is gone.

The server runs in its own session (``start_new_session``), so it leads its own session and process
group and Ctrl-C in the terminal reaches only patchkit, which then tears the server down itself.
:class:`patchkit.smoke.tree.ProcessTree` knows every process of it, however one left (its session,
its group, a pid list read from ``/proc`` while it runs, orphans re-parented to patchkit). Teardown
holds Ctrl-C and SIGTERM, sends SIGTERM to the tree, waits the grace period (cut short by a second
signal), then SIGKILLs the tree again and again (a process it spawned meanwhile included) until none
is left or :data:`KILL_WAIT_S` passed, and reports any survivor by pid.
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

from patchkit.errors import Failed
from patchkit.smoke.tree import ProcessTree, set_subreaper

POLL_INTERVAL_S = 0.2
#: After SIGKILL, how long teardown keeps killing and waiting before it reports survivors (a process in
#: an uninterruptible GPU driver call can take seconds to go).
KILL_WAIT_S = 30.0
#: How often teardown looks at the tree while it waits for it to go.
TEARDOWN_POLL_S = 0.05


class ServerFailed(Failed):
    """The server exited early, never became healthy, or failed a request."""

    def __init__(self, message: str, *, log: Path, log_tail: str, start_timed_out: bool = False):
        super().__init__(message, hint=f"server log: {log}")
        self.log = log
        self.log_tail = log_tail
        self.start_timed_out = start_timed_out  # still starting when the start limit passed (not a crash)


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
        self.tree: ProcessTree | None = None
        self._was_subreaper: bool | None = None
        self.interrupted_by: tuple[int, ...] = ()  # signals that came while teardown held them

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
            started = time.time()
            self._was_subreaper = set_subreaper(True)  # the server's orphans come to patchkit, not to init
            try:
                self._popen = subprocess.Popen(  # noqa: S603
                    self.argv, env=self.env, stdout=log_file, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )
            except OSError as error:
                self._restore_subreaper()
                raise self.failure(f"could not start {self.argv[0]}: {error}") from error
        self.started_at = time.monotonic()
        self.tree = ProcessTree(self._popen.pid, started)
        self.tree.watch()

    def _restore_subreaper(self) -> None:
        if self._was_subreaper is False:
            set_subreaper(False)
        self._was_subreaper = None

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
        """Record the tree now (the watcher does so all along; a request is a moment worth one more look)."""
        if self.tree:
            self.tree.scan()

    def failure(self, message: str, start_timed_out: bool = False) -> ServerFailed:
        return ServerFailed(f"{self.name} server: {message}", log=self.log, log_tail=log_tail(self.log),
                            start_timed_out=start_timed_out)

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
                raise self.failure(f"not ready after {timeout_s:g}s (no 200 from /health)", start_timed_out=True)
            on_tick(_last_line(self.log))
            time.sleep(POLL_INTERVAL_S)

    def teardown(self, grace_s: float) -> Teardown:
        """Stop the whole tree (module docstring) and say how it went. Ctrl-C and SIGTERM are held from the
        first line to the last, so no signal can leave a half-killed tree; one that came is in
        :attr:`interrupted_by` (and cut the grace period short), for the caller to act on after."""
        with _signals_deferred() as received:
            try:
                return self._stop(grace_s, received)
            finally:
                if self.tree:
                    self.tree.stop_watching()
                self._restore_subreaper()
                self.interrupted_by = tuple(received)

    def _stop(self, grace_s: float, received: list[int]) -> Teardown:
        if not self._popen or not self.tree:
            return Teardown(False, False, 0.0, None, ())
        begun, tree = time.monotonic(), self.tree
        if self._popen.poll() is not None and not tree.scan():  # it had exited, and took its tree along
            return Teardown(False, False, time.monotonic() - begun, self._popen.poll(), ())
        termed: set[int] = set()
        gone = self._wait_gone(begun + grace_s, lambda: termed.update(tree.signal(signal.SIGTERM, skip=termed)),
                               hurry=received)
        if not gone:
            deadline = time.monotonic() + KILL_WAIT_S
            self._wait_gone(deadline, lambda: tree.signal(signal.SIGKILL))  # again each poll: a late child too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=1.0)
        leftover = tuple(sorted(p.pid for p in tree.scan()))
        return Teardown(True, not gone, time.monotonic() - begun, self._popen.poll(), leftover)

    def _wait_gone(self, deadline: float, send: Callable[[], object], hurry: list[int] | None = None) -> bool:
        """Signal the tree's live processes (``send``) and wait until none is left, ``deadline`` passes or
        (``hurry``) a signal arrives; whether none is left."""
        assert self._popen is not None and self.tree is not None
        while True:
            send()
            self._popen.poll()  # reap our direct child so it does not linger as a zombie
            if not self.tree.scan():
                return True
            if time.monotonic() >= deadline or hurry:
                return False
            time.sleep(TEARDOWN_POLL_S)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[list[int]]:
    """Hold off Ctrl-C and SIGTERM for the block; yields the list of the signals that came meanwhile."""
    import threading

    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, _frame: received.append(signum))
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
