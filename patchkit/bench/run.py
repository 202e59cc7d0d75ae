"""``patchkit bench``: every variant's server, one at a time, at every concurrency level.

Order of work: check the input (variants, budgets, concurrency, prompt file, acceptance table, draft
block size) and run the smoke's preflight, so bad input is one line before anything starts (exit 2);
then per variant: launch, ``/health``, per level a warm-up and ``repeats`` measured batches, teardown
(the smoke's code, :func:`patchkit.smoke.launch.serve`). Afterwards: greedy outputs against the
baseline's (a mismatch fails the bench), ratios against the fastest DFLASH and the baseline per repeat,
the tree-gain check (``--expect-tree-gain``), the projection (``--acceptance``), the report and the plot.

A server measures every prompt set (:mod:`patchkit.bench.prompt_sets`) at every level, in steady
batches or, with ``--changing-load``, as requests that arrive and finish at different times
(:mod:`patchkit.bench.load`). Variants may run on other attention backends (``dflash-fa3``,
``--backends``; :mod:`patchkit.bench.profile`); a server that has not started within
``--start-timeout`` is reported as not started and the run goes on with the next one.

Exit codes: 0 everything ran (or did not start within ``--start-timeout``), matched and was torn down
cleanly; 1 a mismatch, a server failure, a process left alive, a tree gain below the one expected, a
failed distribution test, no server started at all; 2 bad input or a failed preflight; 130 interrupted
(the running server torn down first).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from patchkit.bench import load, measure, phases, radix_prompts, sampling
from patchkit.bench.acceptance import ACCEPT_MODEL_ENV, AcceptanceTable, load_acceptance, project
from patchkit.bench.profile import (
    ATTENTION_FLAGS,
    AUTO,
    KIND_LABELS,
    BenchProfile,
    Budget,
    Choice,
    Variant,
    VariantSpec,
    attention_backend,
    expand,
    load_bench_profile,
)
from patchkit.bench.prompt_sets import PromptSet, check_context, load_sets
from patchkit.bench.results import (
    BenchResult,
    Fastest,
    LevelRun,
    Mismatch,
    Projection,
    PromptSetInfo,
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
    radix_server_args,
    request,
    serve,
    server_arguments,
    server_argv,
    usable_prompts,
)
from patchkit.smoke.preflight import Preflight, run_preflight
from patchkit.smoke.server import ServerGroup, log_tail

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
    samples: int | None = None  # None: the count for the target power (sampling.default_samples)
    sample_tokens: int = 4
    seed: int = 0
    phases: bool = False
    radix_cache: bool = True  # SGLang's radix cache in every server (False: --disable-radix-cache)
    radix_prompts: bool = False  # also the generated prompts that share prefixes (radix_prompts.py)
    backends: tuple[str, ...] | None = None  # run every selected variant on each (that its kind runs on)
    start_timeout: float | None = None  # a server not ready by then is reported as not started; the run goes on
    long_prompts: tuple[int, ...] = ()  # a generated prompt set of each length, measured by the same servers
    changing_load: bool = False
    load_requests: int | None = None  # --changing-load: requests per level (default: 4 x concurrency)


OVERLAP_OFF = "--disable-overlap-schedule"


def sample_count(opts: BenchOptions) -> int:
    """``--samples``, else the count whose power against the stated distortion reaches the target."""
    return opts.samples if opts.samples is not None else sampling.default_samples(opts.sample_tokens)


def profile_server_args(profile: BenchProfile, radix_cache: bool) -> tuple[str, ...]:
    """The profile's shared server arguments, the radix cache on (the default) or off."""
    return radix_server_args(profile.server_args, radix_cache)


# ---------------------------------------------------------------- input checks (before anything starts)


def draft_block_size(draft_model: Path) -> int | None:
    """The DFlash draft's block size from its config.json (top level or ``dflash_config``); None if unreadable."""
    try:
        config = json.loads((draft_model / "config.json").read_text())
    except (OSError, ValueError):
        return None  # preflight reports the missing or broken config
    value = config.get("block_size", (config.get("dflash_config") or {}).get("block_size"))
    return int(value) if isinstance(value, int) else DEFAULT_DRAFT_BLOCK


def selected_variants(profile: BenchProfile, names: tuple[str, ...] | None) -> tuple[Choice, ...]:
    """The ``--variants`` by name: a profile entry, or ``NAME-BACKEND`` for that entry on another backend."""
    if not names:
        return tuple(Choice(spec=spec) for spec in profile.variants)
    return tuple(_choice(profile, name) for name in names)


def _choice(profile: BenchProfile, name: str) -> Choice:
    spec = profile.variant(name)
    if spec is not None:
        return Choice(spec=spec)
    base, _, backend = name.rpartition("-")
    spec = profile.variant(base) if base and backend in profile.known_backends else None
    if spec is None:
        known = ", ".join(v.name for v in profile.variants)
        raise BadInput(f"--variants: the set's profile ({profile.smoke.set_id}) has no variant {name!r}",
                       hint=f"its variants: {known}, each also as NAME-BACKEND with BACKEND one of "
                            f"{', '.join(profile.known_backends)} ([bench] in the set's manifest.toml)")
    if not profile.runs_on(spec, backend):
        raise BadInput(f"--variants {name}: {_kind_words(spec)} does not run on {backend} (it runs on "
                       f"{', '.join(profile.backends.get(spec.kind, ())) or 'no named backend'})",
                       hint="[bench.backends] in the set's manifest.toml lists the backends of each kind")
    return Choice(spec=spec, backend=backend)


def _kind_words(spec: VariantSpec) -> str:
    return f"{spec.name} ({KIND_LABELS[spec.kind]})"


def across_backends(profile: BenchProfile, choices: tuple[Choice, ...],
                    backends: tuple[str, ...]) -> tuple[tuple[Choice, ...], tuple[str, ...]]:
    """``--backends``: every choice without a backend of its own, once per backend its kind runs on; the
    notes say which pairs were left out. A backend no choice runs on, or no choice left, is bad input."""
    for backend in backends:
        if backend not in profile.known_backends:
            raise BadInput(f"--backends {backend}: not a backend of the set's table "
                           f"({', '.join(profile.known_backends)})",
                           hint="[bench.backends] in the set's manifest.toml adds one")
    out: list[Choice] = []
    notes: list[str] = []
    for choice in choices:
        if choice.backend:
            out.append(choice)
            continue
        runs = [b for b in backends if profile.runs_on(choice.spec, b)]
        out += [Choice(spec=choice.spec, backend=b) for b in runs]
        left = [b for b in backends if b not in runs]
        if left:
            notes.append(f"{choice.spec.name}: not run on {', '.join(left)} ({KIND_LABELS[choice.spec.kind]} runs on "
                         f"{', '.join(profile.backends.get(choice.spec.kind, ()))}; [bench.backends])")
    unique = tuple({c.name: c for c in out}.values())
    if not unique:
        raise BadInput(f"--backends {','.join(backends)}: no selected variant runs on any of them",
                       hint="; ".join(notes))
    return unique, tuple(notes)


def variant_launch(launch: Launch, variant: Variant) -> Launch:
    """The launch of one variant's server: a variant on its own backend drops the shared backend flags."""
    return replace(launch, server_args=variant.shared_args(launch.server_args))


def check_levels(opts: BenchOptions, profile: BenchProfile, specs: tuple[VariantSpec, ...],
                 budgets: tuple[Budget, ...], levels: tuple[int, ...]) -> None:
    """Budgets and concurrency the server would refuse (or that the profile cannot run) are bad input."""
    if opts.start_timeout is not None and opts.timeout_s is not None:
        raise BadInput("--start-timeout and --timeout both limit a server's start: give one",
                       hint="--start-timeout reports a slow server as not started and goes on; --timeout fails it")
    if opts.load_requests is not None and not opts.changing_load:
        raise BadInput("--load-requests is for --changing-load")
    if opts.changing_load and opts.sampling:
        raise BadInput("--changing-load measures speed; --sampling tests the distribution: give one")
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

#: (prompt set, concurrency): what a level is, and what its ratios and the fastest DFLASH are per.
Key = tuple[str, int]


@dataclass(frozen=True, kw_only=True)
class LevelPlan:
    """How every level of every server runs."""

    repeats: int
    warmup: int
    max_new_tokens: int
    load: load.LoadPlan | None = None  # --changing-load


@dataclass(frozen=True, kw_only=True)
class LevelData:
    """One level's jobs, per measured repeat the generations in job order, the repeats' wall-clock span,
    and (changing load) the schedule and each repeat's in-flight trace."""

    jobs: list[measure.Job]
    batches: list[list[Generation]]
    window: phases.Window
    schedule: load.Schedule | None = None
    traces: tuple[load.Trace, ...] = ()


def _level(server: ServerGroup, status: Status, variant: Variant, prompt_set: PromptSet, concurrency: int,
           plan: LevelPlan, timeout_s: float) -> LevelData:
    where = f"{variant.name}: {prompt_set.name} prompts, concurrency {concurrency}"
    steady = measure.level_jobs(prompt_set.prompts, concurrency)
    for w in range(plan.warmup):  # steady batches in both modes: the server's first batch of this size
        status.update(f"{where}, warm-up {w + 1}/{plan.warmup}")
        measure.run_batch(server, steady[:concurrency], concurrency, plan.max_new_tokens, timeout_s)
    batches: list[list[Generation]] = []
    traces: list[load.Trace] = []
    start = time.time()
    if plan.load is None:
        for r in range(plan.repeats):
            status.update(f"{where}, repeat {r + 1}/{plan.repeats} ({len(steady)} requests)")
            batches.append(measure.run_batch(server, steady, concurrency, plan.max_new_tokens, timeout_s))
        return LevelData(jobs=steady, batches=batches,
                         window=phases.Window(concurrency=concurrency, start=start, end=time.time(),
                                              prompt_set=prompt_set.name))
    schedule = load.schedule(prompt_set.prompts, concurrency, plan.max_new_tokens, plan.load)
    for r in range(plan.repeats):
        status.update(f"{where}, changing load {r + 1}/{plan.repeats} ({len(schedule.jobs)} requests)")
        generations, trace = load.run_schedule(schedule, lambda job: request(
            server, job.prompt, job.max_new_tokens or plan.max_new_tokens, timeout_s, job.sampling))
        batches.append(generations)
        traces.append(trace)
    return LevelData(jobs=list(schedule.jobs), batches=batches, schedule=schedule, traces=tuple(traces),
                     window=phases.Window(concurrency=concurrency, start=start, end=time.time(),
                                          prompt_set=prompt_set.name))


def _flush_phases(server: ServerGroup, prompt_set: PromptSet, timeout_s: float) -> None:
    """One short request after an idle spell: the server writes the rounds it has read back (it flushes
    at the first round after a pause), so the last level's rounds reach the file before teardown."""
    time.sleep(phases.IDLE_FLUSH_S)
    measure.run_batch(server, measure.level_jobs(prompt_set.prompts[:1], 1), 1, phases.PROBE_TOKENS, timeout_s)


def _level_run(key: Key, data: LevelData, plan: LevelPlan) -> LevelRun:
    stats = tuple(measure.repeat_stats(b) for b in data.batches)
    flat = [g for b in data.batches for g in b]
    accept = [s.accept_length for s in stats if s.accept_length is not None]
    rounds = sum(s.verify_rounds or 0 for s in stats)
    tokens = sum(s.output_tokens for s in stats if s.verify_rounds)
    changing = (load.load_stats(plan.load, data.schedule, data.batches, data.traces)
                if plan.load is not None and data.schedule is not None else None)
    return LevelRun(
        concurrency=key[1], requests=len(data.jobs), repeats=stats,
        per_request_tok_s=spread([s.per_request_tok_s for s in stats]),
        aggregate_tok_s=spread([s.aggregate_tok_s for s in stats]),
        ttft_ms=spread([s.ttft_ms for s in stats]), ms_per_round=spread([s.ms_per_round for s in stats]),
        accept_length=tokens / rounds if accept and rounds else None, histogram=measure.histogram(flat),
        prompt_set=key[0], load=changing,
    )


#: How far back the start report looks for a line that says where the start was.
START_TAIL_LINES = 50


def not_started_words(served: Served, limit_s: float) -> str:
    """Why a server has no numbers when it was still starting at its limit: the limit and where it was
    (the log's last line, skipping the access lines of the bench's own /health polls)."""
    lines = [line.strip() for line in log_tail(served.log, START_TAIL_LINES).splitlines() if "/health" not in line]
    return f"did not start within {limit_s:g} s" + (f"; last log line: {lines[-1]}" if lines else "")


def bench_variant(variant: Variant, launch: Launch, prompt_sets: tuple[PromptSet, ...], levels: tuple[int, ...],
                  plan: LevelPlan, ui: ServerUI, time_phases: bool = False, table: AcceptanceTable | None = None,
                  start_timeout: bool = False) -> tuple[VariantRun, dict[Key, LevelData]]:
    """One server: every prompt set at every level; returns the run and, per level, what it collected.

    ``time_phases``: the server writes a line per decode round (``phases``) into the logs folder, and
    each level gets the means of the rounds that started inside its measured repeats. An ``auto``
    tree, and every speculative server under a changing load, is always timed so (each line carries the
    round's batch size and budget), and with a ``table`` an auto tree's policy judges trees by the
    table's accept lengths (random weights accept nothing real). ``start_timeout``: a server still
    starting at ``launch.startup_timeout_s`` is reported as not started (``not_started``), not failed."""
    launch = variant_launch(launch, variant)
    argv = server_argv(launch, variant.args(), variant.spec.uses_draft)
    collected: dict[Key, LevelData] = {}
    phase_path = phases.phase_file(launch.logs, variant.name)
    env = {}
    timed = (time_phases or variant.budget == AUTO or plan.load is not None) and variant.spec.uses_draft
    if timed:
        phase_path.unlink(missing_ok=True)
        env[phases.PHASE_TIMING_ENV] = str(phase_path.resolve())
    if variant.budget == AUTO and table is not None and table.tree:
        env[ACCEPT_MODEL_ENV] = json.dumps({str(b): a for b, a in table.tree.items()})
    keys = [(s.name, c) for s in prompt_sets for c in levels]

    def work(server: ServerGroup, status: Status) -> None:
        for prompt_set in prompt_sets:
            for concurrency in levels:
                collected[(prompt_set.name, concurrency)] = _level(server, status, variant, prompt_set, concurrency,
                                                                   plan, launch.request_timeout_s)
        if timed:
            status.update(f"{variant.name}: writing the phase timings")
            _flush_phases(server, prompt_sets[0], launch.request_timeout_s)

    served: Served = serve(variant.name, argv, launch, ui, work, extra_env=env)
    runs = tuple(_level_run(key, collected[key], plan) for key in keys if key in collected)
    if timed:
        by_level = phases.per_level(phase_path, [collected[k].window for k in keys if k in collected])
        runs = tuple(replace(level, phases=by_level.get(level.key)) for level in runs)
    not_started = not_started_words(served, launch.startup_timeout_s) \
        if start_timeout and served.start_timed_out else None
    return (VariantRun(name=variant.name, label=variant.label, kind=variant.spec.kind, budget=variant.budget,
                       argv=served.argv, log=served.log, ready_s=served.ready_s, teardown=served.teardown,
                       failure=not_started or served.failure, log_tail=served.log_tail, levels=runs,
                       backend=attention_backend(served.argv), overlap=OVERLAP_OFF not in served.argv,
                       start_limit_s=launch.startup_timeout_s, not_started=not_started), collected)


# ---------------------------------------------------------------- comparisons


#: Per (prompt set, prompt id), the baseline's longest greedy output in that set's first level.
Reference = dict[tuple[str, str], tuple[int, ...]]


def reference_outputs(baseline_collected: dict[Key, LevelData]) -> Reference:
    """The baseline's greedy outputs at each prompt set's first level, first repeat (longest per prompt:
    under a changing load the requests of one prompt ask for different lengths)."""
    reference: Reference = {}
    first_levels: dict[str, LevelData] = {}
    for (prompt_set, _), data in baseline_collected.items():
        first_levels.setdefault(prompt_set, data)
    for prompt_set, data in first_levels.items():
        for job, gen in zip(data.jobs, data.batches[0], strict=True):
            held = reference.get((prompt_set, job.prompt.id), ())
            if len(gen.output_ids) > len(held):
                reference[(prompt_set, job.prompt.id)] = gen.output_ids
    return reference


def compare_level(level: LevelRun, data: LevelData, reference: Reference) -> LevelRun:
    """Every request's output against the baseline's for its prompt, on the length the request asked for
    (the reference's whole length where it is shorter: greedy outputs of one prompt are prefixes of each other)."""
    mismatches: list[Mismatch] = []
    compared = 0
    for repeat, batch in enumerate(data.batches):
        for job, gen in zip(data.jobs, batch, strict=True):
            full = reference.get((level.prompt_set, job.prompt.id))
            if full is None:
                continue
            compared += 1
            asked = job.max_new_tokens or len(full)
            want, got = (full[:asked], gen.output_ids) if len(full) >= asked else (full, gen.output_ids[:len(full)])
            at = first_mismatch(want, got)
            if at is not None:
                window = slice(at, at + CONTINUATION_TOKENS)
                mismatches.append(Mismatch(prompt_id=job.prompt.id, repeat=repeat, request=job.index, first_mismatch=at,
                                           reference_continuation=tuple(want[window]),
                                           continuation=tuple(got[window])))
    return replace(level, compared=compared, mismatches=tuple(mismatches))


def _speed(level: LevelRun) -> float:
    return level.aggregate_tok_s.mean if level.aggregate_tok_s else 0.0


def fastest_chains(runs: list[VariantRun], kind: str = "chain") -> dict[Key, tuple[VariantRun, LevelRun]]:
    """Per (prompt set, level), the DFLASH configuration a user would run there: the chain variant with the
    highest aggregate tok/s (whatever its backend, overlap on or off); the same for the baseline with
    ``kind="baseline"``, where it runs on several backends."""
    best: dict[Key, tuple[VariantRun, LevelRun]] = {}
    for run in runs:
        if run.kind != kind:
            continue
        for level in run.levels:
            held = best.get(level.key)
            if held is None or _speed(level) > _speed(held[1]):
                best[level.key] = (run, level)
    return best


def fastest_table(runs: list[VariantRun]) -> tuple[Fastest, ...]:
    return tuple(Fastest(prompt_set=key[0], concurrency=key[1], variant=run.name, label=run.label,
                         backend=run.backend, overlap=run.overlap, aggregate_tok_s=_speed(level))
                 for key, (run, level) in fastest_chains(runs).items())


def with_ratios(runs: list[VariantRun]) -> list[VariantRun]:
    """Aggregate tok/s over the fastest baseline's and the fastest DFLASH configuration's at the same prompt
    set and level, repeat by repeat; each level names the variants it was compared with."""
    baselines = fastest_chains(runs, kind="baseline")
    chains = fastest_chains(runs)

    def ratio(level: LevelRun, ref: LevelRun | None) -> Spread | None:
        if ref is None:
            return None
        return spread([a.aggregate_tok_s / b.aggregate_tok_s for a, b in zip(level.repeats, ref.repeats, strict=False)
                       if b.aggregate_tok_s])

    def compared(level: LevelRun) -> LevelRun:
        chain_run, chain = chains.get(level.key, (None, None))
        base_run, base = baselines.get(level.key, (None, None))
        return replace(level, vs_baseline=ratio(level, base), baseline_reference=base_run.name if base_run else None,
                       vs_dflash=ratio(level, chain), dflash_reference=chain_run.name if chain_run else None)

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
    choices: tuple[Choice, ...]
    budgets: tuple[Budget, ...]
    levels: tuple[int, ...]
    table: AcceptanceTable | None
    prompt_sets: tuple[PromptSet, ...]
    preflight: Preflight
    launch: Launch
    notes: tuple[str, ...] = ()


def _model_config(model: Path) -> dict[str, Any] | None:
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        return None  # preflight reports the missing or broken config
    return config if isinstance(config, dict) else None


def _prompt_sets(opts: BenchOptions, profile: BenchProfile, logs: Path, max_new_tokens: int) -> tuple[PromptSet, ...]:
    """Every prompt set, text prompts skipped where the servers have no tokenizer, and each checked to fit."""
    config = _model_config(opts.model)
    argv_tail = (*profile.server_args, *opts.extra_args)
    sets = []
    loaded = load_sets(opts.prompts, profile.smoke.prompts, opts.long_prompts, logs, config)
    if opts.radix_prompts:
        if any(s.name == radix_prompts.NAME for s in loaded):
            raise BadInput(f"--radix-prompts adds the prompt set {radix_prompts.NAME!r}, and --prompts names one too",
                           hint="rename that prompt file")
        vocab = (config or {}).get("vocab_size")
        loaded.append(radix_prompts.radix_set(logs, vocab if isinstance(vocab, int) else None))
    for prompt_set in loaded:
        prompts, skipped = usable_prompts(prompt_set.prompts, argv_tail)
        if not prompts:
            raise BadInput(f"prompt set {prompt_set.name} ({prompt_set.file}): no prompt can run: every prompt is "
                           "text and the server skips its tokenizer")
        sets.append(replace(prompt_set, prompts=prompts, skipped=skipped))
    check_context(sets, max_new_tokens, config, opts.model / "config.json", _int_flag(argv_tail, "--context-length"))
    return tuple(sets)


def _choices(opts: BenchOptions, profile: BenchProfile) -> tuple[tuple[Choice, ...], tuple[str, ...]]:
    choices = selected_variants(profile, opts.variants)
    notes: tuple[str, ...] = ()
    if opts.backends:
        choices, notes = across_backends(profile, choices, opts.backends)
    if any(c.backend for c in choices):
        named = [a for a in opts.extra_args if a.split("=", 1)[0] in ATTENTION_FLAGS]
        if named:
            raise BadInput(f"{named[0]} after -- would override the backend of every variant that names its own",
                           hint="pick backends with NAME-BACKEND variants or --backends, not after --")
    return choices, notes


def _preflight(opts: BenchOptions, profile: BenchProfile, launch: Launch, choices: tuple[Choice, ...],
               budgets: tuple[Budget, ...]) -> tuple[tuple[Choice, ...], Preflight, tuple[str, ...]]:
    """The preflight of every server the run will start. A variant whose attention backend's kernels do not
    load in the servers' interpreter is left out with the reason (a note), so the other backends still run;
    any other failure, or no variant left, is bad input (nothing started)."""
    notes: list[str] = []
    while True:
        variants = expand(choices, budgets)
        argvs = [server_argv(variant_launch(launch, v), v.args(), v.spec.uses_draft) for v in variants]
        preflight = run_preflight(gpus=opts.gpus, python=opts.python, ports=(opts.port,), model=opts.model,
                                  draft_model=opts.draft_model, target=opts.target, manifest=profile.manifest,
                                  server_argvs=[server_arguments(a) for a in argvs])
        failures = preflight.failures()
        if not failures:
            return choices, preflight, tuple(notes)
        dropped = {(variants[n].spec.name, variants[n].backend) for f in failures for n in f.servers}
        kept = tuple(c for c in choices if (c.spec.name, c.backend) not in dropped)
        droppable = all(f.name == "attention backends" and f.servers for f in failures)
        if not droppable or not kept or len(kept) == len(choices):
            reasons = "; ".join(f"{c.name}: {c.detail}" for c in failures)
            raise BadInput(f"preflight failed: {reasons}", hint="nothing was started")
        notes += [f"{c.name}: not run: {f.detail}" for c in choices if c not in kept for f in failures]
        choices = kept


def _prepare(opts: BenchOptions) -> Prepared:
    if opts.gpus < 0:
        raise BadInput("--gpus must be 0 (CPU stand-in) or more")
    profile = load_bench_profile(opts.set_dir)
    choices, notes = _choices(opts, profile)
    specs = tuple({c.spec.name: c.spec for c in choices}.values())
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
    logs = opts.logs or default_logs_dir("bench")
    max_new_tokens = opts.sample_tokens if opts.sampling else opts.max_new_tokens or profile.max_new_tokens
    prompt_sets = _prompt_sets(opts, profile, logs, max_new_tokens)
    if opts.sampling:
        sampling.check_options(sample_count(opts), opts.sample_tokens, specs)
    launch = Launch(python=opts.python, model=opts.model, draft_model=opts.draft_model, target=opts.target,
                    port=opts.port, gpus=opts.gpus, server_args=profile_server_args(profile, opts.radix_cache),
                    extra_args=opts.extra_args,
                    draft_model_flag=profile.smoke.draft_model_flag,
                    startup_timeout_s=opts.start_timeout or opts.timeout_s or profile.smoke.startup_timeout_s,
                    request_timeout_s=profile.smoke.request_timeout_s,
                    grace_period_s=profile.smoke.grace_period_s, logs=logs)
    choices, preflight, unloadable = _preflight(opts, profile, launch, choices, budgets)
    notes += unloadable
    return Prepared(profile=profile, choices=choices, budgets=budgets, levels=levels, table=table,
                    prompt_sets=prompt_sets, preflight=preflight, launch=launch, notes=notes)


def _set_info(prompt_set: PromptSet) -> PromptSetInfo:
    return PromptSetInfo(name=prompt_set.name, file=prompt_set.file, prompts=len(prompt_set.prompts),
                         mean_tokens=prompt_set.mean_tokens, skipped=prompt_set.skipped,
                         generated=prompt_set.generated)


def run_bench(opts: BenchOptions, ui: ServerUI | None = None) -> BenchResult:
    """The whole bench; see the module docstring for the order and the exit codes."""
    ui = ui or QuietUI()
    ready = _prepare(opts)
    launch, levels = ready.launch, ready.levels
    variants = expand(ready.choices, ready.budgets)
    first = ready.prompt_sets[0]
    for prompt_set in ready.prompt_sets:
        prompt_set.write()
    base = BenchResult(command="bench", ok=False, set_id=ready.profile.smoke.set_id, gpus=opts.gpus,
                       preflight=ready.preflight, logs=launch.logs, prompt_file=first.file,
                       prompts=len(first.prompts), skipped_prompts=first.skipped, budgets=ready.budgets,
                       prompt_sets=tuple(_set_info(s) for s in ready.prompt_sets), notes=ready.notes,
                       start_timeout_s=opts.start_timeout)
    if opts.sampling:
        check = sampling.run_sampling(variants, launch, first.prompts[0], sample_count(opts), opts.sample_tokens,
                                      opts.seed, max(levels), ui)
        return write_outputs(replace(base, ok=check.ok, mode="sampling", sampling=check,
                                     max_new_tokens=opts.sample_tokens, concurrency=(max(levels),),
                                     failures=check.failures), opts)
    plan = LevelPlan(repeats=opts.repeats or ready.profile.repeats,
                     warmup=ready.profile.warmup if opts.warmup is None else opts.warmup,
                     max_new_tokens=opts.max_new_tokens or ready.profile.max_new_tokens,
                     load=load.LoadPlan(seed=opts.seed, requests=opts.load_requests) if opts.changing_load else None)
    runs: list[VariantRun] = []
    collected: dict[str, dict[Key, LevelData]] = {}
    for variant in variants:
        run, data = bench_variant(variant, launch, ready.prompt_sets, levels, plan, ui, time_phases=opts.phases,
                                  table=ready.table, start_timeout=opts.start_timeout is not None)
        runs.append(run)
        collected[run.name] = data
    not_started = tuple(f"{r.label}: {r.not_started}" for r in runs if r.not_started)
    failures = [f"{r.label}: {r.failure}" for r in runs if r.failure and not r.not_started]
    failures += [f"{r.label}: processes {list(r.teardown.leftover_pids)} left alive"
                 for r in runs if not r.teardown.clean]
    if runs and all(r.not_started for r in runs):
        failures.append(f"no server started within --start-timeout {opts.start_timeout:g} s")
    baseline = next((r for r in runs if r.kind == "baseline" and collected[r.name]), None)
    mismatches = 0
    if opts.check_outputs and baseline is not None:
        reference = reference_outputs(collected[baseline.name])
        runs = [replace(run, levels=tuple(compare_level(level, collected[run.name][level.key], reference)
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
              level.ms_per_round.mean if level.ms_per_round else None, level.prompt_set)
             for r in runs for level in r.levels], ready.table))
    result = replace(base, ok=not failures, max_new_tokens=plan.max_new_tokens, concurrency=levels,
                     repeats=plan.repeats, warmup=plan.warmup,
                     outputs_checked=opts.check_outputs and baseline is not None,
                     variants=tuple(runs), mismatches=mismatches, expected_tree_gain=opts.expect_tree_gain,
                     tree_gain=gains, projection=projection, phases=opts.phases, failures=tuple(failures),
                     fastest_dflash=fastest_table(runs), changing_load=opts.changing_load,
                     not_started=not_started)
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
