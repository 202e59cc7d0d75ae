"""``patchkit bundle``: an offline wheelhouse for a GPU host."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command, set_option


@click.command(epilog=epilog())
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Directory for wheels/, requirements.lock, bundle.json and install.sh.")
@click.option("--freeze", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
              help="The host's `python -m pip freeze` output.")
@click.option("--have", multiple=True, metavar="NAME==VER", help="A package the host already has (repeatable).")
@click.option("--python-version", default="3.12", show_default=True, help="The host's Python (X.Y).")
@click.option("--platform", "platforms", multiple=True, default=("manylinux_2_34_x86_64",), show_default=True,
              help="The host's wheel platform tag (repeatable).")
@click.option("--requirement", "requirements", multiple=True, default=("sglang==0.5.12",), show_default=True,
              help="What to bundle (repeatable).")
@click.option("--index-url", default=None, help="Package index (default: pip's).")
@click.option("--find-links", multiple=True, type=click.Path(path_type=Path), help="Extra wheel directory.")
@click.option("--no-index", is_flag=True, help="Use only --find-links.")
@click.option("--drop", multiple=True, metavar="DIST:GLOB", help="Slim: drop matching wheel members.")
@click.option("--exclude", multiple=True, metavar="DIST", help="Leave a whole distribution out.")
@click.option("--check-import", "check_imports", multiple=True,
              help="Module install.sh imports on the host after installing "
                   "(default: the profile's check_imports, else sglang and sglang.launch_server).")
@click.option("--profile", default=None, metavar="NAME",
              help="Bundle the set's [bundle.profiles.NAME] list instead of sglang's full dependencies.")
@set_option
@click.option("--tree", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Patched tree whose python/ the bundle ships instead of the base wheel (--profile).")
@click.option("--tree-on-host", is_flag=True,
              help="With --tree: ship no source; the host applies the set itself and install.sh checks "
                   "that its tree is this one (sh install.sh PYTHON SITE TREE).")
@click.option("--split-mib", type=int, default=None, metavar="N",
              help="Also write the bundle as parts of at most N MiB (OUT/parts/: the parts, PARTS with their "
                   "sha256, install-parts.sh), for a host that takes at most N MiB per transfer.")
@click.option("--trimmed-archive", type=click.Path(path_type=Path, dir_okay=False), default=None,
              metavar="FILE.tar.xz",
              help="Instead of a bundle: only the --profile's trimmed libraries (its trim rules) and their "
                   "records, to unpack over a SITE that holds the rest (ci/gpu/host's fa3 archive).")
@output_options
def bundle(out: Path | None, freeze: Path | None, have: tuple[str, ...], python_version: str,
           platforms: tuple[str, ...], requirements: tuple[str, ...], index_url: str | None,
           find_links: tuple[Path, ...], no_index: bool,
           drop: tuple[str, ...], exclude: tuple[str, ...], check_imports: tuple[str, ...], profile: str | None,
           set_dir: Path | None, tree: Path | None, tree_on_host: bool, split_mib: int | None,
           trimmed_archive: Path | None, output: Output) -> None:
    """Build an offline wheelhouse for a GPU host from the packages it already has."""
    from patchkit.hostprep.bundle import Target, build_bundle, build_trimmed_archive

    if trimmed_archive is not None:
        archive, chosen = trimmed_archive, profile or ""
        if out is not None or split_mib is not None or not chosen:
            raise click.UsageError("--trimmed-archive goes with --profile, without --out and --split-mib")
        run_command("bundle", output, lambda: build_trimmed_archive(
            archive=archive, profile=chosen, target=Target(python_version, tuple(platforms)),
            set_dir=set_dir, index_url=index_url, find_links=tuple(find_links), no_index=no_index))
        return
    if out is None:
        raise click.UsageError("--out DIR is needed (or --trimmed-archive FILE with --profile)")
    run_command("bundle", output, lambda: build_bundle(
        out=out, requirements=tuple(requirements), freeze=freeze, have=tuple(have),
        target=Target(python_version, tuple(platforms)), index_url=index_url, find_links=tuple(find_links),
        no_index=no_index, drop=tuple(drop), exclude=tuple(exclude), check_imports=tuple(check_imports) or None,
        profile=profile, set_dir=set_dir, tree=tree, tree_on_host=tree_on_host, split_mib=split_mib))
