"""Published acceptance tables (``patchkit bench --acceptance FILE``) and the speed they project.

Random-weight models at a real shape measure what a round costs but not what it accepts; a table from
a paper supplies the second. The file is TOML (or JSON with the same structure)::

    source = "Ringel & Romano, arXiv 2604.12989, Fig. 3: MATH-500, Qwen3-8B, T = 0"
    [dflash]
    accept_length = 7.79
    [ddtree.accept_length]
    16 = 8.61
    64 = 9.75

Projection, per variant and concurrency level: tok/s per request = accept length / measured ms per
round (the baseline accepts 1 token per decode step), and the speed-ups are ratios of those. What is
measured (ms per round) and what is projected (the rest) stay apart in every report.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path

from patchkit import tomlfile
from patchkit.errors import BadInput, location

#: Table name per variant kind.
TABLES = {"chain": "dflash", "tree": "ddtree"}
#: The v2 set's server reads an auto tree's acceptance model from here (JSON budget -> accept length).
ACCEPT_MODEL_ENV = "SGLANG_DDTREE_ACCEPT_MODEL"


@dataclass(frozen=True, kw_only=True)
class AcceptanceTable:
    path: Path
    source: str
    chain: float | None
    tree: dict[int, float]

    def accept_length(self, kind: str, budget: int | None) -> float | None:
        if kind == "baseline":
            return 1.0
        if kind == "chain":
            return self.chain
        if budget is None or not self.tree:
            return None
        return self.tree[budget] if budget in self.tree else tree_accept(self.tree, budget)

    def interpolated(self, budget: int) -> bool:
        return budget not in self.tree


def tree_accept(table: dict[int, float], budget: int) -> float:
    """Accept length at ``budget``: the table's, linear in log2(budget) between its points and along
    the nearest segment outside them (never below 1) -- what the v2 server's auto policy uses too."""
    points = sorted(table.items())
    if len(points) == 1:
        return points[0][1]
    keys = [b for b, _ in points]
    i = min(max(bisect.bisect_left(keys, budget), 1), len(points) - 1)
    (b0, a0), (b1, a1) = points[i - 1], points[i]
    t = (math.log2(budget) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
    return max(1.0, a0 + t * (a1 - a0))


def _positive(value: object, what: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1:
        raise BadInput(f"{what} must be a number >= 1 (tokens per round, bonus included), got {value!r}",
                       location=location(path))
    return float(value)


def load_acceptance(path: Path) -> AcceptanceTable:
    """Read and check an acceptance table; errors name the file (and the key)."""
    if not path.is_file():
        raise BadInput(f"acceptance table not found: {path}", hint="pass --acceptance FILE (.toml or .json)")
    if path.suffix == ".json":
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise BadInput(f"not JSON: {error.msg}", location=location(path, error.lineno)) from error
    else:
        doc = tomlfile.load(path, f"acceptance table not found: {path}")
    if not isinstance(doc, dict) or not isinstance(doc.get("source"), str) or not doc["source"].strip():
        raise BadInput('the table needs a "source" (where the numbers come from)', location=location(path))
    chain = doc.get("dflash", {}).get("accept_length") if isinstance(doc.get("dflash"), dict) else None
    tree_raw = doc.get("ddtree", {}).get("accept_length", {}) if isinstance(doc.get("ddtree"), dict) else {}
    if not isinstance(tree_raw, dict):
        raise BadInput("[ddtree.accept_length] must map budgets to accept lengths", location=location(path))
    tree = {}
    for key, value in tree_raw.items():
        if not str(key).isdigit() or int(key) < 1:
            raise BadInput(f"[ddtree.accept_length] key {key!r} is not a budget", location=location(path))
        tree[int(key)] = _positive(value, f"[ddtree.accept_length] {key}", path)
    if chain is None and not tree:
        raise BadInput("the table has neither [dflash] accept_length nor [ddtree.accept_length]",
                       location=location(path))
    return AcceptanceTable(path=path, source=doc["source"].strip(),
                           chain=_positive(chain, "[dflash] accept_length", path) if chain is not None else None,
                           tree=dict(sorted(tree.items())))


@dataclass(frozen=True, kw_only=True)
class Projected:
    """One variant at one level: the measured round cost beside the projected speed."""

    variant: str
    concurrency: int
    measured_ms_per_round: float | None
    accept_length: float | None  # from the table
    projected_tok_s: float | None  # per request
    vs_dflash: float | None  # over the fastest DFLASH variant at this level (dflash_reference)
    vs_baseline: float | None
    note: str = ""
    dflash_reference: str | None = None
    prompt_set: str = ""


#: (variant name, kind, budget, concurrency, measured ms per round, prompt set); an auto tree's budget
#: is its rounds per budget, and its accept length the rounds' mean of the table's.
MeasuredRow = tuple[str, str, int | dict[int, int] | None, int, float | None, str]


def _row_accept(table: AcceptanceTable, kind: str, budget: int | dict[int, int] | None) -> tuple[float | None, str]:
    if isinstance(budget, dict):
        rounds = sum(budget.values())
        if not rounds:
            return None, "no rounds timed"
        mean = sum(n * (table.accept_length(kind, b) or 0.0) for b, n in budget.items()) / rounds
        shares = ", ".join(f"B={b}: {100 * n / rounds:.0f}%" for b, n in sorted(budget.items()))
        return mean, f"auto chose {shares}"
    accept = table.accept_length(kind, budget)
    if accept is None:
        which = TABLES.get(kind, kind) + (f" B={budget}" if budget else "")
        return None, f"no accept length for {which} in the table"
    if kind == "tree" and isinstance(budget, int) and table.interpolated(budget):
        return accept, f"B={budget} interpolated in log2(B) from the table"
    return accept, ""


def project(rows: list[MeasuredRow], table: AcceptanceTable) -> tuple[Projected, ...]:
    """Projected speed per measured row; the speed-ups compare rows of the same prompt set and concurrency."""
    Level = tuple[str, int]  # (prompt set, concurrency)
    speed: dict[tuple[str, Level], float] = {}
    kinds: dict[str, str] = {}
    prepared = []
    for name, kind, budget, concurrency, ms, prompt_set in rows:
        kinds[name] = kind
        accept, note = _row_accept(table, kind, budget)
        tok_s = accept / ms * 1000 if accept is not None and ms else None
        if tok_s is not None:
            speed[(name, (prompt_set, concurrency))] = tok_s
        prepared.append((name, (prompt_set, concurrency), ms, accept, tok_s, note))
    baseline = next((n for n, k in kinds.items() if k == "baseline"), None)
    # The DFLASH a user runs is the fastest of its configurations at that level (backend, overlap on or off).
    chains: dict[Level, str] = {}
    for (name, level), tok_s in speed.items():
        held = chains.get(level)
        if kinds[name] == "chain" and (held is None or tok_s > speed[(held, level)]):
            chains[level] = name

    def ratio(tok_s: float | None, reference: str | None, level: Level) -> float | None:
        base = speed.get((reference, level)) if reference else None
        return tok_s / base if tok_s is not None and base else None

    return tuple(Projected(variant=name, concurrency=level[1], measured_ms_per_round=ms, accept_length=accept,
                           projected_tok_s=tok_s, vs_dflash=ratio(tok_s, chains.get(level), level),
                           vs_baseline=ratio(tok_s, baseline, level), note=note, dflash_reference=chains.get(level),
                           prompt_set=level[0])
                 for name, level, ms, accept, tok_s, note in prepared)
