"""``patchkit clean``: trees, environments and caches, listed and removed."""

from __future__ import annotations

import click

from patchkit.commands.options import Output, epilog, output_options, run_command


@click.command("clean", epilog=epilog(_1="something was kept: a tree with your work, or one in use (listed)"))
@click.option("--trees", is_flag=True, help="Remove the base and patched trees (<home>/trees).")
@click.option("--envs", is_flag=True, help="Remove the verify environments (<cache>/envs).")
@click.option("--cache", is_flag=True, help="Remove the whole cache: verify environments, downloaded wheels, "
              "gate results (not the trees).")
@click.option("--dry-run", is_flag=True, help="Remove nothing: list what would go, and the size of every kind.")
@click.option("--force", is_flag=True, help="Also remove trees that hold uncommitted work or commits of yours.")
@output_options
def clean_cmd(trees: bool, envs: bool, cache: bool, dry_run: bool, force: bool, output: Output) -> None:
    """Remove what patchkit keeps on disk. The options add up; none given: --trees --envs.

    Trees with your work, and anything in use, are kept and listed (exit 1)."""
    from patchkit.patchset.clean import clean

    run_command("clean", output, lambda: clean(trees=trees, envs=envs, cache=cache, dry_run=dry_run, force=force))
