"""``patchkit bench``: every variant's server, one at a time, at every concurrency level.

Order of work: check the input (variants, budgets, concurrency, prompt file, acceptance table, draft
block size) and run the smoke's preflight, so bad input is one line before anything starts (exit 2);
then per variant: launch, ``/health``, per level a warm-up and ``repeats`` measured batches, teardown
(the smoke's code, :func:`patchkit.smoke.launch.serve`). Afterwards: greedy outputs against the
baseline's (a mismatch fails the bench), ratios against DFLASH and the baseline per repeat, the
tree-gain check (``--expect-tree-gain``), the projection (``--acceptance``), the report and the plot.

Exit codes: 0 everything ran, matched and was torn down cleanly; 1 a mismatch, a server failure, a
process left alive, a tree gain below the one expected, a failed distribution test; 2 bad input or a
failed preflight; 130 interrupted (the running server torn down first).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from patchkit.bench import measure, phases, sampling
from patchkit.bench.acceptance import ACCEPT_MODEL_ENV, AcceptanceTable, load_acceptance, project
from patchkit.bench.profile import AUTO, BenchProfile, Budget, Variant, VariantSpec, expand, load_bench_profile
from patchkit.bench.results import (
    BenchResult,
    LevelRun,
    Mismatch,
    Projection,
    Spread,
    TreeGain,
    VariantRun,
    spread,
)
from patchkit.errors import BadInput
from patchkit.smoke.client import Generation
from patchkit.smoke.compare import CONTINUATION_TOKENS, first_mismatch
from patchkit.smoke.launch import (
    Launch,
    QuietUI,
    Served,
    ServerUI,
    Status,
    default_logs_dir,
    preflight_or_raise,
    serve,
    server_argv,
    usable_prompts,
)
from patchkit.smoke.preflight import Preflight
from patchkit.smoke.prompts import Prompt, load_prompts
from patchkit.smoke.server import ServerGroup

DEFAULT_DRAFT_BLOCK = 16  # SGLang's default when the draft config names none


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    set_dir: Path
    target: Path
    gpus: int
    model: Path
    draft_model: Path
    port: int = 30000
    prompts: Path | None = None
    max_new_tokens: int | None = None
    timeout_s: float | None = None
    python: str = sys.executable
    logs: Path | None = None
    extra_args: tuple[str, ...] = ()
    variants: tuple[str, ...] | None = None
    budgets: tuple[Budget, ...] | None = None
    concurrency: tuple[int, ...] | None = None
    repeats: int | None = None
    warmup: int | None = None
    check_outputs: bool = True
    expect_tree_gain: float | None = None
    acceptance: Path | None = None
    report: Path | None = None
    plot: Path | None = None
    sampling: bool = False
    samples: int = 256
    sample_tokens: int = 4
    seed: int = 0
    phases: bool = False
    radix_cache: bool = False


RADIX_OFF = "--disable-radix-cache"


def profile_server_args(profile: BenchProfile, radix_cache: bool) -> tuple[str, ...]:
    """The profile's shared server arguments; with ``radix_cache``, without the flag that turns the cache off."""
    if not radix_cache:
        return profile.server_args
    return tuple(arg for arg in profile.server_args if arg != RADIX_OFF)


# ---------------------------------------------------------------- input checks (before anything starts)


def draft_block_size(draft_model: Path) -> int | None:
    """The DFlash draft's block size from its config.json (top level or ``dflash_config``); None if unreadable."""
    try:
        config = json.loads((draft_model / "config.json").read_text())
    except (OSError, ValueError):
        return None  # preflight reports the missing or broken config
    value = config.get("block_size", (config.get("dflash_config") or {}).get("block_size"))
    return int(value) if isinstance(value, int) else DEFAULT_DRAFT_BLOCK


def selected_variants(profile: BenchProfile, names: tuple[str, ...] | None) -> tuple[VariantSpec, ...]:
    if not names:
        return profile.variants
    known = ", ".join(v.name for v in profile.variants)
    chosen = []
    for name in names:
        spec = profile.variant(name)
        if spec is None:
            raise BadInput(f"--variants: the set's profile ({profile.smoke.set_id}) has no variant {name!r}",
                           hint=f"its variants: {known} ([[bench.variants]] in the set's manifest.toml)")
        chosen.append(spec)
    return tuple(chosen)


def check_levels(opts: BenchOptions, profile: BenchProfile, specs: tuple[VariantSpec, ...],
                 budgets: tuple[Budget, ...], levels: tuple[int, ...]) -> None:
    """Budgets and concurrency the server would refuse (or that the profile cannot run) are bad input."""
    if opts.budgets and not any(s.per_budget for s in specs):
        raise BadInput("--budgets given, but no selected variant takes a budget",
                       hint="add a tree variant to --variants")
    block = draft_block_size(opts.draft_model) if any(s.per_budget for s in specs) else None
    for budget in budgets:
        if block is None:
            break
        if not isinstance(budget, int):  # auto: the server checks its own widths (L, 2L, 4L)
            continue
        if budget + 1 < block:
            raise BadInput(f"--budgets {budget}: DDTREE needs a budget >= draft block size - 1 = {block - 1} "
                           f"({opts.draft_model / 'config.json'} has block_size {block})")
        if budget > profile.max_budget:
            raise BadInput(f"--budgets {budget}: above the profile's max_budget {profile.max_budget}")
    server_max = _int_flag((*profile.server_args, *opts.extra_args), "--max-running-requests")
    limit = min(profile.max_concurrency, server_max) if server_max else profile.max_concurrency
    for level in levels:
        if level > limit:
            by_server = server_max is not None and server_max <= profile.max_concurrency
            where = "--max-running-requests" if by_server else "the profile's max_concurrency"
            raise BadInput(f"--concurrency {level}: the server runs at most {limit} requests at once ({where})")
    if opts.expect_tree_gain is not None and not ({"chain", "tree"} <= {s.kind for s in specs}):
        raise BadInput("--expect-tree-gain needs a chain (DFLASH) and a tree (DDTREE) variant")


def _int_flag(argv: tuple[str, ...], flag: str) -> int | None:
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if word.startswith(flag + "=") and word.split("=", 1)[1].isdigit():
            return int(word.split("=", 1)[1])
    return None


def check_outputs_dir(path: Path | None, option: str) -> None:
    if path is not None and not path.parent.is_dir():
        raise BadInput(f"{option} {path}: folder {path.parent} does not exist")


# ---------------------------------------------------------------- variants and levels


#: One level's jobs, per measured repeat the generations in job order, and the repeats' wall-clock span.
LevelData = tuple[list[measure.Job], list[list[Generation]], phases.Window]


def _level(server: ServerGroup, status: Status, variant: Variant, prompts: tuple[Prompt, ...], concurrency: int,
           repeats: int, warmup: int, max_new_tokens: int, timeout_s: float) -> LevelData:
    jobs = measure.level_jobs(prompts, concurrency)
    for w in range(warmup):
        status.update(f"{variant.name}: concurrency {concurrency}, warm-up {w + 1}/{warmup}")
        measure.run_batch(server, jobs[:concurrency], concurrency, max_new_tokens, timeout_s)
    batches: list[list[Generation]] = []
    start = time.time()
    for r in range(repeats):
        status.update(f"{variant.name}: concurrency {concurrency}, repeat {r + 1}/{repeats} ({len(jobs)} requests)")
        batches.append(measure.run_batch(server, jobs, concurrency, max_new_tokens, timeout_s))
    return jobs, batches, phases.Window(concurrency=concurrency, start=start, end=time.time())


def _flush_phases(server: ServerGroup, prompts: tuple[Prompt, ...], timeout_s: float) -> None:
    """One short request after an idle spell: the server writes the rounds it has read back (it flushes
    at the first round after a pause), so the last level's rounds reach the file before teardown."""
    time.sleep(phases.IDLE_FLUSH_S)
    measure.run_batch(server, measure.level_jobs(prompts[:1], 1), 1, phases.PROBE_TOKENS, timeout_s)


def _level_run(concurrency: int, jobs: list[measure.Job], batches: list[list[Generation]]) -> LevelRun:
    stats = tuple(measure.repeat_stats(b) for b in batches)
    flat = [g for b in batches for g in b]
    accept = [s.accept_length for s in stats if s.accept_length is not None]
    rounds = sum(s.verify_rounds or 0 for s in stats)
    tokens = sum(s.output_tokens for s in stats if s.verify_rounds)
    return LevelRun(
        concurrency=concurrency, requests=len(jobs), repeats=stats,
        per_request_tok_s=spread([s.per_request_tok_s for s in stats]),
        aggregate_tok_s=spread([s.aggregate_tok_s for s in stats]),
        ttft_ms=spread([s.ttft_ms for s in stats]), ms_per_round=spread([s.ms_per_round for s in stats]),
        accept_length=tokens / rounds if accept and rounds else None, histogram=measure.histogram(flat),
    )


def bench_variant(variant: Variant, launch: Launch, prompts: tuple[Prompt, ...], levels: tuple[int, ...], repeats: int,
                  warmup: int, max_new_tokens: int, ui: ServerUI,
                  time_phases: bool = False,
                  table: AcceptanceTable | None = None) -> tuple[VariantRun, dict[int, LevelData]]:
    """One server: every level; returns the run and, per level, the jobs and generations of each repeat.

    ``time_phases``: the server writes a line per decode round (``phases``) into the logs folder, and
    each level gets the means of the rounds that started inside its measured repeats. An ``auto``
    tree is always timed so (each round's budget is in its line), and with a ``table`` its policy
    judges trees by the table's accept lengths (random weights accept nothing real)."""
    argv = server_argv(launch, variant.args(), variant.spec.uses_draft)
    collected: dict[int, LevelData] = {}
    phase_path = phases.phase_file(launch.logs, variant.name)
    env = {}
    timed = (time_phases or variant.budget == AUTO) and variant.spec.uses_draft
    if timed:
        phase_path.unlink(missing_ok=True)
        env[phases.PHASE_TIMING_ENV] = str(phase_path.resolve())
    if variant.budget == AUTO and table is not None and table.tree:
        env[ACCEPT_MODEL_ENV] = json.dumps({str(b): a for b, a in table.tree.items()})

    def work(server: ServerGroup, status: Status) -> None:
        for concurrency in levels:
            collected[concurrency] = _level(server, status, variant, prompts, concurrency, repeats, warmup,
                                            max_new_tokens, launch.request_timeout_s)
        if timed:
            status.update(f"{variant.name}: writing the phase timings")
            _flush_phases(server, prompts, launch.request_timeout_s)

    served: Served = serve(variant.name, argv, launch, ui, work, extra_env=env)
    runs = tuple(_level_run(c, collected[c][0], collected[c][1]) for c in levels if c in collected)
    if timed:
        by_level = phases.per_level(phase_path, [collected[c][2] for c in levels if c in collected])
        runs = tuple(replace(level, phases=by_level.get(level.concurrency)) for level in runs)
    return (VariantRun(name=variant.name, label=variant.label, kind=variant.spec.kind, budget=variant.budget,
                       argv=served.argv, log=served.log, ready_s=served.ready_s, teardown=served.teardown,
                       failure=served.failure, log_tail=served.log_tail, levels=runs), collected)


# ---------------------------------------------------------------- comparisons


def reference_outputs(baseline_collected: dict[int, LevelData]) -> dict[str, tuple[int, ...]]:
    """Per prompt id, the baseline's greedy output at its first level and first repeat."""
    first_level = next(iter(baseline_collected.values()))
    jobs, batches, _ = first_level
    return {job.prompt.id: gen.output_ids for job, gen in zip(jobs, batches[0], strict=True)}


def compare_level(level: LevelRun, data: LevelData, reference: dict[str, tuple[int, ...]]) -> LevelRun:
    jobs, batches, _ = data
    mismatches: list[Mismatch] = []
    compared = 0
    for repeat, batch in enumerate(batches):
        for job, gen in zip(jobs, batch, strict=True):
            want = reference.get(job.prompt.id)
            if want is None:
                continue
            compared += 1
            at = first_mismatch(want, gen.output_ids)
            if at is not None:
                window = slice(at, at + CONTINUATION_TOKENS)
                mismatches.append(Mismatch(prompt_id=job.prompt.id, repeat=repeat, request=job.index, first_mismatch=at,
                                           reference_continuation=tuple(want[window]),
                                           continuation=tuple(gen.output_ids[window])))
    return replace(level, compared=compared, mismatches=tuple(mismatches))


def fastest_chains(runs: list[VariantRun]) -> dict[int, tuple[str, LevelRun]]:
    """Per level, the DFLASH variant a user would run there: the one with the highest aggregate tok/s
    (overlap on or off, say), by name."""
    best: dict[int, tuple[str, LevelRun]] = {}
    for run in runs:
        if run.kind != "chain":
            continue
        for level in run.levels:
            speed = level.aggregate_tok_s.mean if level.aggregate_tok_s else 0.0
            held = best.get(level.concurrency)
            if held is None or speed > (held[1].aggregate_tok_s.mean if held[1].aggregate_tok_s else 0.0):
                best[level.concurrency] = (run.name, level)
    return best


def with_ratios(runs: list[VariantRun]) -> list[VariantRun]:
    """Aggregate tok/s over the baseline's and the fastest DFLASH variant's at the same level, repeat by
    repeat; each level names the DFLASH variant it was compared with."""
    baseline_run = next((r for r in runs if r.kind == "baseline" and r.levels), None)
    baseline = {level.concurrency: level for level in baseline_run.levels} if baseline_run else {}
    chains = fastest_chains(runs)

    def ratio(level: LevelRun, ref: LevelRun | None) -> Spread | None:
        if ref is None:
            return None
        return spread([a.aggregate_tok_s / b.aggregate_tok_s for a, b in zip(level.repeats, ref.repeats, strict=False)
                       if b.aggregate_tok_s])

    def compared(level: LevelRun) -> LevelRun:
        name, chain = chains.get(level.concurrency, (None, None))
        return replace(level, vs_baseline=ratio(level, baseline.get(level.concurrency)),
                       vs_dflash=ratio(level, chain), dflash_reference=name)

    return [replace(run, levels=tuple(compared(level) for level in run.levels)) for run in runs]


def chosen_budgets(run: VariantRun, level: LevelRun) -> int | dict[int, int] | None:
    """A row's budget for the projection: the fixed one, or an auto tree's rounds per budget."""
    if run.budget != AUTO:
        return run.budget if isinstance(run.budget, int) else None
    return dict(level.phases.budgets) if level.phases is not None and level.phases.budgets else None


def tree_gains(runs: list[VariantRun], expected: float) -> tuple[TreeGain, ...]:
    chain = next((a for r in runs if r.kind == "chain" and (a := r.accept_length())), None)
    if chain is None:
        return ()
    gains = []
    for run in runs:
        accept = run.accept_length()
        if run.kind == "tree" and accept:
            gain = accept / chain
            gains.append(TreeGain(variant=run.name, budget=run.budget if run.budget is not None else 0,
                                  accept_length=accept,
                                  dflash_accept_length=chain, gain=gain, ok=gain >= expected))
    return tuple(gains)


# ---------------------------------------------------------------- the command


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """Everything checked before the first server starts."""

    profile: BenchProfile
    specs: tuple[VariantSpec, ...]
    budgets: tuple[Budget, ...]
    levels: tuple[int, ...]
    table: AcceptanceTable | None
    prompt_file: Path
    prompts: tuple[Prompt, ...]
    skipped: tuple[str, ...]
    preflight: Preflight
    launch: Launch


def _prepare(opts: BenchOptions) -> Prepared:
    if opts.gpus < 0:
        raise BadInput("--gpus must be 0 (CPU stand-in) or more")
    profile = load_bench_profile(opts.set_dir)
    specs = selected_variants(profile, opts.variants)
    budgets = opts.budgets or profile.budgets
    levels = opts.concurrency or profile.concurrency
    check_levels(opts, profile, specs, budgets, levels)
    table = load_acceptance(opts.acceptance) if opts.acceptance else None
    check_outputs_dir(opts.report, "--report")
    check_outputs_dir(opts.plot, "--plot")
    if opts.plot is not None:
        from patchkit.bench.report import plot_unavailable

        missing = plot_unavailable()
        if missing:
            raise BadInput(f"--plot needs matplotlib, which is not importable here ({missing})",
                           hint="pip install 'patchkit[plot]' (or matplotlib), or leave --plot out")
    prompt_file = opts.prompts or profile.smoke.prompts
    prompts, skipped = usable_prompts(load_prompts(prompt_file), (*profile.server_args, *opts.extra_args))
    if not prompts:
        raise BadInput("no prompt can run: every prompt is text and the server skips its tokenizer")
    if opts.sampling:
        sampling.check_options(opts.samples, opts.sample_tokens, specs)
    launch = Launch(python=opts.python, model=opts.model, draft_model=opts.draft_model, target=opts.target,
                    port=opts.port, gpus=opts.gpus, server_args=profile_server_args(profile, opts.radix_cache),
                    extra_args=opts.extra_args,
                    draft_model_flag=profile.smoke.draft_model_flag,
                    startup_timeout_s=opts.timeout_s or profile.smoke.startup_timeout_s,
                    request_timeout_s=profile.smoke.request_timeout_s,
                    grace_period_s=profile.smoke.grace_period_s, logs=opts.logs or default_logs_dir("bench"))
    argvs = [server_argv(launch, v.args(), v.spec.uses_draft) for v in expand(specs, budgets)]
    preflight = preflight_or_raise(gpus=opts.gpus, python=opts.python, port=opts.port, model=opts.model,
                                   draft_model=opts.draft_model, target=opts.target, manifest=profile.manifest,
                                   argvs=argvs)
    return Prepared(profile=profile, specs=specs, budgets=budgets, levels=levels, table=table, prompt_file=prompt_file,
                    prompts=prompts, skipped=skipped, preflight=preflight, launch=launch)


def run_bench(opts: BenchOptions, ui: ServerUI | None = None) -> BenchResult:
    """The whole bench; see the module docstring for the order and the exit codes."""
    ui = ui or QuietUI()
    ready = _prepare(opts)
    launch, levels = ready.launch, ready.levels
    variants = expand(ready.specs, ready.budgets)
    base = BenchResult(command="bench", ok=False, set_id=ready.profile.smoke.set_id, gpus=opts.gpus,
                       preflight=ready.preflight, logs=launch.logs, prompt_file=ready.prompt_file,
                       prompts=len(ready.prompts), skipped_prompts=ready.skipped, budgets=ready.budgets)
    if opts.sampling:
        check = sampling.run_sampling(variants, launch, ready.prompts[0], opts.samples, opts.sample_tokens, opts.seed,
                                      max(levels), ui)
        return write_outputs(replace(base, ok=check.ok, mode="sampling", sampling=check,
                                     max_new_tokens=opts.sample_tokens, concurrency=(max(levels),),
                                     failures=check.failures), opts)
    max_new_tokens = opts.max_new_tokens or ready.profile.max_new_tokens
    repeats = opts.repeats or ready.profile.repeats
    warmup = ready.profile.warmup if opts.warmup is None else opts.warmup
    runs: list[VariantRun] = []
    collected: dict[str, dict[int, LevelData]] = {}
    for variant in variants:
        run, data = bench_variant(variant, launch, ready.prompts, levels, repeats, warmup, max_new_tokens, ui,
                                  time_phases=opts.phases, table=ready.table)
        runs.append(run)
        collected[run.name] = data
    failures = [f"{r.label}: {r.failure}" for r in runs if r.failure]
    failures += [f"{r.label}: processes {list(r.teardown.leftover_pids)} left alive"
                 for r in runs if not r.teardown.clean]
    baseline = next((r for r in runs if r.kind == "baseline" and collected[r.name]), None)
    mismatches = 0
    if opts.check_outputs and baseline is not None:
        reference = reference_outputs(collected[baseline.name])
        runs = [replace(run, levels=tuple(compare_level(level, collected[run.name][level.concurrency], reference)
                                          for level in run.levels)) for run in runs]
        mismatches = sum(len(level.mismatches) for run in runs for level in run.levels)
        if mismatches:
            failures.append(f"{mismatches} outputs differ from the baseline's greedy output")
    elif opts.check_outputs and any(r.kind == "baseline" for r in runs):
        failures.append("outputs not compared: the baseline server produced no output")
    runs = with_ratios(runs)
    gains: tuple[TreeGain, ...] = ()
    if opts.expect_tree_gain is not None:
        gains = tree_gains(runs, opts.expect_tree_gain)
        failures += [f"{g.variant}: accept length {g.accept_length:.2f} is {g.gain:.2f}x DFLASH's "
                     f"{g.dflash_accept_length:.2f}, below the expected {opts.expect_tree_gain:g}x"
                     for g in gains if not g.ok]
        if not gains:
            failures.append("tree gain not measured: no DFLASH or DDTREE accept length")
    projection = None
    if ready.table is not None:
        projection = Projection(table=ready.table.path, source=ready.table.source, rows=project(
            [(r.name, r.kind, chosen_budgets(r, level), level.concurrency,
              level.ms_per_round.mean if level.ms_per_round else None)
             for r in runs for level in r.levels], ready.table))
    result = replace(base, ok=not failures, max_new_tokens=max_new_tokens, concurrency=levels, repeats=repeats,
                     warmup=warmup, outputs_checked=opts.check_outputs and baseline is not None,
                     variants=tuple(runs), mismatches=mismatches, expected_tree_gain=opts.expect_tree_gain,
                     tree_gain=gains, projection=projection, phases=opts.phases, failures=tuple(failures))
    return write_outputs(result, opts)


def write_outputs(result: BenchResult, opts: BenchOptions) -> BenchResult:
    """The markdown report and the plot, when asked (a missing matplotlib is a note, not a failure)."""
    from patchkit.bench import report

    if opts.report:
        opts.report.write_text(report.markdown(result))
        result = replace(result, report=opts.report)
    if opts.plot:
        note = report.plot(result, opts.plot)
        result = replace(result, plot=None if note else opts.plot, plot_note=note)
    return result
