"""``patchkit clean``: trees, environments and caches, listed and removed."""

from __future__ import annotations

import click

from patchkit.commands.options import Output, epilog, output_options, run_command


@click.command("clean", epilog=epilog(_1="something was kept: a tree with your work, or one in use (listed)"))
@click.option("--trees", is_flag=True, help="Base and patched trees under <home>/trees.")
@click.option("--envs", is_flag=True, help="Verify environments in the shared cache.")
@click.option("--cache", is_flag=True, help="Downloaded wheels and cached gate results too.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--force", is_flag=True, help="Also remove trees that hold uncommitted work or commits of yours.")
@output_options
def clean_cmd(trees: bool, envs: bool, cache: bool, dry_run: bool, force: bool, output: Output) -> None:
    """List and remove trees and environments (default: both). Trees with your work are kept (exit 1)."""
    from patchkit.patchset.clean import clean

    run_command("clean", output, lambda: clean(trees=trees, envs=envs, cache=cache, dry_run=dry_run, force=force))
