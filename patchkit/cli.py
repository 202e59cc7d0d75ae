"""The click command line. Each command only parses options and calls one core function.

Exit codes (see README): 0 ok, 1 a patch or check failed, 2 bad input or usage, 3 internal error,
130 interrupted. They are produced in one place, :mod:`patchkit.error_handler`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from patchkit import __version__, render
from patchkit.error_handler import handle_errors, install_signal_handlers
from patchkit.results import CommandResult

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope on stdout.")
set_option = click.option(
    "--set",
    "set_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Patch-set directory (default: the newest set under ddtree_patches/).",
)
target_option = click.option(
    "--target",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="SGLang tree to work on (default: .patchkit/trees/<base>).",
)


def run_command(name: str, as_json: bool, core: Callable[[], CommandResult]) -> None:
    """Call the core function, render its result, exit with its code."""
    with handle_errors(name, as_json):
        result = core()
        render.emit(result, as_json)
    sys.exit(result.exit_code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchkit")
def cli() -> None:
    """Apply, verify and smoke-test versioned SGLang patch sets."""


# ---------------------------------------------------------------- patch sets: base, apply, status


@cli.group("base")
def base_group() -> None:
    """The pinned, unpatched base tree."""


@base_group.command("fetch")
@set_option
@click.option("--dest", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Where the base tree goes (default: .patchkit/trees/<package>-<version>).")
@click.option("--from-git", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Use this SGLang clone at the manifest's [base.git] commit instead of the wheel.")
@json_option
def base_fetch(set_dir: Path | None, dest: Path | None, from_git: Path | None, as_json: bool) -> None:
    """Download (or reuse) the pinned base and commit it to a git tree."""
    from patchkit import base

    run_command("base fetch", as_json, lambda: render.with_progress(
        "fetching base", lambda progress: base.fetch_for_set(set_dir, dest, from_git, progress)))


@cli.command("apply")
@set_option
@target_option
@click.option("--dry-run", is_flag=True, help="Stage and check everything; change nothing.")
@json_option
def apply_cmd(set_dir: Path | None, target: Path | None, dry_run: bool, as_json: bool) -> None:
    """Apply the whole series to the base tree, or nothing."""
    from patchkit import apply, base

    def core(progress):
        resolved_set, resolved_target = base.locate(set_dir, target)
        return apply.apply(resolved_set, resolved_target, dry_run=dry_run, progress=progress)

    run_command("apply", as_json, lambda: render.with_progress("applying", core))


@cli.command("status")
@set_option
@target_option
@json_option
def status_cmd(set_dir: Path | None, target: Path | None, as_json: bool) -> None:
    """Base ok? Which patches are applied? Drift against the locked post-image?"""
    from patchkit import base, status

    run_command("status", as_json, lambda: status.status(*base.locate(set_dir, target)))


@cli.command("refresh")
@set_option
@target_option
@click.option("--accept-context", is_flag=True, help="Write the set even when a patch's context changed.")
@json_option
def refresh_cmd(set_dir: Path | None, target: Path | None, accept_context: bool, as_json: bool) -> None:
    """Write the commits since the base back into the set (patches, series, lock)."""
    from patchkit import base, refresh

    def core(progress):
        resolved_set, resolved_target = base.locate(set_dir, target)
        return refresh.refresh(resolved_set, resolved_target, accept_context=accept_context, progress=progress)

    run_command("refresh", as_json, lambda: render.with_progress("refreshing", core))


@cli.command("lock")
@set_option
@click.option("--base", "base_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Tree holding the base commit (default: the fetched base; fetched if missing).")
@json_option
def lock_cmd(set_dir: Path | None, base_dir: Path | None, as_json: bool) -> None:
    """Recompute patch hashes, base tree and post-image in manifest.toml (below the marker)."""
    from patchkit import base, lock

    run_command("lock", as_json, lambda: render.with_progress(
        "locking", lambda progress: lock.lock(base.resolve_set(set_dir), base_dir, progress)))


# ---------------------------------------------------------------- verification gates


# ---------------------------------------------------------------- GPU smoke test


# ---------------------------------------------------------------- offline bundles and test models


def main() -> None:
    install_signal_handlers()
    cli(prog_name="patchkit")
