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
    from patchkit.patchset import base

    run_command("base fetch", as_json, lambda: render.with_progress(
        "fetching base", lambda progress: base.fetch_for_set(set_dir, dest, from_git, progress)))


@cli.command("apply")
@set_option
@target_option
@click.option("--dry-run", is_flag=True, help="Stage and check everything; change nothing.")
@json_option
def apply_cmd(set_dir: Path | None, target: Path | None, dry_run: bool, as_json: bool) -> None:
    """Apply the whole series to the base tree, or nothing."""
    from patchkit.patchset import apply, base

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
    from patchkit.patchset import base, status

    run_command("status", as_json, lambda: status.status(*base.locate(set_dir, target)))


@cli.command("refresh")
@set_option
@target_option
@click.option("--accept-context", is_flag=True, help="Write the set even when a patch's context changed.")
@json_option
def refresh_cmd(set_dir: Path | None, target: Path | None, accept_context: bool, as_json: bool) -> None:
    """Write the commits since the base back into the set (patches, series, lock)."""
    from patchkit.patchset import base, refresh

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
    from patchkit.patchset import base, lock

    run_command("lock", as_json, lambda: render.with_progress(
        "locking", lambda progress: lock.lock(base.resolve_set(set_dir), base_dir, progress)))


# ---------------------------------------------------------------- verification gates


@cli.command()
@set_option
@target_option
@click.option("--gate", "gates", multiple=True, metavar="NAME",
              help="Run only this gate (repeatable). Default: every gate, in registry order.")
@json_option
@click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write a JUnit XML report (one testsuite per gate) to FILE.")
@click.option("--each-prefix", is_flag=True,
              help="Also check that every prefix of the series compiles, imports and cross-references.")
def verify(set_dir: Path | None, target: Path | None, gates: tuple[str, ...], as_json: bool, junit: Path | None,
           each_prefix: bool) -> None:
    """Run the verification gates on a patched tree. Exit 0 clean, 1 findings, 3 a gate crashed."""
    from patchkit.verify.run import verify as verify_tree

    run_command("verify", as_json, lambda: verify_tree(set_dir, target, gates, junit, each_prefix))


@cli.command()
@set_option
@target_option
@json_option
def symbols(set_dir: Path | None, target: Path | None, as_json: bool) -> None:
    """Where each name of the set's symbol family is defined, imported and used in the tree."""
    from patchkit.verify.run import symbol_table

    run_command("symbols", as_json, lambda: symbol_table(set_dir, target))


@cli.command("dispatch-sites")
@set_option
@target_option
@json_option
def dispatch_sites(set_dir: Path | None, target: Path | None, as_json: bool) -> None:
    """Rewrite the set's dispatch declarations for the tree's current sites (after a rebase).

    Reviewed entries are kept; new sites are added with an empty treatment, so the dispatch gate
    keeps failing on them until someone writes treatment and reason; stale entries are dropped.
    """
    from patchkit.verify.run import update_dispatch_declarations

    run_command("dispatch-sites", as_json, lambda: update_dispatch_declarations(set_dir, target))


# ---------------------------------------------------------------- GPU smoke test


@cli.command()
@set_option
@target_option
@click.option("--gpus", type=click.IntRange(min=0), required=True,
              help="GPUs to use (tensor parallel size); 0 = CPU stand-in mode, GPU checks skipped.")
@click.option("--model", type=click.Path(path_type=Path), required=True, help="Target model directory.")
@click.option("--draft-model", type=click.Path(path_type=Path), required=True, help="DFlash draft model directory.")
@click.option("--port", type=int, default=30000, show_default=True, help="Server port (both servers, in turn).")
@click.option("--prompts", type=click.Path(path_type=Path), default=None,
              help="Prompt file (JSONL); default: the set's smoke prompts.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None, help="Tokens per prompt.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds each server may take to become healthy (default: the set's).")
@click.option("--python", default=sys.executable, show_default="this interpreter",
              help="Interpreter that runs the server.")
@click.option("--logs", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Directory for the server logs (default: .patchkit/logs/smoke-<time>).")
@click.option("--preflight-only", is_flag=True, help="Run the preflight checks, start nothing.")
@json_option
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
def smoke(set_dir, target, gpus, model, draft_model, port, prompts, max_new_tokens, timeout_s, python, logs,
          preflight_only, as_json, extra_args) -> None:
    """Launch the patched server (baseline, then DDTREE), prove greedy outputs identical, tear down.

    Arguments after -- go to both servers. Exit 0 all prompts identical, 1 mismatch or server failure,
    2 preflight failed or bad input, 130 interrupted (servers torn down).
    """
    from patchkit.patchset.base import locate
    from patchkit.smoke.run import SmokeOptions, run_smoke

    def core() -> CommandResult:
        chosen_set, chosen_target = locate(set_dir, target)
        options = SmokeOptions(
            set_dir=chosen_set, target=chosen_target, gpus=gpus, model=model,
            draft_model=draft_model, port=port, prompts=prompts, max_new_tokens=max_new_tokens,
            timeout_s=timeout_s, python=python, logs=logs, extra_args=tuple(extra_args),
            preflight_only=preflight_only,
        )
        return run_smoke(options, render.SmokeConsole())

    run_command("smoke", as_json, core)


# ---------------------------------------------------------------- offline bundles and test models


@cli.command()
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
@json_option
def bundle(out, freeze, have, python_version, platforms, requirements, index_url, find_links, no_index, drop,
           exclude, check_imports, profile, set_dir, tree, tree_on_host, as_json) -> None:
    """Build an offline wheelhouse for a GPU host from the packages it already has."""
    from patchkit.hostprep.bundle import Target, build_bundle

    run_command("bundle", as_json, lambda: build_bundle(
        out=out, requirements=tuple(requirements), freeze=freeze, have=tuple(have),
        target=Target(python_version, tuple(platforms)), index_url=index_url, find_links=tuple(find_links),
        no_index=no_index, drop=tuple(drop), exclude=tuple(exclude), check_imports=tuple(check_imports) or None,
        profile=profile, set_dir=set_dir, tree=tree, tree_on_host=tree_on_host))


@cli.command()
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Directory that receives target/ and draft/.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
@click.option("--heads", type=int, default=4, show_default=True,
              help="Attention heads of both models (a multiple of 2; tensor parallel size N needs a multiple of N).")
@json_option
def testmodels(out, seed, heads, as_json) -> None:
    """Write a tiny random Qwen3 target and a matching DFlash draft (no tokenizer; use input ids)."""
    from patchkit.hostprep.testmodels import write_test_models

    run_command("testmodels", as_json, lambda: write_test_models(out, seed, heads=heads))


def main() -> None:
    install_signal_handlers()
    cli(prog_name="patchkit")
