"""``patchkit port``: the set carried to a new upstream release patch by patch."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import click

from patchkit.commands.options import Output, Progress, epilog, output_options, run_command, set_option, with_progress
from patchkit.results import CommandResult


@click.command("port", epilog=epilog(_1="stopped at a patch (conflict or target-gone): resolve, then --continue"))
@set_option
@click.option("--to", "to_version", metavar="VERSION", default=None,
              help="The release to port to (a [base.pypi] set: the wheel with the old wheel's tags).")
@click.option("--to-git", metavar="SHA", default=None, help="The upstream commit to port to (a [base.git] set).")
@click.option("--from-git", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="With --to-git: clone this SGLang checkout instead of the manifest's url.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Write the new set to this new directory (default: replace the set itself, atomically).")
@click.option("--set-version", default=None, metavar="VERSION", help="Also set the new set's [set] version.")
@click.option("--continue", "continue_", is_flag=True, help="Resume after resolving and committing a conflict.")
@click.option("--skip", is_flag=True, help="Drop the patch the port stopped at, then resume.")
@click.option("--abort", is_flag=True, help="Drop the port in progress; nothing else was or is changed.")
@output_options
def port_cmd(set_dir: Path | None, to_version: str | None, to_git: str | None, from_git: Path | None,
             out: Path | None, set_version: str | None, continue_: bool, skip: bool, abort: bool,
             output: Output) -> None:
    """Carry the set to a new upstream release patch by patch, with a drift report.

    Each patch is replayed with git's 3-way merge (never fuzz) and reported as clean, offset,
    context-changed, already-upstream (dropped), conflict or target-gone (these two stop the port
    with a work tree to resolve in). The new set is written only when every patch is resolved.
    """
    from patchkit import paths
    from patchkit.checks import dispatch  # the dispatch gate's scanner runs on both bases
    from patchkit.patchset import port
    from patchkit.render.port import markdown

    choices: tuple[tuple[Literal["continue", "skip", "abort"], bool], ...] = (
        ("continue", continue_), ("skip", skip), ("abort", abort))
    actions = [name for name, on in choices if on]
    if len(actions) > 1 or (actions and (to_version or to_git)):
        raise click.UsageError("--to/--to-git, --continue, --skip and --abort exclude each other")
    if not actions and not (to_version or to_git):
        raise click.UsageError("pass --to VERSION or --to-git SHA (or --continue, --skip, --abort)")

    tools = port.Tools(dispatch=dispatch, markdown=markdown)

    def core(progress: Progress) -> CommandResult:
        if actions:
            return port.resume(set_dir, actions[0], progress=progress, tools=tools)
        return port.port(paths.resolve_set(set_dir), to_version=to_version, to_git=to_git, from_git=from_git,
                         out=out, set_version=set_version, progress=progress, tools=tools)

    run_command("port", output, lambda: with_progress("porting", output, core))
