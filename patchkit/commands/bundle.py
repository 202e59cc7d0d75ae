"""``patchkit bundle``: an offline wheelhouse for a GPU host."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command, set_option


@click.command(epilog=epilog())
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
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
@output_options
def bundle(out: Path, freeze: Path | None, have: tuple[str, ...], python_version: str, platforms: tuple[str, ...],
           requirements: tuple[str, ...], index_url: str | None, find_links: tuple[Path, ...], no_index: bool,
           drop: tuple[str, ...], exclude: tuple[str, ...], check_imports: tuple[str, ...], profile: str | None,
           set_dir: Path | None, tree: Path | None, tree_on_host: bool, output: Output) -> None:
    """Build an offline wheelhouse for a GPU host from the packages it already has."""
    from patchkit.hostprep.bundle import Target, build_bundle

    run_command("bundle", output, lambda: build_bundle(
        out=out, requirements=tuple(requirements), freeze=freeze, have=tuple(have),
        target=Target(python_version, tuple(platforms)), index_url=index_url, find_links=tuple(find_links),
        no_index=no_index, drop=tuple(drop), exclude=tuple(exclude), check_imports=tuple(check_imports) or None,
        profile=profile, set_dir=set_dir, tree=tree, tree_on_host=tree_on_host))
