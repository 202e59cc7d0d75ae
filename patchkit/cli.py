"""The click command line. Each command only parses options and calls one core function.

Exit codes (see README): 0 ok, 1 a patch or check failed, 2 bad input or usage, 3 internal error,
130 interrupted. They are produced in one place, :mod:`patchkit.error_handler`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from patchkit import __version__, render
from patchkit.error_handler import handle_errors, install_signal_handlers
from patchkit.results import CommandResult

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope on stdout.")
set_option = click.option(
    "--set",
    "set_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Patch-set directory (default: the newest set under ddtree_patches/).",
)
target_option = click.option(
    "--target",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="SGLang tree to work on (default: .patchkit/trees/<base>).",
)


def run_command(name: str, as_json: bool, core: Callable[[], CommandResult]) -> None:
    """Call the core function, render its result, exit with its code."""
    with handle_errors(name, as_json):
        result = core()
        render.emit(result, as_json)
    sys.exit(result.exit_code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchkit")
def cli() -> None:
    """Apply, verify and smoke-test versioned SGLang patch sets."""


# ---------------------------------------------------------------- patch sets: base, apply, status


# ---------------------------------------------------------------- verification gates


@cli.command()
@set_option
@target_option
@click.option("--gate", "gates", multiple=True, metavar="NAME",
              help="Run only this gate (repeatable). Default: every gate, in registry order.")
@json_option
@click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write a JUnit XML report (one testsuite per gate) to FILE.")
def verify(set_dir: Path | None, target: Path | None, gates: tuple[str, ...], as_json: bool, junit: Path | None) -> None:
    """Run the verification gates on a patched tree. Exit 0 clean, 1 findings, 3 a gate crashed."""
    from patchkit.verify import verify as verify_tree

    run_command("verify", as_json, lambda: verify_tree(set_dir, target, gates, junit))


# ---------------------------------------------------------------- GPU smoke test


# ---------------------------------------------------------------- offline bundles and test models


def main() -> None:
    install_signal_handlers()
    cli(prog_name="patchkit")
