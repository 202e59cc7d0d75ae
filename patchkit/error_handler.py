"""The one place where exceptions become exit codes (and crash logs).

| exception                                   | exit | printed                                           |
|---------------------------------------------|------|---------------------------------------------------|
| :class:`~patchkit.errors.BadInput`           | 2    | ``patchkit CMD: error: FILE:LINE: message (hint)`` |
| :class:`~patchkit.errors.Failed`             | 1    | the same                                          |
| :class:`~patchkit.errors.Internal` (also an  | 3    | the same, plus the path of a crash log with the   |
| unexpected git or pip failure) or any other  |      | traceback                                         |
| exception                                    |      |                                                   |
| Ctrl-C, SIGTERM (:class:`KeyboardInterrupt`, | 130  | ``interrupted (...)``: what was left as it was     |
| :class:`~patchkit.errors.Interrupted`)       |      |                                                   |

This module imports only the standard library and :mod:`patchkit.errors` at the top, so
:func:`install_signal_handlers` can run before anything else is loaded (``patchkit.__main__``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from patchkit import __version__
from patchkit.errors import EXIT_INTERRUPTED, Internal, Interrupted, PatchkitError

#: How an error reaches the user: ``report(command, error, as_json, log_path)`` (the CLI passes the
#: renderer's ``emit_error``; this module prints nothing itself).
Report = Callable[[str, PatchkitError, bool, "str | None"], None]

#: What an interruption outside the commit step leaves, per command (the default: nothing was changed).
_INTERRUPTED = {
    "smoke": "the servers were torn down",
    "bundle": "the output directory may be incomplete; run the command again",
    "testmodels": "the output directory may be incomplete; run the command again",
}


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


#: Set once a Ctrl-C reached patchkit's own handler: the process then ends through ``os._exit`` with
#: its exit code (see ``__main__``), since CPython may otherwise end it by SIGINT (-2) after a caught one.
interrupt_seen = False


def _interrupt_on_sigint(signum: int, frame: object) -> None:
    global interrupt_seen
    interrupt_seen = True
    raise KeyboardInterrupt


def install_signal_handlers() -> None:
    """SIGTERM behaves like Ctrl-C, so every ``finally`` and rollback runs (exit 130)."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background by a shell
        return
    signal.signal(signal.SIGINT, _interrupt_on_sigint)


def reader_gone(stream: object) -> None:
    """The reader of ``stream`` (a pipe) has gone, as ``| head -1`` or ``| true`` do: what is left to
    print goes to /dev/null, and the command still ends with its own exit code (1 would say "failed"
    or "drift"). ``stream`` is sys.stdout or sys.stderr."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
        return
    os.dup2(devnull, fd)
    os.close(devnull)


def flush_output() -> None:
    """Flush stdout and stderr before the interpreter does, so a closed pipe ends no run with 120."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            reader_gone(stream)
        except (OSError, ValueError):
            pass


def crash_log_dir() -> Path:
    from patchkit import paths

    return paths.logs_dir()


def write_crash_log(command: str, exc: BaseException) -> Path | None:
    """The traceback in ``<home>/logs/crash-<command>-<time>-<pid>.log``; None if it cannot be written."""
    try:
        directory = crash_log_dir()
        directory.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = directory / f"crash-{command.replace(' ', '-')}-{stamp}-{os.getpid()}.log"
        path.write_text(
            f"patchkit {__version__} on Python {platform.python_version()} ({platform.platform()})\n"
            f"argv: {sys.argv}\n\n" + "".join(traceback.format_exception(exc))
        )
        return path
    except OSError:
        return None


#: What this process's commit steps completed (``transaction.Transaction.move``): an interruption after
#: one must say the change was made, not "nothing was changed".
completed: list[str] = []


def commit_completed(what: str) -> None:
    """Record that a commit step completed (``what``: the ref and where it is now)."""
    completed.append(what)


def interrupted_message(command: str, signal_name: str | None) -> str:
    how = f" by {signal_name}" if signal_name in ("SIGTERM", "SIGINT") else ""
    if completed:
        return (f"interrupted{how} after the commit step, which was completed: {'; '.join(completed)} "
                "(`patchkit status` shows it)")
    return f"interrupted{how}; {_INTERRUPTED.get(command, 'nothing was changed')}"


@contextlib.contextmanager
def handle_errors(command: str, as_json: bool, report: Report) -> Iterator[None]:
    """Map exceptions to exit codes (see the module docstring); ``report`` prints the error."""
    completed.clear()  # a command run in-process (tests) starts with nothing done
    try:
        yield
    except Internal as error:
        log = write_crash_log(command, error)
        report(command, error, as_json, str(log) if log else None)
        sys.exit(error.exit_code)
    except PatchkitError as error:
        report(command, error, as_json, None)
        sys.exit(error.exit_code)
    except KeyboardInterrupt as interrupt:
        name = str(interrupt) if str(interrupt).startswith("SIG") else "SIGINT"
        report(command, Interrupted(interrupted_message(command, name)), as_json, None)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        log = write_crash_log(command, exc)
        report(command, Internal(f"internal error: {exc!r}"), as_json, str(log) if log else None)
        sys.exit(Internal.exit_code)
