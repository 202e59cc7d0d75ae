"""``patchkit sets``: the shipped sets and what each was proven on; ``patchkit sets copy``: a self-contained copy."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command


@click.group("sets", epilog=epilog(), invoke_without_command=True)
@output_options
@click.pass_context
def sets_cmd(context: click.Context, output: Output) -> None:
    """The shipped patch sets: base, what each was proven on (CPU verify, GPU smoke, bench) and the default."""
    from patchkit.patchset.sets import list_sets

    if context.invoked_subcommand is None:
        run_command("sets", output, list_sets)


@sets_cmd.command("copy", epilog=epilog())
@click.argument("source", type=click.Path(path_type=Path, file_okay=False))
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@output_options
def sets_copy_cmd(source: Path, dest: Path, output: Output) -> None:
    """Copy a set (a name or a folder) to DEST, self-contained: the folders its manifest names outside
    itself (shared tests) are copied into DEST/shared/ and the manifest points at them."""
    from patchkit.patchset.selfcontained import copy_set
    from patchkit.paths import resolve_set

    run_command("sets copy", output, lambda: copy_set(resolve_set(source), dest))
