"""The one subprocess wrapper. Every process patchkit runs to completion goes through :func:`run`
(text) or :func:`run_bytes` (bytes; what :mod:`patchkit.git` uses).

Failures are part of the error family: a non-zero exit is :class:`CommandFailed`, a timeout
:class:`CommandTimedOut` (with the output captured until then). Both are internal errors (exit 3
with a crash log) unless the caller translates them into what they mean for the user, e.g. a failed
``pip download`` into ``BadInput("could not download ...")``: an unexpected failure of a tool we
drive is our problem to explain, not a "check failed".

``own_group=True`` starts the child in its own process group, so a terminal's Ctrl-C (sent to the
foreground group) reaches only patchkit, which then decides what happens to the child.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.errors import Internal


@dataclass(frozen=True, kw_only=True)
class Completed:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True, kw_only=True)
class RawCompleted:
    args: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    def text(self) -> Completed:
        return Completed(args=self.args, returncode=self.returncode, stdout=_decode(self.stdout),
                         stderr=_decode(self.stderr))


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class CommandFailed(Internal):
    """A process exited non-zero; the message carries command, code, and the tails of stdout and stderr."""

    def __init__(self, done: Completed, message: str | None = None):
        super().__init__(
            message
            or f"command failed with exit code {done.returncode}: {' '.join(done.args)}\n"
            f"stdout:\n{_tail(done.stdout)}\nstderr:\n{_tail(done.stderr)}"
        )
        self.completed = done


class CommandTimedOut(CommandFailed, subprocess.TimeoutExpired):
    """A process ran past its timeout and was killed; carries what it printed until then.

    It is also a :class:`subprocess.TimeoutExpired`, so callers written against the standard library
    keep working while they move to this class.
    """

    def __init__(self, done: Completed, timeout: float):
        CommandFailed.__init__(
            self,
            done,
            f"command timed out after {timeout:g} s: {' '.join(done.args)}\n"
            f"stdout:\n{_tail(done.stdout)}\nstderr:\n{_tail(done.stderr)}",
        )
        # the subprocess.TimeoutExpired attributes (bytes there, text here: what was captured)
        self.cmd, self.timeout = list(done.args), timeout
        self.output = self.stdout = done.stdout.encode("utf-8")
        self.stderr = done.stderr.encode("utf-8")


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _group_kwargs(own_group: bool) -> dict[str, Any]:
    if not own_group:
        return {}
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}  # pragma: no cover - Python 3.10


def run_bytes(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    replace_env: bool = False,
    check: bool = True,
    timeout: float | None = None,
    input: bytes | None = None,
    own_group: bool = False,
) -> RawCompleted:
    """Run a command to completion with bytes in and out. ``env`` is added to os.environ (or replaces
    it with ``replace_env``). A child killed by SIGINT or SIGTERM is reported as KeyboardInterrupt:
    the user interrupted, the command did not fail."""
    argv = tuple(str(a) for a in args)
    full_env = dict(env or {}) if replace_env else ({**os.environ, **env} if env else None)
    try:
        proc = subprocess.run(
            argv, cwd=cwd, env=full_env, input=input if input is not None else b"", capture_output=True,
            timeout=timeout, **_group_kwargs(own_group),
        )
    except subprocess.TimeoutExpired as exc:
        partial = RawCompleted(
            args=argv, returncode=-signal.SIGKILL, stdout=exc.stdout or b"", stderr=exc.stderr or b""
        )
        raise CommandTimedOut(partial.text(), exc.timeout) from None
    done = RawCompleted(args=argv, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    if done.returncode in (-signal.SIGINT, -signal.SIGTERM):
        raise KeyboardInterrupt(f"{argv[0]} was interrupted by signal {-done.returncode}")
    if check and done.returncode != 0:
        raise CommandFailed(done.text())
    return done


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
    input: str | None = None,
    own_group: bool = False,
) -> Completed:
    """Run a command to completion, capturing text output. ``env`` is added to os.environ."""
    done = run_bytes(
        args, cwd=cwd, env=env, check=False, timeout=timeout,
        input=input.encode("utf-8") if input is not None else None, own_group=own_group,
    ).text()
    # text mode, as subprocess's universal newlines: "\r\n" and "\r" read as "\n"
    done = Completed(args=done.args, returncode=done.returncode, stdout=_newlines(done.stdout),
                     stderr=_newlines(done.stderr))
    if check and done.returncode != 0:
        raise CommandFailed(done)
    return done


def stream(
    args: Sequence[str | os.PathLike[str]],
    on_line: Callable[[str], None],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
) -> Completed:
    """Like :func:`run`, but hands each output line to ``on_line`` as it comes (for progress: pip's
    "Collecting ..." lines, pytest's rows). stderr is merged into stdout, so the order is kept. ``env``
    is added to os.environ."""
    argv = tuple(str(a) for a in args)
    lines: list[str] = []
    expired = threading.Event()
    full_env = {**os.environ, **env} if env else None
    with subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as child:

        def kill() -> None:
            expired.set()
            child.kill()

        timer = threading.Timer(timeout, kill) if timeout else None
        if timer:
            timer.start()
        try:
            assert child.stdout is not None
            for line in child.stdout:
                lines.append(line)
                on_line(line.rstrip("\n"))
            returncode = child.wait()
        finally:
            if timer:
                timer.cancel()
    done = Completed(args=argv, returncode=returncode, stdout="".join(lines), stderr="")
    if expired.is_set():
        raise CommandTimedOut(done, timeout or 0)
    if returncode in (-signal.SIGINT, -signal.SIGTERM):
        raise KeyboardInterrupt(f"{argv[0]} was interrupted by signal {-returncode}")
    if returncode != 0 and check:
        raise CommandFailed(done)
    return done
