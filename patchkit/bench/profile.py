"""The set's ``[bench]`` table: which server variants exist and with which flags, and the defaults.

::

    [bench]
    budgets = [16, 64, 256]           # DDTREE budgets (--budgets)
    concurrency = [1, 8, 32]          # concurrent requests per level (--concurrency)
    repeats = 3                       # measured runs per level (--repeats)
    warmup = 1                        # unmeasured batches per level before them (--warmup)
    max_new_tokens = 64               # default: [smoke] max_new_tokens
    max_budget = 1024                 # budgets above are refused before anything starts
    max_concurrency = 48              # levels above are refused (SGLang's speculative default)
    server_args = [...]               # default: [smoke] server_args (every variant gets the same)

    [[bench.variants]]
    name = "baseline"                 # --variants picks by name
    kind = "baseline"                 # baseline | chain (DFLASH) | tree (DDTREE)
    args = []

    [[bench.variants]]
    name = "ddtree"
    kind = "tree"
    args = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "{budget}"]

A ``tree`` variant's ``args`` name ``{budget}``; it runs once per budget. ``chain`` and ``tree`` variants
get the draft model (``[smoke] draft_model_flag``). Without a ``[bench]`` table the variants are
``baseline`` (``[smoke] baseline_args``) and ``ddtree`` (``[smoke] profile_args`` with the budget value
replaced), so an older set still benches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit import tomlfile
from patchkit.errors import BadInput, location
from patchkit.smoke.setinfo import MANIFEST_NAME, SmokeProfile, load_smoke_profile

KINDS = ("baseline", "chain", "tree")
BUDGET_PLACEHOLDER = "{budget}"
KIND_LABELS = {"baseline": "baseline", "chain": "DFLASH", "tree": "DDTREE"}


@dataclass(frozen=True, kw_only=True)
class VariantSpec:
    """One ``[[bench.variants]]`` entry."""

    name: str
    kind: str
    args: tuple[str, ...]

    @property
    def uses_draft(self) -> bool:
        return self.kind != "baseline"

    @property
    def per_budget(self) -> bool:
        return self.kind == "tree"


@dataclass(frozen=True, kw_only=True)
class BenchProfile:
    smoke: SmokeProfile
    variants: tuple[VariantSpec, ...]
    budgets: tuple[int, ...] = (16, 64, 256)
    concurrency: tuple[int, ...] = (1, 8, 32)
    repeats: int = 3
    warmup: int = 1
    max_new_tokens: int = 64
    max_budget: int = 1024
    max_concurrency: int = 48
    server_args: tuple[str, ...] = ()

    def variant(self, name: str) -> VariantSpec | None:
        return next((v for v in self.variants if v.name == name), None)


def _ints(table: dict[str, Any], key: str, path: Path, default: tuple[int, ...]) -> tuple[int, ...]:
    value = table.get(key, list(default))
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and not isinstance(v, bool)
                                                            and v > 0 for v in value):
        raise BadInput(f"[bench] {key} must be a non-empty list of positive integers", location=location(path))
    return tuple(value)


def _int(table: dict[str, Any], key: str, path: Path, default: int, minimum: int = 1) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadInput(f"[bench] {key} must be an integer >= {minimum}", location=location(path))
    return value


def _strings(table: dict[str, Any], key: str, path: Path, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadInput(f"{where} {key} must be a list of strings", location=location(path))
    return tuple(value)


def _variant(entry: Any, path: Path, index: int) -> VariantSpec:
    where = f"[[bench.variants]] #{index + 1}"
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise BadInput(f"{where} needs a name", location=location(path))
    kind = entry.get("kind")
    if kind not in KINDS:
        raise BadInput(f"{where} ({entry['name']}): kind must be one of {', '.join(KINDS)}", location=location(path))
    args = _strings(entry, "args", path, where)
    if (kind == "tree") != any(BUDGET_PLACEHOLDER in a for a in args):
        raise BadInput(f"{where} ({entry['name']}): a tree variant's args, and only those, name {BUDGET_PLACEHOLDER}",
                       location=location(path))
    return VariantSpec(name=entry["name"], kind=kind, args=args)


def _fallback_variants(smoke: SmokeProfile) -> tuple[VariantSpec, ...]:
    """An older set without ``[bench]``: the smoke's baseline and DDTREE, with the budget made a parameter."""
    args = list(smoke.profile_args)
    if "--speculative-ddtree-budget" in args[:-1]:
        args[args.index("--speculative-ddtree-budget") + 1] = BUDGET_PLACEHOLDER
        ddtree = VariantSpec(name="ddtree", kind="tree", args=tuple(args))
    else:
        ddtree = VariantSpec(name="ddtree", kind="chain", args=tuple(args))
    return (VariantSpec(name="baseline", kind="baseline", args=smoke.baseline_args), ddtree)


def load_bench_profile(set_dir: Path) -> BenchProfile:
    """The set's identity and ``[smoke]`` table, and its ``[bench]`` table (every key optional)."""
    smoke = load_smoke_profile(set_dir)
    path = set_dir / MANIFEST_NAME
    doc = tomlfile.load(path, f"no {MANIFEST_NAME} in {set_dir}")
    table = doc.get("bench", {})
    if not isinstance(table, dict):
        raise BadInput("[bench] must be a table", location=location(path))
    entries = table.get("variants")
    if entries is None:
        variants = _fallback_variants(smoke)
    elif not isinstance(entries, list) or not entries:
        raise BadInput("[[bench.variants]] must be a non-empty array of tables", location=location(path))
    else:
        variants = tuple(_variant(entry, path, i) for i, entry in enumerate(entries))
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise BadInput(f"[[bench.variants]] names must be unique: {names}", location=location(path))
    server_args = _strings(table, "server_args", path, "[bench]") if "server_args" in table else smoke.server_args
    return BenchProfile(
        smoke=smoke, variants=variants, budgets=_ints(table, "budgets", path, (16, 64, 256)),
        concurrency=_ints(table, "concurrency", path, (1, 8, 32)), repeats=_int(table, "repeats", path, 3),
        warmup=_int(table, "warmup", path, 1, minimum=0),
        max_new_tokens=_int(table, "max_new_tokens", path, smoke.max_new_tokens),
        max_budget=_int(table, "max_budget", path, 1024), max_concurrency=_int(table, "max_concurrency", path, 48),
        server_args=server_args,
    )
