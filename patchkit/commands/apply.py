"""``patchkit apply``: the whole series, or nothing."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import (
    Output,
    Progress,
    epilog,
    output_options,
    run_command,
    set_option,
    target_option,
    with_progress,
)
from patchkit.results import CommandResult


@click.command("apply", epilog=epilog(_1="a patch did not apply, or the target drifted (nothing was changed)"))
@set_option
@target_option
@click.option("--dry-run", is_flag=True, help="Stage and check everything; change nothing.")
@output_options
def apply_cmd(set_dir: Path | None, target: Path | None, dry_run: bool, output: Output) -> None:
    """Apply the whole series to the base tree, or nothing."""
    from patchkit import paths
    from patchkit.patchset import apply

    def core(progress: Progress) -> CommandResult:
        resolved_set, resolved_target = paths.locate(set_dir, target)
        return apply.apply(resolved_set, resolved_target, dry_run=dry_run, progress=progress)

    run_command("apply", output, lambda: with_progress("applying", output, core))
