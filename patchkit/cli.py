"""The click command line, and patchkit's composition root.

Each command only parses options and calls one core function; this module is the one place that
wires the parts together: it hands the gate registry of ``checks/`` to the verify runner and the
renderers of :mod:`patchkit.render` to every command (nothing else in ``patchkit`` imports either).
Core modules are imported inside the commands, so ``patchkit --help`` loads almost nothing.

Exit codes (see README): 0 ok, 1 a patch or check failed, 2 bad input or usage, 3 internal error,
130 interrupted. They are produced in one place, :mod:`patchkit.error_handler`.

A new command is one function here and, when it has a new result type, renderers in the render module
of its package (``patchkit.render.<area>``).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import click

from patchkit import __version__, render
from patchkit.error_handler import handle_errors, install_signal_handlers
from patchkit.results import CommandResult

F = TypeVar("F", bound=Callable[..., Any])
Progress = Callable[[str], None]

_EXITS = {
    0: "ok",
    1: "a patch or check failed",
    2: "bad input or usage (the message names the file, line and fix)",
    3: "internal error (a crash log path is printed)",
    130: "interrupted (Ctrl-C or SIGTERM): nothing was changed, or the commit step was completed first",
}
_ENVIRONMENT = ("PATCHKIT_HOME       base trees, logs and locks (default: .patchkit/ at the checkout's root)\n"
                "  PATCHKIT_CACHE_DIR  wheels, environments, gate results (default: $PATCHKIT_HOME/cache if set,"
                " else ~/.cache/patchkit)\n"
                "  PATCHKIT_LOCK_WAIT  seconds to wait for another patchkit on the same target (default: 120)")


def epilog(**exits: str) -> str:
    """The exit codes and environment of a command's --help (``exits`` overrides codes: ``_1="..."``)."""
    codes = {**_EXITS, **{int(code.lstrip("_")): text for code, text in exits.items()}}
    lines = ["\b", "Exit codes:", *(f"  {code:<4} {text}" for code, text in sorted(codes.items())),
             "", "\b", "Environment:", f"  {_ENVIRONMENT}"]
    return "\n".join(lines)


@dataclass(frozen=True)
class Output:
    """How a command prints: the JSON envelope or text, and how much text."""

    as_json: bool
    verbosity: int

    @property
    def progress(self) -> int:
        """Spinners and streamed rows: none with --json (stdout is one document) or --quiet."""
        return render.QUIET if self.as_json else self.verbosity


def output_options(command: F) -> F:
    """``--json``, ``--quiet`` and ``--verbose``, handed to the command as one ``output`` argument."""

    @click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope on stdout (no progress).")
    @click.option("-q", "--quiet", is_flag=True, help="Print only what failed and the verdict.")
    @click.option("-v", "--verbose", is_flag=True, help="Print everything (info rows, every step).")
    @functools.wraps(command)
    def wrapper(*args: Any, as_json: bool, quiet: bool, verbose: bool, **kwargs: Any) -> Any:
        if quiet and verbose:
            raise click.UsageError("--quiet and --verbose exclude each other")
        verbosity = render.QUIET if quiet else render.VERBOSE if verbose else render.NORMAL
        return command(*args, output=Output(as_json, verbosity), **kwargs)

    return wrapper  # type: ignore[return-value]  # click's decorators keep the signature loose


set_option = click.option(
    "--set",
    "set_dir",
    metavar="NAME|DIR",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Patch set: a shipped set's name (v1, v2, ...; `patchkit sets` lists them) or a set directory "
         "(default: the set marked default, the newest proven on a GPU).",
)
target_option = click.option(
    "--target",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="SGLang tree to work on (default: $PATCHKIT_HOME/trees/<base>).",
)


def run_command(name: str, output: Output, core: Callable[[], CommandResult]) -> None:
    """Call the core function, render its result, exit with its code."""
    with handle_errors(name, output.as_json, render.emit_error):
        result = core()
        render.emit(result, output.as_json, output.verbosity)
    sys.exit(result.exit_code)


def with_progress(description: str, output: Output, core: Callable[[Progress], CommandResult]) -> CommandResult:
    return render.with_progress(description, core, output.progress)  # type: ignore[no-any-return]


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             epilog=epilog() + '\n\n\b\nShell completion (bash; zsh and fish alike):\n'
                               '  eval "$(_PATCHKIT_COMPLETE=bash_source patchkit)"')
@click.version_option(__version__, prog_name="patchkit")
def cli() -> None:
    """Apply, verify and smoke-test versioned SGLang patch sets."""


# ---------------------------------------------------------------- patch sets: base, apply, status


@cli.group("base", epilog=epilog())
def base_group() -> None:
    """The pinned, unpatched base tree."""


@base_group.command("fetch", epilog=epilog())
@set_option
@click.option("--dest", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Where the base tree goes (default: $PATCHKIT_HOME/trees/<package>-<version>).")
@click.option("--from-git", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Use this SGLang clone at the manifest's [base.git] commit instead of the wheel.")
@output_options
def base_fetch(set_dir: Path | None, dest: Path | None, from_git: Path | None, output: Output) -> None:
    """Download (or reuse) the pinned base and commit it to a git tree."""
    from patchkit.patchset import base

    run_command("base fetch", output, lambda: with_progress(
        "fetching base", output, lambda progress: base.fetch_for_set(set_dir, dest, from_git, progress)))


@cli.command("apply", epilog=epilog(_1="a patch did not apply, or the target drifted (nothing was changed)"))
@set_option
@target_option
@click.option("--dry-run", is_flag=True, help="Stage and check everything; change nothing.")
@output_options
def apply_cmd(set_dir: Path | None, target: Path | None, dry_run: bool, output: Output) -> None:
    """Apply the whole series to the base tree, or nothing."""
    from patchkit.patchset import apply, base

    def core(progress: Progress) -> CommandResult:
        resolved_set, resolved_target = base.locate(set_dir, target)
        return apply.apply(resolved_set, resolved_target, dry_run=dry_run, progress=progress)

    run_command("apply", output, lambda: with_progress("applying", output, core))


@cli.command("status", epilog=epilog(_1="the target is not exactly the set applied"))
@set_option
@target_option
@output_options
def status_cmd(set_dir: Path | None, target: Path | None, output: Output) -> None:
    """Base ok? Which patches are applied? Drift against the locked post-image?"""
    from patchkit.patchset import base, status

    run_command("status", output, lambda: status.status(*base.locate(set_dir, target)))


@cli.command("refresh", epilog=epilog(_1="a patch's context changed: nothing was written",
                                      _2="bad input; also a refresh that would remove patches (--allow-remove)"))
@set_option
@target_option
@click.option("--accept-context", is_flag=True, help="Write the set even when a patch's context changed.")
@click.option("--allow-remove", is_flag=True,
              help="Remove the set's patches whose commits are not in the target (never done otherwise).")
@output_options
def refresh_cmd(set_dir: Path | None, target: Path | None, accept_context: bool, allow_remove: bool,
                output: Output) -> None:
    """Write the commits since the base back into the set (patches, series, lock)."""
    from patchkit.patchset import base, refresh

    def core(progress: Progress) -> CommandResult:
        resolved_set, resolved_target = base.locate(set_dir, target)
        return refresh.refresh(resolved_set, resolved_target, accept_context=accept_context,
                               allow_remove=allow_remove, progress=progress)

    run_command("refresh", output, lambda: with_progress("refreshing", output, core))


@cli.command("lock", epilog=epilog())
@set_option
@click.option("--base", "base_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Tree holding the base commit (default: the fetched base; fetched if missing).")
@output_options
def lock_cmd(set_dir: Path | None, base_dir: Path | None, output: Output) -> None:
    """Recompute patch hashes, base tree and post-image in manifest.toml (below the marker)."""
    from patchkit.patchset import base, lock

    run_command("lock", output, lambda: with_progress(
        "locking", output, lambda progress: lock.lock(base.resolve_set(set_dir), base_dir, progress)))


@cli.group("sets", epilog=epilog(), invoke_without_command=True)
@output_options
@click.pass_context
def sets_cmd(context: click.Context, output: Output) -> None:
    """The shipped patch sets: base, what each was proven on (CPU verify, GPU smoke, bench) and the default."""
    from patchkit.patchset.sets import list_sets

    if context.invoked_subcommand is None:
        run_command("sets", output, list_sets)


@sets_cmd.command("copy", epilog=epilog())
@click.argument("source", type=click.Path(path_type=Path, file_okay=False))
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@output_options
def sets_copy_cmd(source: Path, dest: Path, output: Output) -> None:
    """Copy a set (a name or a folder) to DEST, self-contained: the folders its manifest names outside
    itself (shared tests) are copied into DEST/shared/ and the manifest points at them."""
    from patchkit.patchset.selfcontained import copy_set
    from patchkit.paths import resolve_set

    run_command("sets copy", output, lambda: copy_set(resolve_set(source), dest))


# ---------------------------------------------------------------- patch sets: clean


@cli.command("clean", epilog=epilog(_1="something was kept: a tree with your work, or one in use (listed)"))
@click.option("--trees", is_flag=True, help="Base and patched trees under <home>/trees.")
@click.option("--envs", is_flag=True, help="Verify environments in the shared cache.")
@click.option("--cache", is_flag=True, help="Downloaded wheels and cached gate results too.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--force", is_flag=True, help="Also remove trees that hold uncommitted work or commits of yours.")
@output_options
def clean_cmd(trees: bool, envs: bool, cache: bool, dry_run: bool, force: bool, output: Output) -> None:
    """List and remove trees and environments (default: both). Trees with your work are kept (exit 1)."""
    from patchkit.patchset.clean import clean

    run_command("clean", output, lambda: clean(trees=trees, envs=envs, cache=cache, dry_run=dry_run, force=force))


# ---------------------------------------------------------------- patch sets: port


@cli.command("port", epilog=epilog(_1="stopped at a patch (conflict or target-gone): resolve, then --continue"))
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
    from patchkit.checks import dispatch  # the dispatch gate's scanner runs on both bases
    from patchkit.patchset import base, port
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
        return port.port(base.resolve_set(set_dir), to_version=to_version, to_git=to_git, from_git=from_git,
                         out=out, set_version=set_version, progress=progress, tools=tools)

    run_command("port", output, lambda: with_progress("porting", output, core))


# ---------------------------------------------------------------- verification gates


@cli.command(epilog=epilog(_1="a gate reported an error finding", _2="bad input or usage; also a target that is "
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
              "warning (sets PATCHKIT_STRICT_COVERAGE=1; every set test runs).")
@output_options
def verify(set_dir: Path | None, target: Path | None, gates: tuple[str, ...], junit: Path | None,
           allow_drift: bool, each_prefix: bool, strict_coverage: bool, output: Output) -> None:
    """Run the verification gates on a patched tree.

    First states whether the target is exactly the set applied; then runs every gate (or those named
    with --gate), showing each as it finishes.
    """
    from patchkit.checks.registry import EACH_PREFIX, GATES, REUSABLE  # the only import of checks/ in patchkit
    from patchkit.render.verify import VerifyView
    from patchkit.verify.run import verify as run_verify

    def core() -> CommandResult:
        # an input of the tests gate and of its reuse key, for this command only (an in-process caller's
        # environment is left as it was)
        previous = os.environ.get("PATCHKIT_STRICT_COVERAGE")
        if strict_coverage:
            os.environ["PATCHKIT_STRICT_COVERAGE"] = "1"
        try:
            with VerifyView(output.progress) as view:
                return run_verify(set_dir, target, gates, junit, registry=GATES, on_gate=view,
                                  allow_drift=allow_drift, extra=EACH_PREFIX if each_prefix else None,
                                  reusable=REUSABLE)
        finally:
            if previous is None:
                os.environ.pop("PATCHKIT_STRICT_COVERAGE", None)
            else:
                os.environ["PATCHKIT_STRICT_COVERAGE"] = previous

    run_command("verify", output, core)


@cli.command(epilog=epilog())
@set_option
@target_option
@output_options
def symbols(set_dir: Path | None, target: Path | None, output: Output) -> None:
    """Where each name of the set's symbol family is defined, imported and used in the tree."""
    from patchkit.checks import xref
    from patchkit.verify.run import symbol_table

    run_command("symbols", output, lambda: symbol_table(set_dir, target, xref.symbols))


@cli.command("dispatch-sites", epilog=epilog(_1="new sites were added: review them (treatment and reason)"))
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


# ---------------------------------------------------------------- GPU smoke test


@cli.command(epilog=epilog(_1="an output mismatch or a server failure", _2="preflight failed, or bad input",
                           _130="interrupted; the servers were torn down"))
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
              help="Directory for the server logs (default: $PATCHKIT_HOME/logs/smoke-<time>).")
@click.option("--preflight-only", is_flag=True, help="Run the preflight checks, start nothing.")
@output_options
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
def smoke(set_dir: Path | None, target: Path | None, gpus: int, model: Path, draft_model: Path, port: int,
          prompts: Path | None, max_new_tokens: int | None, timeout_s: float | None, python: str, logs: Path | None,
          preflight_only: bool, output: Output, extra_args: tuple[str, ...]) -> None:
    """Launch the patched server (baseline, then DDTREE), prove greedy outputs identical, tear down.

    Arguments after -- go to both servers.
    """
    from patchkit.patchset.base import locate
    from patchkit.render.smoke import SmokeConsole
    from patchkit.smoke.run import SmokeOptions, run_smoke

    def core() -> CommandResult:
        chosen_set, chosen_target = locate(set_dir, target)
        options = SmokeOptions(
            set_dir=chosen_set, target=chosen_target, gpus=gpus, model=model,
            draft_model=draft_model, port=port, prompts=prompts, max_new_tokens=max_new_tokens,
            timeout_s=timeout_s, python=python, logs=logs, extra_args=tuple(extra_args),
            preflight_only=preflight_only,
        )
        return run_smoke(options, SmokeConsole(output.progress))

    run_command("smoke", output, core)


# ---------------------------------------------------------------- GPU bench


def _positive_int(part: str, whole: str) -> int:
    try:
        number = int(part)
    except ValueError:
        raise click.BadParameter(f"{whole!r} is not a comma-separated list of integers") from None
    if number < 1:
        raise click.BadParameter(f"{whole!r}: every value must be a positive integer")
    return number


def _parts(value: str) -> list[str]:
    parts = [part.strip() for part in value.split(",") if part.strip()]
    if not parts:
        raise click.BadParameter(f"{value!r} names no value")
    return parts


def _budget_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int | str, ...] | None:
    """``15,63,auto`` -> (15, 63, "auto"): numbers of nodes, or auto (the server picks per round)."""
    if value is None:
        return None
    return tuple("auto" if part.lower() == "auto" else _positive_int(part, value) for part in _parts(value))


def _int_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    """``16,64,256`` -> (16, 64, 256); a usage error names the option."""
    if value is None:
        return None
    return tuple(_positive_int(part, value) for part in _parts(value))


@cli.command(epilog=epilog(_1="an output mismatch, a server failure, a process left, a check below its threshold",
                           _2="preflight failed, or bad input (budget, concurrency, variant, file)",
                           _130="interrupted; the running server was torn down"))
@set_option
@target_option
@click.option("--gpus", type=click.IntRange(min=0), required=True,
              help="GPUs to use (tensor parallel size); 0 = CPU stand-in mode, GPU checks skipped.")
@click.option("--model", type=click.Path(path_type=Path), required=True, help="Target model directory.")
@click.option("--draft-model", type=click.Path(path_type=Path), required=True, help="DFlash draft model directory.")
@click.option("--port", type=int, default=30000, show_default=True, help="Server port (every server, in turn).")
@click.option("--variants", default=None, metavar="A,B,...",
              help="Variants of the set's [bench] profile to run, by name (default: all).")
@click.option("--budgets", callback=_budget_list, default=None, metavar="16,64,auto",
              help="DDTREE budgets: numbers of nodes, or auto (the server picks each round's; "
                   "default: the profile's).")
@click.option("--concurrency", callback=_int_list, default=None, metavar="1,8,32",
              help="Concurrent requests per level (default: the profile's).")
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="Measured batches per level.")
@click.option("--warmup", type=click.IntRange(min=0), default=None, help="Unmeasured batches per level first.")
@click.option("--prompts", type=click.Path(path_type=Path), default=None,
              help="Prompt file (JSONL); default: the set's smoke prompts.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None, help="Tokens per request.")
@click.option("--no-check-outputs", is_flag=True,
              help="Do not compare greedy outputs with the baseline's (random-weight models at a real shape).")
@click.option("--expect-tree-gain", type=click.FloatRange(min=0, min_open=True), default=None, metavar="X",
              help="Fail unless every DDTREE accept length is >= X times DFLASH's (tree-friendly test models).")
@click.option("--acceptance", type=click.Path(path_type=Path), default=None,
              help="Acceptance table (TOML/JSON): project tok/s and speed-ups from the measured ms per round.")
@click.option("--phases", is_flag=True,
              help="Time every speculative round by phase in the server (draft, tree, verify, commit, gap) "
                   "and report the means per level.")
@click.option("--sampling", is_flag=True, help="Instead of speed: the T=1 distribution test against the baseline.")
@click.option("--samples", type=click.IntRange(min=1), default=256, show_default=True, help="--sampling: completions.")
@click.option("--sample-tokens", type=click.IntRange(min=1), default=4, show_default=True,
              help="--sampling: tokens per completion.")
@click.option("--seed", type=int, default=0, show_default=True, help="--sampling: first sampling_seed.")
@click.option("--report", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write a markdown report to FILE.")
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also draw tok/s vs concurrency and accept length vs budget to FILE.png (needs matplotlib).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds each server may take to become healthy (default: the set's).")
@click.option("--python", default=sys.executable, show_default="this interpreter",
              help="Interpreter that runs the server.")
@click.option("--logs", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Directory for the server logs (default: $PATCHKIT_HOME/logs/bench-<time>).")
@output_options
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
def bench(set_dir: Path | None, target: Path | None, gpus: int, model: Path, draft_model: Path, port: int,
          variants: str | None, budgets: tuple[int | str, ...] | None, concurrency: tuple[int, ...] | None,
          repeats: int | None, warmup: int | None, prompts: Path | None, max_new_tokens: int | None,
          no_check_outputs: bool, expect_tree_gain: float | None, acceptance: Path | None, phases: bool,
          sampling: bool,
          samples: int, sample_tokens: int, seed: int, report: Path | None, plot: Path | None,
          timeout_s: float | None, python: str, logs: Path | None, output: Output, extra_args: tuple[str, ...]) -> None:
    """Baseline vs DFLASH vs DDTREE in the real server, one server at a time, at each concurrency level.

    Arguments after -- go to every server.
    """
    from patchkit.bench.run import BenchOptions, run_bench
    from patchkit.patchset.base import locate
    from patchkit.render.smoke import SmokeConsole

    def core() -> CommandResult:
        chosen_set, chosen_target = locate(set_dir, target)
        options = BenchOptions(
            set_dir=chosen_set, target=chosen_target, gpus=gpus, model=model, draft_model=draft_model, port=port,
            prompts=prompts, max_new_tokens=max_new_tokens, timeout_s=timeout_s, python=python, logs=logs,
            extra_args=tuple(extra_args), variants=tuple(v for v in variants.split(",") if v) if variants else None,
            budgets=budgets, concurrency=concurrency, repeats=repeats, warmup=warmup,
            check_outputs=not no_check_outputs, expect_tree_gain=expect_tree_gain, acceptance=acceptance,
            report=report, plot=plot, sampling=sampling, samples=samples, sample_tokens=sample_tokens, seed=seed,
            phases=phases,
        )
        return run_bench(options, SmokeConsole(output.progress))

    run_command("bench", output, core)


# ---------------------------------------------------------------- offline bundles and test models


@cli.command(epilog=epilog())
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


@cli.command(epilog=epilog(_2="bad input, or torch/numpy missing (the message says what to install)"))
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Directory that receives target/ and draft/.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
@click.option("--heads", type=click.IntRange(min=1), default=None,
              help="Attention heads of both models (tiny models: a multiple of 2, default 4; tensor parallel size N "
                   "needs a multiple of N). With --shape: overrides the shape's.")
@click.option("--profile", default="default", show_default=True, metavar="NAME",
              help="default, or tree: a pair where a DDTree tree verifies more tokens than a DFLASH chain.")
@click.option("--shape", default=None, metavar="NAME",
              help="Random bf16 weights at a real shape instead (qwen3-8b, qwen3-1.7b); the options below override it.")
@click.option("--layers", type=int, default=None, help="Shape: target layers.")
@click.option("--hidden", type=int, default=None, help="Shape: hidden size.")
@click.option("--kv-heads", type=int, default=None, help="Shape: KV heads.")
@click.option("--head-dim", type=int, default=None, help="Shape: head dimension (default hidden / heads).")
@click.option("--intermediate", type=int, default=None, help="Shape: MLP intermediate size.")
@click.option("--vocab", type=int, default=None, help="Shape: vocabulary size.")
@click.option("--draft-layers", type=int, default=None, help="Shape: DFlash draft layers (default 2).")
@click.option("--block-size", type=int, default=None, help="Shape: DFlash block size (default 16).")
@output_options
def testmodels(out: Path, seed: int, heads: int | None, profile: str, shape: str | None, layers: int | None,
               hidden: int | None, kv_heads: int | None, head_dim: int | None, intermediate: int | None,
               vocab: int | None, draft_layers: int | None, block_size: int | None, output: Output) -> None:
    """Write a tiny arranged Qwen3 target and DFlash draft (no tokenizer; use input ids), or random
    weights at a real shape (--shape, or every shape option)."""
    from patchkit.hostprep.shapemodels import write_shaped
    from patchkit.hostprep.testmodels import write_test_models
    from patchkit.render.hostprep import with_byte_progress

    overrides = dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     intermediate=intermediate, vocab=vocab, draft_layers=draft_layers, block_size=block_size)
    if shape is not None or any(v is not None for k, v in overrides.items() if k != "heads"):
        run_command("testmodels", output, lambda: with_byte_progress(
            "writing models", lambda progress, announce: write_shaped(out, seed, shape, overrides, progress, announce),
            output.verbosity, bar=not output.as_json))
    else:
        run_command("testmodels", output, lambda: write_test_models(out, seed, heads=heads or 4, profile=profile))


def main() -> None:
    install_signal_handlers()
    cli(prog_name="patchkit")
