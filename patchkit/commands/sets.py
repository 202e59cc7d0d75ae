"""``patchkit sets``: the shipped sets and what each was proven on."""

from __future__ import annotations

import click

from patchkit.commands.options import Output, epilog, output_options, run_command


@click.command("sets", epilog=epilog())
@output_options
def sets_cmd(output: Output) -> None:
    """The shipped patch sets: base, what each was proven on (CPU verify, GPU smoke, bench) and the default."""
    from patchkit.patchset.sets import list_sets

    run_command("sets", output, list_sets)
