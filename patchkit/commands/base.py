"""``patchkit base fetch``: the pinned, unpatched base tree."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command, set_option, with_progress


@click.group("base", epilog=epilog())
def base_group() -> None:
    """The pinned, unpatched base tree."""


@base_group.command("fetch", epilog=epilog())
@set_option
@click.option("--dest", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Where the base tree goes (default: $PATCHKIT_HOME/trees/<package>-<version>).")
@click.option("--from-git", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Use this SGLang clone at the manifest's [base.git] commit instead of the wheel.")
@output_options
def base_fetch(set_dir: Path | None, dest: Path | None, from_git: Path | None, output: Output) -> None:
    """Download (or reuse) the pinned base and commit it to a git tree."""
    from patchkit.patchset import base

    run_command("base fetch", output, lambda: with_progress(
        "fetching base", output, lambda progress: base.fetch_for_set(set_dir, dest, from_git, progress)))
