"""``patchkit bench``: baseline vs DFLASH vs DDTREE in the real server (on one or several attention backends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from patchkit.commands.options import Output, ServerChoice, epilog, output_options, run_command, server_options
from patchkit.results import CommandResult


def _positive_int(part: str, whole: str, what: str = "integers") -> int:
    try:
        number = int(part)
    except ValueError:
        raise click.BadParameter(f"{whole!r} is not a comma-separated list of {what}") from None
    if number < 1:
        raise click.BadParameter(f"{whole!r}: every value must be a positive integer")
    return number


def _parts(value: str) -> list[str]:
    parts = [part.strip() for part in value.split(",")]
    if not any(parts):
        raise click.BadParameter(f"{value!r} names no value")
    if not all(parts):
        raise click.BadParameter(f"{value!r} has an empty item: separate the values with single commas")
    return parts


def _budget_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int | str, ...] | None:
    """``15,63,auto`` -> (15, 63, "auto"): numbers of nodes, or auto (the server picks per round)."""
    if value is None:
        return None
    return tuple("auto" if part.lower() == "auto" else _positive_int(part, value, "positive integers or auto")
                 for part in _parts(value))


def _int_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    """``16,64,256`` -> (16, 64, 256); a usage error names the option."""
    if value is None:
        return None
    return tuple(_positive_int(part, value) for part in _parts(value))


def _name_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """``baseline,ddtree`` -> ("baseline", "ddtree")."""
    return tuple(name for name in value.split(",") if name) if value else None


@click.command(epilog=epilog(_1="an output mismatch, a server failure, a process left, a check below its threshold",
                             _2="preflight failed, or bad input (budget, concurrency, variant, file)",
                             _130="interrupted; the running server was torn down"))
@server_options("bench", tokens="request")
@click.option("--variants", callback=_name_list, default=None, metavar="A,B,...",
              help="Variants of the set's [bench] profile to run, by name (default: all).")
@click.option("--budgets", callback=_budget_list, default=None, metavar="16,64,auto",
              help="DDTREE budgets: numbers of nodes, or auto (the server picks each round's; "
                   "default: the profile's).")
@click.option("--concurrency", callback=_int_list, default=None, metavar="1,8,32",
              help="Concurrent requests per level (default: the profile's).")
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="Measured batches per level.")
@click.option("--warmup", type=click.IntRange(min=0), default=None, help="Unmeasured batches per level first.")
@click.option("--no-check-outputs", is_flag=True,
              help="Do not compare greedy outputs with the baseline's (random-weight models at a real shape).")
@click.option("--expect-tree-gain", type=click.FloatRange(min=0, min_open=True), default=None, metavar="X",
              help="Fail unless every DDTREE accept length is >= X times DFLASH's (tree-friendly test models).")
@click.option("--acceptance", type=click.Path(path_type=Path), default=None,
              help="Acceptance table (TOML/JSON): project tok/s and speed-ups from the measured ms per round.")
@click.option("--phases", is_flag=True,
              help="Time every speculative round by phase in the server (draft, tree, verify, commit, gap) "
                   "and report the means per level.")
@click.option("--radix-prompts", is_flag=True,
              help="Also measure generated token-id prompts that share a long prefix, and a chain of prompts each a "
                   "prefix of the next (the radix cache's shared KV; the prompt set 'radix', written into the logs).")
@click.option("--backends", callback=_name_list, default=None, metavar="fa3,flashinfer,triton",
              help="Run every selected variant on each of these attention backends that its kind runs on "
                   "(as NAME-BACKEND; [bench.backends] in the manifest). A single one: --variants dflash-fa3.")
@click.option("--start-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Seconds each server may take to start; a slower one is reported as not started (with its "
                   "log's last line) and the run goes on with the next variant.")
@click.option("--long-prompts", callback=_int_list, default=None, metavar="4096,...",
              help="Also measure a generated set of 8 prompts of N tokens each, in the same servers, "
                   "every level (several sets: --prompts short,FILE,...).")
@click.option("--changing-load", is_flag=True,
              help="Requests arrive and finish at different times (seeded lengths and in-flight targets, "
                   "--seed): tok/s, the batch sizes the server ran and the rounds' p50/p99 per level.")
@click.option("--load-requests", type=click.IntRange(min=1), default=None, metavar="N",
              help="--changing-load: requests per level (default: 4 x the level's concurrency).")
@click.option("--sampling", is_flag=True, help="Instead of speed: the T=1 distribution test against the baseline.")
@click.option("--samples", type=click.IntRange(min=1), default=None,
              help="--sampling: completions per server (default: the fewest with power >= 0.99 against the "
                   "broken acceptance rule's distortion; docs/sampling-power.md).")
@click.option("--sample-tokens", type=click.IntRange(min=1), default=4, show_default=True,
              help="--sampling: tokens per completion.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="--sampling: first sampling_seed; --changing-load: the schedule's seed.")
@click.option("--report", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write a markdown report to FILE.")
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also draw tok/s vs concurrency and accept length vs budget to FILE.png (needs matplotlib).")
@output_options
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
def bench(server: ServerChoice, no_check_outputs: bool, output: Output, **measure: Any) -> None:
    """Baseline vs DFLASH vs DDTREE in the real server, one server at a time, at each concurrency level.

    Arguments after -- go to every server.
    """
    from patchkit import paths
    from patchkit.bench.run import BenchOptions, run_bench
    from patchkit.render.smoke import SmokeConsole

    def core() -> CommandResult:
        # the one options object of the run: every option above is a field of it, by the same name
        options = BenchOptions(**server.fields(*paths.locate(server.set_dir, server.target)),
                               check_outputs=not no_check_outputs, **{**measure,
                                                                      "long_prompts": measure["long_prompts"] or ()})
        return run_bench(options, SmokeConsole(output.progress))

    run_command("bench", output, core)
