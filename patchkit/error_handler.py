"""The one place where exceptions become exit codes (and crash logs)."""

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


def _raise_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_handlers() -> None:
    """SIGTERM behaves like Ctrl-C, so every ``finally`` and rollback runs."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def crash_log_dir() -> Path:
    return Path(os.environ.get("PATCHKIT_HOME", ".patchkit")) / "logs"


def write_crash_log(command: str, exc: BaseException) -> Path:
    directory = crash_log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = directory / f"crash-{command}-{stamp}-{os.getpid()}.log"
    path.write_text(
        f"patchkit {__version__} on Python {platform.python_version()} ({platform.platform()})\n"
        f"argv: {sys.argv}\n\n" + "".join(traceback.format_exception(exc))
    )
    return path


@contextlib.contextmanager
def handle_errors(command: str, as_json: bool, report: Report) -> Iterator[None]:
    """Map exceptions to exit codes: PatchkitError -> its code, Ctrl-C -> 130, anything else -> 3."""
    try:
        yield
    except PatchkitError as error:
        report(command, error, as_json, None)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        report(command, Interrupted("interrupted; the target was left as it was"), as_json, None)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the top-level safety net
        log = write_crash_log(command, exc)
        report(command, Internal(f"internal error: {exc!r}"), as_json, str(log))
        sys.exit(Internal.exit_code)
