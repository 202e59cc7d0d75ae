"""``patchkit refresh``: the target's commits written back into the set."""

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


@click.command("refresh", epilog=epilog(_1="a patch's context changed: nothing was written",
                                        _2="bad input; also a refresh that would remove patches (--allow-remove)"))
@set_option
@target_option
@click.option("--accept-context", is_flag=True, help="Write the set even when a patch's context changed.")
@click.option("--allow-remove", is_flag=True,
              help="Remove the set's patches whose commits are not in the target (never done otherwise).")
@output_options
def refresh_cmd(set_dir: Path | None, target: Path | None, accept_context: bool, allow_remove: bool,
                output: Output) -> None:
    """Write the commits since the base back into the set (patches, series, lock)."""
    from patchkit import paths
    from patchkit.patchset import refresh

    def core(progress: Progress) -> CommandResult:
        resolved_set, resolved_target = paths.locate(set_dir, target)
        return refresh.refresh(resolved_set, resolved_target, accept_context=accept_context,
                               allow_remove=allow_remove, progress=progress)

    run_command("refresh", output, lambda: with_progress("refreshing", output, core))
