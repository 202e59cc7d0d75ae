"""``patchkit bench``: baseline vs DFLASH vs DDTREE in the real server."""

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
@click.option("--radix-cache", is_flag=True,
              help="Keep SGLang's radix cache on (drop --disable-radix-cache from the profile's server arguments): "
                   "prompts that share a prefix then share its KV.")
@click.option("--sampling", is_flag=True, help="Instead of speed: the T=1 distribution test against the baseline.")
@click.option("--samples", type=click.IntRange(min=1), default=256, show_default=True, help="--sampling: completions.")
@click.option("--sample-tokens", type=click.IntRange(min=1), default=4, show_default=True,
              help="--sampling: tokens per completion.")
@click.option("--seed", type=int, default=0, show_default=True, help="--sampling: first sampling_seed.")
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
                               check_outputs=not no_check_outputs, **measure)
        return run_bench(options, SmokeConsole(output.progress))

    run_command("bench", output, core)
