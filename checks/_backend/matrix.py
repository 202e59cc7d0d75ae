"""The backend gate's generated cases: a t-way covering array over the declared axes, and the rules
that say what each generated case must do.

``[matrix]`` in the expectations file::

    [matrix]
    strength = 2                        # every combination of any 2 axes' values appears in a case
    mla_targets = ["deepseek_mla"]      # targets whose "flashinfer" is FlashInfer-MLA
    allowed = { mha = ["flashinfer", "triton"], mla = ["triton"] }   # what DDTREE may verify on

    [matrix.axes]
    hardware = ["hopper", "blackwell_sm100", "blackwell_sm120", "ampere"]
    target = ["llama", "deepseek_mla"]
    flashinfer = [true, false]
    backend = ["", "attention_backend=triton", "prefill_attention_backend=fa3", ...]   # "" = none given
    speculative_eagle_topk = ["", 1, 8]                   # "" = not given
    enable_deterministic_inference = [false, true]
    page_size = ["", 1, 64]

``hardware``, ``target`` and ``flashinfer`` pick the case's simulated GPU, model and FlashInfer;
``backend`` values are ``field=value`` (which flag gets the explicit backend); every other axis is a
ServerArgs keyword. The oracle for a generated case:

- a case matching a ``[[matrix.exception]]`` (``when`` = axis values, ``error``, ``reason``) must be
  refused with that error: a known refusal of the base that DDTREE inherits, written down;
- an explicit backend outside ``allowed`` (for the target's kind) must be refused, naming its flag
  (a refusal by the base itself, whose message does not name the algorithm, may name the backend
  instead);
- a page size above 1 must be refused, naming ``--page-size`` (``refuse_page_above``, default 1);
- anything else must resolve, keep every explicit backend, and (as every case) verify on backends
  that honour the tree mask.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any

CASE_KEYS = ("hardware", "target", "flashinfer")


@dataclass(frozen=True)
class Coverage:
    """What the generated cases cover: all ``strength``-way combinations of the axes' values."""

    strength: int
    axes: dict[str, int]  # axis -> number of values
    combinations: int  # distinct t-way value combinations, all covered
    cases: int

    def describe(self) -> str:
        axes = " x ".join(f"{name} ({n})" for name, n in self.axes.items())
        full = 1
        for n in self.axes.values():
            full *= n
        return (f"generated {self.cases} cases covering all {self.combinations} {self.strength}-way combinations "
                f"of {axes} (the full product is {full})")


def _tuples(axes: dict[str, list[Any]], strength: int) -> set[tuple[tuple[str, int], ...]]:
    names = list(axes)
    out: set[tuple[tuple[str, int], ...]] = set()
    for chosen in itertools.combinations(names, min(strength, len(names))):
        for values in itertools.product(*(range(len(axes[a])) for a in chosen)):
            out.add(tuple(zip(chosen, values, strict=True)))
    return out


def covering_array(axes: dict[str, list[Any]], strength: int, seed: int = 0,
                   candidates: int = 60) -> list[dict[str, Any]]:
    """A small set of assignments covering every ``strength``-way combination (greedy, deterministic)."""
    names = list(axes)
    if not names:
        return []
    uncovered = _tuples(axes, strength)
    rng = random.Random(seed)
    rows: list[dict[str, int]] = []
    while uncovered:
        # Seed each candidate with one uncovered combination, fill the rest at random, keep the best.
        target = min(uncovered)
        best, best_gain = None, -1
        for _ in range(candidates):
            row = {a: rng.randrange(len(axes[a])) for a in names}
            row.update(dict(target))
            gain = sum(1 for combo in _row_tuples(row, strength) if combo in uncovered)
            if gain > best_gain:
                best, best_gain = row, gain
        assert best is not None
        rows.append(best)
        uncovered -= set(_row_tuples(best, strength))
    return [{a: axes[a][i] for a, i in row.items()} for row in rows]


def _row_tuples(row: dict[str, int], strength: int) -> list[tuple[tuple[str, int], ...]]:
    return [tuple((a, row[a]) for a in chosen) for chosen in itertools.combinations(list(row), min(strength, len(row)))]


def coverage(axes: dict[str, list[Any]], strength: int, cases: int) -> Coverage:
    return Coverage(strength, {a: len(v) for a, v in axes.items()}, len(_tuples(axes, strength)), cases)


def generated_cases(matrix: dict[str, Any]) -> tuple[list[dict[str, Any]], Coverage | None]:
    """Raw ``[[case]]``-style tables for the covering array, each with the oracle's expectation."""
    axes = {name: list(values) for name, values in matrix.get("axes", {}).items()}
    if not axes:
        return [], None
    strength = int(matrix.get("strength", 2))
    mla_targets = set(matrix.get("mla_targets", []))
    allowed = matrix.get("allowed", {})
    page_limit = int(matrix.get("refuse_page_above", 1))
    out = []
    rows = covering_array(axes, strength, int(matrix.get("seed", 0)))
    for n, row in enumerate(rows):
        case: dict[str, Any] = {"name": f"matrix-{n + 1:03d}", "args": {}, "generated": row}
        for key, value in row.items():
            if key in CASE_KEYS:
                case[key] = value
            elif key == "backend":
                if value:
                    field, _, backend = str(value).partition("=")
                    case["args"][field] = backend
            elif value != "":
                case["args"][key] = value
        kind = "mla" if case.get("target") in mla_targets else "mha"
        explicit = {f: b for f, b in case["args"].items() if f.endswith("attention_backend")}
        refused = [f for f, b in explicit.items() if b not in allowed.get(kind, [])]
        page = case["args"].get("page_size")
        exception = next((e for e in matrix.get("exception", []) if _matches(e.get("when", {}), row)), None)
        if exception is not None:
            case["exception"] = {"error": exception["error"], "reason": exception["reason"]}
        elif refused:
            case["expect_error_flag"] = "--" + refused[0].replace("_", "-")
            case["offending"] = explicit[refused[0]]
        elif page is not None and int(page) > page_limit:
            case["expect_error_flag"] = "--page-size"
            case["offending"] = "page_size"
        else:
            case["expect_resolves"] = True
            case["expect"] = {f: b for f, b in explicit.items()}
        out.append(case)
    return out, coverage(axes, strength, len(rows))


def _matches(when: dict[str, Any], row: dict[str, Any]) -> bool:
    """An exception's ``when``: every listed axis has that value (or one of a list of values)."""
    return all(row.get(axis) in (value if isinstance(value, list) else [value]) for axis, value in when.items())


def describe_row(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in row.items() if v not in ("", None))
