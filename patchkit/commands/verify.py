"""``patchkit verify``: the verification gates on a patched tree."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command, set_option, target_option
from patchkit.results import CommandResult


@click.command(epilog=epilog(_1="a gate reported an error finding", _2="bad input or usage; also a target that is "
                             "not exactly the set applied (without --allow-drift)", _3="a gate crashed"))
@set_option
@target_option
@click.option("--gate", "gates", multiple=True, metavar="NAME",
              help="Run only this gate (repeatable). Default: every gate, in registry order.")
@click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write a JUnit XML report (one testsuite per gate) to FILE (checked before the gates run).")
@click.option("--allow-drift", is_flag=True,
              help="Verify a target that is not exactly the set applied (hand edits, a partial series), saying so.")
@click.option("--each-prefix", is_flag=True,
              help="Also check that every prefix of the series applies, compiles, imports and cross-references.")
@click.option("--strict-coverage", is_flag=True,
              help="An added Python line no set test runs and the manifest does not declare is an error, not a "
              "warning (as [verify.tests] strict_coverage = true; every set test runs).")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Compute every gate's result afresh: read and write no cached result, replay no earlier pass "
              "(the verdict is the same as with the cache, only slower).")
@output_options
def verify(set_dir: Path | None, target: Path | None, gates: tuple[str, ...], junit: Path | None,
           allow_drift: bool, each_prefix: bool, strict_coverage: bool, no_cache: bool, output: Output) -> None:
    """Run the verification gates on a patched tree.

    First states whether the target is exactly the set applied; then runs every gate (or those named
    with --gate), showing each as it finishes.
    """
    from patchkit.checks.registry import GATES, REUSABLE  # the gates, handed to the runner
    from patchkit.render.verify import VerifyView
    from patchkit.verify.prefixes import EachPrefix
    from patchkit.verify.run import verify as run_verify

    # the command line's settings of a gate's [verify.<gate>] table, over the manifest's
    overrides = {"tests": {"strict_coverage": True}} if strict_coverage else {}

    def core() -> CommandResult:
        with VerifyView(output.progress) as view:
            return run_verify(set_dir, target, gates, junit, registry=GATES, on_gate=view,
                              allow_drift=allow_drift, extra={EachPrefix.NAME: EachPrefix(GATES)} if each_prefix
                              else None,
                              reusable=REUSABLE, overrides=overrides, use_cache=not no_cache)

    run_command("verify", output, core)
