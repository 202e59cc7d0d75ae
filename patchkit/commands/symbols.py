"""``patchkit symbols``: where each name of the set's symbol family is defined, imported and used."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command, set_option, target_option


@click.command(epilog=epilog())
@set_option
@target_option
@output_options
def symbols(set_dir: Path | None, target: Path | None, output: Output) -> None:
    """Where each name of the set's symbol family is defined, imported and used in the tree."""
    from patchkit.checks import xref
    from patchkit.verify.run import symbol_table

    run_command("symbols", output, lambda: symbol_table(set_dir, target, xref.symbols))
