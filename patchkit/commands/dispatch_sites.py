"""``patchkit dispatch-sites``: the set's dispatch declarations rewritten for the tree's current sites."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command, set_option, target_option


@click.command("dispatch-sites", epilog=epilog(_1="new sites were added: review them (treatment and reason)"))
@set_option
@target_option
@output_options
def dispatch_sites(set_dir: Path | None, target: Path | None, output: Output) -> None:
    """Rewrite the set's dispatch declarations for the tree's current sites (after a rebase).

    Reviewed entries are kept; new sites are added with an empty treatment, so the dispatch gate
    keeps failing on them until someone writes treatment and reason; stale entries are dropped.
    """
    from patchkit.checks.dispatch import write_declarations
    from patchkit.verify.run import update_dispatch_declarations

    run_command("dispatch-sites", output, lambda: update_dispatch_declarations(set_dir, target, write_declarations))
