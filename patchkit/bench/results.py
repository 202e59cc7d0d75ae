"""The typed results of ``patchkit bench`` (its ``--json`` keys are these fields; tests pin them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

from patchkit.bench import measure
from patchkit.bench.acceptance import Projected
from patchkit.bench.load import LoadStats
from patchkit.bench.phases import PhaseStats
from patchkit.bench.sampling import SamplingCheck
from patchkit.results import CommandResult
from patchkit.smoke.preflight import Preflight
from patchkit.smoke.server import Teardown

#: Bumped when a key of the bench's JSON result changes meaning or goes away (tests pin the keys).
BENCH_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class Spread:
    """Mean, lowest and highest over the repeats."""

    mean: float
    min: float
    max: float


def spread(values: list[float | None]) -> Spread | None:
    kept = [v for v in values if v is not None]
    return Spread(mean=mean(kept), min=min(kept), max=max(kept)) if kept else None


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    prompt_id: str
    repeat: int  # 0-based; -1 is the warm-up
    request: int
    first_mismatch: int
    reference_continuation: tuple[int, ...]
    continuation: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class LevelRun:
    concurrency: int
    requests: int
    repeats: tuple[measure.RepeatStats, ...]
    per_request_tok_s: Spread | None
    aggregate_tok_s: Spread | None
    ttft_ms: Spread | None
    ms_per_round: Spread | None
    accept_length: float | None
    histogram: measure.Histogram | None
    compared: int = 0
    mismatches: tuple[Mismatch, ...] = ()
    vs_baseline: Spread | None = None  # aggregate tok/s over the (fastest) baseline's, repeat by repeat
    vs_dflash: Spread | None = None  # over the faster DFLASH variant at this level (dflash_reference)
    dflash_reference: str | None = None  # that variant's name
    phases: PhaseStats | None = None  # --phases: mean ms per round by phase
    prompt_set: str = ""  # the prompt set of this level (a server measures every set at every level)
    load: LoadStats | None = None  # --changing-load: in flight, rounds p50/p99 (server batch sizes: phases)
    baseline_reference: str | None = None  # the baseline vs_baseline is over (the fastest, on several backends)

    @property
    def key(self) -> tuple[str, int]:
        return self.prompt_set, self.concurrency


@dataclass(frozen=True, kw_only=True)
class VariantRun:
    name: str  # e.g. "baseline", "dflash", "ddtree-b64"
    label: str  # e.g. "DDTREE B=64"
    kind: str
    budget: int | str | None  # nodes, or "auto"
    argv: tuple[str, ...]
    log: Path
    ready_s: float | None
    teardown: Teardown
    failure: str | None = None
    log_tail: str = ""
    levels: tuple[LevelRun, ...] = ()
    backend: str = ""  # the attention backend its command line asks for ("default": none, SGLang picks)
    overlap: bool = True  # the overlap scheduler is on (no --disable-overlap-schedule)
    start_limit_s: float | None = None  # how long its start was allowed to take
    not_started: str | None = None  # --start-timeout passed first: "did not start within S s; last log line: ..."

    @property
    def ok(self) -> bool:
        return self.failure is None and self.teardown.clean

    def accept_length(self) -> float | None:
        rounds = sum(r.verify_rounds or 0 for level in self.levels for r in level.repeats)
        tokens = sum(r.output_tokens for level in self.levels for r in level.repeats if r.verify_rounds)
        return tokens / rounds if rounds else None


@dataclass(frozen=True, kw_only=True)
class TreeGain:
    variant: str
    budget: int | str
    accept_length: float
    dflash_accept_length: float
    gain: float
    ok: bool


@dataclass(frozen=True, kw_only=True)
class Fastest:
    """The DFLASH configuration a user would run at one (prompt set, level): the chain variant with the
    highest aggregate tok/s there; every ratio of that level is taken against it."""

    prompt_set: str
    concurrency: int
    variant: str
    label: str
    backend: str
    overlap: bool
    aggregate_tok_s: float


@dataclass(frozen=True, kw_only=True)
class PromptSetInfo:
    name: str
    file: Path
    prompts: int
    mean_tokens: float | None  # token-id prompts' mean length
    skipped: tuple[str, ...] = ()
    generated: bool = False


@dataclass(frozen=True, kw_only=True)
class Projection:
    table: Path
    source: str
    rows: tuple[Projected, ...]


@dataclass(frozen=True, kw_only=True)
class BenchResult(CommandResult):
    schema: int = BENCH_SCHEMA
    mode: str = "speed"  # or "sampling"
    set_id: str = ""
    gpus: int = 0
    preflight: Preflight | None = None
    logs: Path | None = None
    prompt_file: Path | None = None
    prompts: int = 0
    skipped_prompts: tuple[str, ...] = ()
    max_new_tokens: int = 0
    budgets: tuple[int | str, ...] = ()
    concurrency: tuple[int, ...] = ()
    repeats: int = 0
    warmup: int = 0
    outputs_checked: bool = True
    variants: tuple[VariantRun, ...] = ()
    mismatches: int = 0
    expected_tree_gain: float | None = None
    tree_gain: tuple[TreeGain, ...] = ()
    projection: Projection | None = None
    sampling: SamplingCheck | None = None
    phases: bool = False  # --phases: the servers timed each round by phase
    report: Path | None = None
    plot: Path | None = None
    plot_note: str | None = None
    failures: tuple[str, ...] = field(default_factory=tuple)
    prompt_sets: tuple[PromptSetInfo, ...] = ()  # every set each server measured (the first is prompt_file)
    fastest_dflash: tuple[Fastest, ...] = ()  # per (prompt set, level)
    changing_load: bool = False  # --changing-load: levels are changing-load runs (LevelRun.load)
    start_timeout_s: float | None = None  # --start-timeout
    not_started: tuple[str, ...] = ()  # variants that did not start within --start-timeout (not failures)
    notes: tuple[str, ...] = ()  # what was left out and why (a variant on a backend it does not run on)
