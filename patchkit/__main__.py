"""``python -m patchkit`` and the ``patchkit`` console script.

SIGTERM is turned into KeyboardInterrupt on the very first line, before click, rich or any command
module is imported, so a SIGTERM at any moment of a run ends in the documented exit 130 and
message, never a bare 143. (A signal during the interpreter's own start-up, before this line,
ends Python's way: nothing of patchkit has run then.)
"""

import os
import signal
import sys


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt("SIGTERM")


signal.signal(signal.SIGTERM, _interrupt)


def main() -> None:
    try:
        from patchkit.error_handler import install_signal_handlers
        from patchkit.hooks import pause

        install_signal_handlers()
        pause("startup")
        import click

        from patchkit.cli import cli
    except KeyboardInterrupt as interrupt:  # before any command ran: say so, as handle_errors would
        _interrupted(interrupt, "while starting")
    try:
        # not click's standalone mode: it turns a Ctrl-C outside a command's own error handling (while
        # parsing options, importing the command's module) into "Aborted!" and exit 1
        code = cli.main(prog_name="patchkit", standalone_mode=False)
    except click.exceptions.Abort as abort:
        _interrupted(abort.__cause__, "before the command began")
    except click.ClickException as error:
        error.show()
        _finish(error.exit_code)
        sys.exit(error.exit_code)
    except BrokenPipeError:  # --help or --version into a pipe whose reader has gone: it got what it wanted
        _finish(0)
        sys.exit(0)
    except SystemExit as done:
        if done.code == 130:
            _exit_interrupted()
        if done.code == 1 and type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
            # click's answer to a closed pipe while it printed --help or --version: the reader got
            # what it wanted, and 1 would mean "failed" here
            _finish(0)
            sys.exit(0)
        _finish(0 if done.code is None else done.code if isinstance(done.code, int) else 1)
        raise
    code = code if isinstance(code, int) else 0
    _finish(code)
    sys.exit(code)


def _finish(code: int) -> None:
    """The command is over: a signal from here on cannot undo or change anything, and one arriving
    during the interpreter's shutdown would end the process by SIGINT (-2) instead of ``code``. If a
    Ctrl-C was caught during the run, CPython may do that anyway: end with ``code`` for sure then."""
    from patchkit import error_handler

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    error_handler.flush_output()
    if error_handler.interrupt_seen:
        _exit_now(code)


def _interrupted(cause: BaseException | None, when: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the message short
    name = str(cause) if cause is not None and str(cause).startswith("SIG") else "SIGINT"
    sys.stderr.write(f"patchkit: error: interrupted by {name} {when}; nothing was changed\n")
    _exit_interrupted()


def _exit_interrupted() -> None:
    """Exit 130 for sure. CPython marks a KeyboardInterrupt raised inside exec() of a string (as
    dataclasses do while a module is imported) as unhandled even when it was caught, and then ends
    the process by SIGINT (-2) instead of the exit code; every cleanup has run by now."""
    _exit_now(130)


def _exit_now(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
