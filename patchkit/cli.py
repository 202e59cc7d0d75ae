"""The ``patchkit`` command group, and patchkit's composition root.

The commands live one per module in :mod:`patchkit.commands`; each only parses options and calls one
core function. This package is the one place that wires the parts together: it hands the gate
registry of ``checks/`` to the verify runner and the renderers of :mod:`patchkit.render` to every
command (nothing else in ``patchkit`` imports either). Core modules are imported inside the commands,
so ``patchkit --help`` loads almost nothing.

Exit codes (see README): 0 ok, 1 a patch or check failed, 2 bad input or usage, 3 internal error,
130 interrupted. They are produced in one place, :mod:`patchkit.error_handler`.

A new command is one module in ``patchkit/commands/``, added to the group below, and, when it has a
new result type, renderers in the render module of its package (``patchkit.render.<area>``).
"""

from __future__ import annotations

import click

from patchkit import __version__
from patchkit.commands import (
    apply,
    base,
    bench,
    bundle,
    clean,
    dispatch_sites,
    lock,
    port,
    refresh,
    sets,
    smoke,
    status,
    symbols,
    testmodels,
    verify,
)
from patchkit.commands.options import epilog


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             epilog=epilog() + '\n\n\b\nShell completion (bash; zsh and fish alike):\n'
                               '  eval "$(_PATCHKIT_COMPLETE=bash_source patchkit)"')
@click.version_option(__version__, prog_name="patchkit")
def cli() -> None:
    """Apply, verify and smoke-test versioned SGLang patch sets."""


for command in (base.base_group, apply.apply_cmd, status.status_cmd, refresh.refresh_cmd, lock.lock_cmd,
                sets.sets_cmd, clean.clean_cmd, port.port_cmd, verify.verify, symbols.symbols,
                dispatch_sites.dispatch_sites, smoke.smoke, bench.bench, bundle.bundle, testmodels.testmodels):
    cli.add_command(command)
