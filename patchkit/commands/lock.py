"""``patchkit lock``: the lock part of manifest.toml, recomputed."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command, set_option, with_progress


@click.command("lock", epilog=epilog())
@set_option
@click.option("--base", "base_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Tree holding the base commit (default: the fetched base; fetched if missing).")
@output_options
def lock_cmd(set_dir: Path | None, base_dir: Path | None, output: Output) -> None:
    """Recompute patch hashes, base tree and post-image in manifest.toml (below the marker)."""
    from patchkit import paths
    from patchkit.patchset import lock

    run_command("lock", output, lambda: with_progress(
        "locking", output, lambda progress: lock.lock(paths.resolve_set(set_dir), base_dir, progress)))
