"""``patchkit status``: is the target exactly the set applied?"""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command, set_option, target_option


@click.command("status", epilog=epilog(_1="the target is not exactly the set applied"))
@set_option
@target_option
@output_options
def status_cmd(set_dir: Path | None, target: Path | None, output: Output) -> None:
    """Base ok? Which patches are applied? Drift against the locked post-image?"""
    from patchkit import paths
    from patchkit.patchset import status

    run_command("status", output, lambda: status.status(*paths.locate(set_dir, target)))
