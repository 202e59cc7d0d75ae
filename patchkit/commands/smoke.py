"""``patchkit smoke``: the patched server (baseline, then DDTREE) on GPUs, greedy outputs compared."""

from __future__ import annotations

import click

from patchkit.commands.options import Output, ServerChoice, epilog, output_options, run_command, server_options
from patchkit.results import CommandResult


@click.command(epilog=epilog(_1="an output mismatch or a server failure", _2="preflight failed, or bad input",
                             _130="interrupted; the servers were torn down"))
@server_options("smoke", tokens="prompt")
@click.option("--preflight-only", is_flag=True, help="Run the preflight checks, start nothing.")
@output_options
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
def smoke(server: ServerChoice, preflight_only: bool, output: Output) -> None:
    """Launch the patched server (baseline, then DDTREE), prove greedy outputs identical, tear down.

    Arguments after -- go to both servers.
    """
    from patchkit import paths
    from patchkit.render.smoke import SmokeConsole
    from patchkit.smoke.run import SmokeOptions, run_smoke

    def core() -> CommandResult:
        options = SmokeOptions(**server.fields(*paths.locate(server.set_dir, server.target)),
                               preflight_only=preflight_only)
        return run_smoke(options, SmokeConsole(output.progress))

    run_command("smoke", output, core)
