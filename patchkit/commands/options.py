"""What the commands share: the output flags, ``--set``/``--target``, the server options of ``smoke``
and ``bench``, the exit codes and environment of every ``--help``, and the one way a command runs
(render the result, exit with its code; errors mapped in :mod:`patchkit.error_handler`)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from patchkit import render
from patchkit.error_handler import handle_errors
from patchkit.results import CommandResult

F = TypeVar("F", bound=Callable[..., Any])
Progress = Callable[[str], None]

_EXITS = {
    0: "ok",
    1: "a patch or check failed",
    2: "bad input or usage (the message names the file, line and fix)",
    3: "internal error (a crash log path is printed)",
    130: "interrupted (Ctrl-C or SIGTERM): nothing was changed, or the commit step was completed first",
}
_ENVIRONMENT = ("PATCHKIT_HOME       base trees, logs and locks (default: .patchkit/ at the checkout's root)\n"
                "  PATCHKIT_CACHE_DIR  wheels, environments, gate results (default: $PATCHKIT_HOME/cache if set,"
                " else ~/.cache/patchkit)\n"
                "  PATCHKIT_LOCK_WAIT  seconds to wait for another patchkit on the same target (default: 120)")


def epilog(**exits: str) -> str:
    """The exit codes and environment of a command's --help (``exits`` overrides codes: ``_1="..."``)."""
    codes = {**_EXITS, **{int(code.lstrip("_")): text for code, text in exits.items()}}
    lines = ["\b", "Exit codes:", *(f"  {code:<4} {text}" for code, text in sorted(codes.items())),
             "", "\b", "Environment:", f"  {_ENVIRONMENT}"]
    return "\n".join(lines)


@dataclass(frozen=True)
class Output:
    """How a command prints: the JSON envelope or text, and how much text."""

    as_json: bool
    verbosity: int

    @property
    def progress(self) -> int:
        """Spinners and streamed rows: none with --json (stdout is one document) or --quiet."""
        return render.QUIET if self.as_json else self.verbosity


def output_options(command: F) -> F:
    """``--json``, ``--quiet`` and ``--verbose``, handed to the command as one ``output`` argument."""

    @click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope on stdout (no progress).")
    @click.option("-q", "--quiet", is_flag=True, help="Print only what failed and the verdict.")
    @click.option("-v", "--verbose", is_flag=True, help="Print everything (info rows, every step).")
    @functools.wraps(command)
    def wrapper(*args: Any, as_json: bool, quiet: bool, verbose: bool, **kwargs: Any) -> Any:
        if quiet and verbose:
            raise click.UsageError("--quiet and --verbose exclude each other")
        verbosity = render.QUIET if quiet else render.VERBOSE if verbose else render.NORMAL
        return command(*args, output=Output(as_json, verbosity), **kwargs)

    return wrapper  # type: ignore[return-value]  # click's decorators keep the signature loose


set_option = click.option(
    "--set",
    "set_dir",
    metavar="NAME|DIR",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Patch set: a shipped set's name (v1, v2, ...; `patchkit sets` lists them) or a set directory "
         "(default: the set marked default, the newest proven on a GPU).",
)
target_option = click.option(
    "--target",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="SGLang tree to work on (default: $PATCHKIT_HOME/trees/<base>).",
)


@dataclass(frozen=True)
class ServerChoice:
    """The options ``smoke`` and ``bench`` share: which tree, models, GPUs and interpreter the servers
    run with, and where they log. ``set_dir`` and ``target`` are as given (resolved by the command)."""

    set_dir: Path | None
    target: Path | None
    gpus: int
    model: Path
    draft_model: Path
    port: int
    prompts: Path | None
    max_new_tokens: int | None
    timeout_s: float | None
    python: str
    logs: Path | None
    extra_args: tuple[str, ...]
    radix_cache: bool = True

    def fields(self, set_dir: Path, target: Path) -> dict[str, Any]:
        """The shared fields of the commands' options objects, with the resolved set and target."""
        return {"set_dir": set_dir, "target": target, "gpus": self.gpus, "model": self.model,
                "draft_model": self.draft_model, "port": self.port, "prompts": self.prompts,
                "max_new_tokens": self.max_new_tokens, "timeout_s": self.timeout_s, "python": self.python,
                "logs": self.logs, "extra_args": self.extra_args, "radix_cache": self.radix_cache}


def server_options(kind: str, tokens: str) -> Callable[[F], F]:
    """The server options of ``smoke`` and ``bench`` (``--set`` ... ``--logs`` and the arguments after
    ``--``), handed to the command as one ``server`` argument (a :class:`ServerChoice`). ``kind`` names
    the logs folder and how many servers run, ``tokens`` what ``--max-new-tokens`` counts."""

    def decorate(command: F) -> F:
        @set_option
        @target_option
        @click.option("--gpus", type=click.IntRange(min=0), required=True,
                      help="GPUs to use (tensor parallel size); 0 = CPU stand-in mode, GPU checks skipped.")
        @click.option("--model", type=click.Path(path_type=Path), required=True, help="Target model directory.")
        @click.option("--draft-model", type=click.Path(path_type=Path), required=True,
                      help="DFlash draft model directory.")
        @click.option("--port", type=int, default=30000, show_default=True,
                      help=f"Server port ({'both servers' if kind == 'smoke' else 'every server'}, in turn).")
        @click.option("--prompts", type=click.Path(path_type=Path), default=None,
                      help="Prompt file (JSONL); default: the set's smoke prompts."
                           + (" Several sets: short,FILE,... (short: the set's)." if kind == "bench" else ""))
        @click.option("--max-new-tokens", type=click.IntRange(min=1), default=None, help=f"Tokens per {tokens}.")
        @click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
                      help="Seconds each server may take to become healthy (default: the set's).")
        @click.option("--python", default=sys.executable, show_default="this interpreter",
                      help="Interpreter that runs the server.")
        @click.option("--logs", type=click.Path(path_type=Path, file_okay=False), default=None,
                      help=f"Directory for the server logs (default: $PATCHKIT_HOME/logs/{kind}-<time>).")
        @click.option("--radix-cache/--no-radix-cache", " /--disable-radix-cache", default=True,
                      show_default=True,
                      help="SGLang's radix (prefix) cache in every server: on, SGLang's default, or off "
                           "(--disable-radix-cache to the servers; a set's profile does not decide it).")
        @functools.wraps(command)
        def wrapper(*args: Any, set_dir: Path | None, target: Path | None, gpus: int, model: Path,
                    draft_model: Path, port: int, prompts: Path | None, max_new_tokens: int | None,
                    timeout_s: float | None, python: str, logs: Path | None, radix_cache: bool,
                    extra_args: tuple[str, ...], **kwargs: Any) -> Any:
            server = ServerChoice(set_dir, target, gpus, model, draft_model, port, prompts, max_new_tokens,
                                  timeout_s, python, logs, tuple(extra_args), radix_cache)
            return command(*args, server=server, **kwargs)

        return wrapper  # type: ignore[return-value]  # click's decorators keep the signature loose

    return decorate


def run_command(name: str, output: Output, core: Callable[[], CommandResult]) -> None:
    """Call the core function, render its result, exit with its code."""
    with handle_errors(name, output.as_json, render.emit_error):
        result = core()
        render.emit(result, output.as_json, output.verbosity)
    sys.exit(result.exit_code)


def with_progress(description: str, output: Output, core: Callable[[Progress], CommandResult]) -> CommandResult:
    return render.with_progress(description, core, output.progress)  # type: ignore[no-any-return]
