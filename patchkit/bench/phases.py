"""``patchkit bench --phases``: where a speculative round's time goes, per variant and level.

The v2 set's servers write one JSON line per decode round when ``SGLANG_SPEC_PHASE_TIMING`` names a
file (``speculative/spec_phase_timing.py`` in the patched tree): the batch size, the device time of
each phase measured with CUDA events on the forward stream (``gpu``: draft, tree, verify, commit,
the gap since the previous round, the whole round), the host's time issuing each (``host``), whether
the draft and the verify replayed a CUDA graph, and the verify width and tree budget of the round.
The bench gives every server its own file and keeps, per level, the rounds that started inside the
level's measured repeats (warm-up excluded), by the round's wall-clock start.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from patchkit.errors import BadInput, location

PHASE_TIMING_ENV = "SGLANG_SPEC_PHASE_TIMING"
#: The server writes what it has read back at the first round after a pause of 0.5 s; the bench waits a
#: little longer, then sends a request of a few tokens so the last level's rounds reach the file.
IDLE_FLUSH_S = 0.8
PROBE_TOKENS = 4
#: Phases of a round in the order they run, then the gap before it and the whole round.
PHASES = ("draft", "tree", "verify", "commit")
COLUMNS = (*PHASES, "gap", "round")


@dataclass(frozen=True, kw_only=True)
class PhaseStats:
    """Mean milliseconds per round of one variant at one level, device and host."""

    rounds: int
    mean_bs: float
    gpu_ms: dict[str, float]
    host_ms: dict[str, float]
    draft_graph_share: float  # rounds whose draft replayed a CUDA graph / rounds
    verify_graph_share: float
    widths: dict[int, int]  # verify width -> rounds
    budgets: dict[int, int]  # tree budget -> rounds (DDTREE only)
    dropped_lines: int = 0  # lines that were not a round record
    round_p50_ms: float = 0.0  # device round, median over the rounds
    round_p99_ms: float = 0.0  # device round, 99th percentile (nearest rank)
    batch_sizes: dict[int, int] = field(default_factory=dict)  # batch size the server ran -> rounds
    gpu_p50_ms: dict[str, float] = field(default_factory=dict)  # per phase (COLUMNS), median over the rounds
    gpu_p99_ms: dict[str, float] = field(default_factory=dict)  # per phase, 99th percentile (nearest rank)


@dataclass(frozen=True, kw_only=True)
class Window:
    """The wall-clock span of one level's measured repeats (``time.time()``)."""

    concurrency: int
    start: float
    end: float
    prompt_set: str = ""  # the level's prompt set, when a server measures several

    @property
    def key(self) -> tuple[str, int]:
        return self.prompt_set, self.concurrency


def phase_file(logs: Path, variant: str) -> Path:
    return logs / f"{variant}-phases.jsonl"


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The round records of ``path`` and how many lines were not one (a torn last line, say)."""
    if not path.is_file():
        return [], 0
    records, bad = [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if not _is_round(record):
            raise BadInput("not a round record of SGLANG_SPEC_PHASE_TIMING (needs t, bs, gpu, host)",
                           location=location(path, number))
        records.append(record)
    return records, bad


def _is_round(record: object) -> bool:
    return (isinstance(record, dict) and isinstance(record.get("t"), (int, float))
            and isinstance(record.get("bs"), int) and isinstance(record.get("gpu"), dict)
            and isinstance(record.get("host"), dict))


def in_window(records: Iterable[dict[str, Any]], window: Window) -> list[dict[str, Any]]:
    return [r for r in records if window.start <= r["t"] < window.end]


def summarize(records: Sequence[dict[str, Any]], dropped: int = 0) -> PhaseStats | None:
    """Means over the rounds; None when there is none (the baseline has no rounds to time)."""
    if not records:
        return None

    def means(side: str) -> dict[str, float]:
        return {c: mean(float(r[side].get(c, 0.0)) for r in records) for c in COLUMNS}

    def quantiles(q: float) -> dict[str, float]:
        return {c: quantile([float(r["gpu"].get(c, 0.0)) for r in records], q) for c in COLUMNS}

    return PhaseStats(
        rounds=len(records), mean_bs=mean(r["bs"] for r in records),
        gpu_ms=means("gpu"), host_ms=means("host"),
        draft_graph_share=sum(bool(r.get("draft_graph")) for r in records) / len(records),
        verify_graph_share=sum(bool(r.get("verify_graph")) for r in records) / len(records),
        widths=_counts(r.get("width") for r in records),
        budgets=_counts(r.get("budget") for r in records),
        dropped_lines=dropped,
        round_p50_ms=quantile([float(r["gpu"].get("round", 0.0)) for r in records], 0.50),
        round_p99_ms=quantile([float(r["gpu"].get("round", 0.0)) for r in records], 0.99),
        batch_sizes=_counts(r.get("bs") for r in records), gpu_p50_ms=quantiles(0.50), gpu_p99_ms=quantiles(0.99),
    )


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (the smallest value with at least ``q`` of them at or below)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _counts(values: Iterable[object]) -> dict[int, int]:
    counted = Counter(v for v in values if isinstance(v, int))
    return dict(sorted(counted.items()))


def per_level(path: Path, windows: Sequence[Window]) -> dict[tuple[str, int], PhaseStats | None]:
    """Each level's phase means from one server's file, by (prompt set, concurrency)."""
    records, dropped = read_records(path)
    return {w.key: summarize(in_window(records, w), dropped) for w in windows}
