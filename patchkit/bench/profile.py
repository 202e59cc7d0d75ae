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

    [bench.backends]                  # optional: the attention backends each kind runs on (--backends,
    tree = ["fa3", "triton"]          # VARIANT-BACKEND names); the default is BACKEND_SUPPORT below

A ``tree`` variant's ``args`` name ``{budget}``; it runs once per budget. ``chain`` and ``tree`` variants
get the draft model (``[smoke] draft_model_flag``). A variant runs on another attention backend as
``NAME-BACKEND`` (``dflash-fa3``, ``ddtree-triton``): the shared server arguments lose their
``--attention-backend`` (and the prefill/decode ones) and the variant gets ``--attention-backend BACKEND``;
``NAME-default`` gives none, so SGLang picks. A plain ``NAME`` keeps the shared arguments' backend.
Without a ``[bench]`` table the variants are
``baseline`` (``[smoke] baseline_args``) and ``ddtree`` (``[smoke] profile_args`` with the budget value
replaced), so an older set still benches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchkit import manifest as manifest_mod
from patchkit.errors import BadInput, Location
from patchkit.manifest import MANIFEST_NAME, Manifest, SmokeProfile, line_of, read_text

KINDS = ("baseline", "chain", "tree")
#: ``--speculative-ddtree-budget auto``: the server picks the budget of every round for its batch.
AUTO = "auto"
#: A tree variant's budget: a number of nodes, or AUTO.
Budget = int | str
BUDGET_PLACEHOLDER = "{budget}"
KIND_LABELS = {"baseline": "baseline", "chain": "DFLASH", "tree": "DDTREE"}
ATTENTION_FLAG = "--attention-backend"
#: Every flag that picks an attention backend: a backend variant drops them all from the shared arguments.
ATTENTION_FLAGS = (ATTENTION_FLAG, "--prefill-attention-backend", "--decode-attention-backend")
#: ``NAME-default``: no attention flag at all, so SGLang picks (fa3 on Hopper; the v2 set picks triton for DDTREE).
DEFAULT_BACKEND = "default"
#: The attention backends each kind of variant runs on, unless the set's ``[bench.backends]`` says otherwise.
#: DDTREE's verify needs a backend that applies its tree mask (triton; fa3 from the v2 set's fa3 tree verify).
BACKEND_SUPPORT: dict[str, tuple[str, ...]] = {
    "baseline": ("fa3", "flashinfer", "triton"),
    "chain": ("fa3", "flashinfer", "triton"),
    "tree": ("fa3", "triton"),
}


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
    manifest: Manifest
    variants: tuple[VariantSpec, ...]
    budgets: tuple[int, ...] = (16, 64, 256)
    concurrency: tuple[int, ...] = (1, 8, 32)
    repeats: int = 3
    warmup: int = 1
    max_new_tokens: int = 64
    max_budget: int = 1024
    max_concurrency: int = 48
    server_args: tuple[str, ...] = ()
    backends: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(BACKEND_SUPPORT))

    @property
    def smoke(self) -> SmokeProfile:
        return self.manifest.smoke

    def variant(self, name: str) -> VariantSpec | None:
        return next((v for v in self.variants if v.name == name), None)

    def runs_on(self, spec: VariantSpec, backend: str) -> bool:
        return backend == DEFAULT_BACKEND or backend in self.backends.get(spec.kind, ())

    @property
    def known_backends(self) -> tuple[str, ...]:
        """Every backend a ``NAME-BACKEND`` variant may name: the table's, and ``default``."""
        names = {b for kinds in self.backends.values() for b in kinds}
        return (*sorted(names), DEFAULT_BACKEND)


class _Table:
    """The ``[bench]`` table with errors that name the manifest's file and line."""

    def __init__(self, path: Path, text: str, data: dict[str, Any]):
        self.path, self.text, self.data = path, text, data

    def error(self, message: str, key: str | None = None, table: str = "bench") -> BadInput:
        return BadInput(message, location=Location(str(self.path), line_of(self.text, table, key)),
                        hint=f"fix {MANIFEST_NAME} (see README: bench)")

    def ints(self, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
        value = self.data.get(key, list(default))
        if not isinstance(value, list) or not value or not all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            raise self.error(f"[bench] {key} must be a non-empty list of positive integers", key)
        return tuple(value)

    def integer(self, key: str, default: int, minimum: int = 1) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"[bench] {key} must be an integer >= {minimum}", key)
        return value

    def strings(self, entry: dict[str, Any], key: str, where: str, table: str = "bench") -> tuple[str, ...]:
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(f"{where} {key} must be a list of strings", key, table)
        return tuple(value)

    def variant(self, entry: Any, index: int) -> VariantSpec:
        where = f"[[bench.variants]] #{index + 1}"
        table = "bench.variants"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise self.error(f"{where} needs a name", None, table)
        kind = entry.get("kind")
        if kind not in KINDS:
            raise self.error(f"{where} ({entry['name']}): kind must be one of {', '.join(KINDS)}", None, table)
        args = self.strings(entry, "args", where, table)
        if (kind == "tree") != any(BUDGET_PLACEHOLDER in a for a in args):
            raise self.error(f"{where} ({entry['name']}): a tree variant's args, and only those, name "
                             f"{BUDGET_PLACEHOLDER}", None, table)
        return VariantSpec(name=entry["name"], kind=kind, args=args)

    def backends(self) -> dict[str, tuple[str, ...]]:
        """``[bench.backends]``: per kind, the attention backends it runs on (kinds not named keep the default)."""
        raw = self.data.get("backends", {})
        if not isinstance(raw, dict):
            raise self.error("[bench.backends] must be a table: kind = [backend, ...]", "backends")
        table = dict(BACKEND_SUPPORT)
        for kind, names in raw.items():
            if kind not in KINDS:
                raise self.error(f"[bench.backends] {kind}: kind must be one of {', '.join(KINDS)}", kind,
                                 "bench.backends")
            if (not isinstance(names, list) or not all(isinstance(n, str) and n and "-" not in n for n in names)
                    or DEFAULT_BACKEND in names):
                raise self.error(f"[bench.backends] {kind} must be a list of backend names (no '-', not "
                                 f"{DEFAULT_BACKEND!r})", kind, "bench.backends")
            table[kind] = tuple(names)
        return table


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
    """The set's manifest (one reader for every command) and its ``[bench]`` table (every key optional)."""
    manifest = manifest_mod.load(set_dir, with_lock=False)
    raw = manifest.raw.get("bench", {})
    table = _Table(manifest.path, read_text(manifest.path), raw if isinstance(raw, dict) else {})
    if not isinstance(raw, dict):
        raise table.error("[bench] must be a table")
    entries = raw.get("variants")
    if entries is None:
        variants = _fallback_variants(manifest.smoke)
    elif not isinstance(entries, list) or not entries:
        raise table.error("[[bench.variants]] must be a non-empty array of tables", "variants")
    else:
        variants = tuple(table.variant(entry, i) for i, entry in enumerate(entries))
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise table.error(f"[[bench.variants]] names must be unique: {names}", None, "bench.variants")
    server_args = table.strings(raw, "server_args", "[bench]") if "server_args" in raw else manifest.smoke.server_args
    return BenchProfile(
        manifest=manifest, variants=variants, budgets=table.ints("budgets", (16, 64, 256)),
        concurrency=table.ints("concurrency", (1, 8, 32)), repeats=table.integer("repeats", 3),
        warmup=table.integer("warmup", 1, minimum=0),
        max_new_tokens=table.integer("max_new_tokens", manifest.smoke.max_new_tokens),
        max_budget=table.integer("max_budget", 1024), max_concurrency=table.integer("max_concurrency", 48),
        server_args=server_args, backends=table.backends(),
    )


# ---------------------------------------------------------------- variants (a spec at one budget)


@dataclass(frozen=True, kw_only=True)
class Choice:
    """A selected variant: a profile entry, on the shared arguments' backend (None) or on another one."""

    spec: VariantSpec
    backend: str | None = None

    @property
    def name(self) -> str:
        return f"{self.spec.name}-{self.backend}" if self.backend else self.spec.name


@dataclass(frozen=True, kw_only=True)
class Variant:
    spec: VariantSpec
    budget: Budget | None
    backend: str | None = None  # None: the shared arguments' backend; DEFAULT_BACKEND: SGLang's pick

    @property
    def name(self) -> str:
        base = f"{self.spec.name}-{self.backend}" if self.backend else self.spec.name
        if self.budget is None:
            return base
        return f"{base}-{AUTO}" if self.budget == AUTO else f"{base}-b{self.budget}"

    @property
    def label(self) -> str:
        base = KIND_LABELS[self.spec.kind] if self.spec.name in ("baseline", "dflash", "ddtree") else self.spec.name
        if self.backend:
            base = f"{base} {self.backend}"
        if self.budget is None:
            return base
        return f"{base} {AUTO}" if self.budget == AUTO else f"{base} B={self.budget}"

    def args(self) -> tuple[str, ...]:
        args = self.spec.args if self.budget is None else tuple(
            a.replace(BUDGET_PLACEHOLDER, str(self.budget)) for a in self.spec.args)
        if self.backend and self.backend != DEFAULT_BACKEND:
            args = (*args, ATTENTION_FLAG, self.backend)
        return args

    def shared_args(self, server_args: tuple[str, ...]) -> tuple[str, ...]:
        """The shared server arguments this variant's server gets: without any attention-backend flag
        when the variant names its own backend (so exactly one backend is on the command line)."""
        return without_attention_flags(server_args) if self.backend else server_args


def without_attention_flags(argv: tuple[str, ...]) -> tuple[str, ...]:
    """``argv`` less every ``--attention-backend X`` (``--flag=X`` too) and its prefill/decode forms."""
    kept: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in ATTENTION_FLAGS:
            skip = True
        elif not word.startswith(tuple(f"{flag}=" for flag in ATTENTION_FLAGS)):
            kept.append(word)
    return tuple(kept)


def attention_backend(argv: tuple[str, ...]) -> str:
    """The attention backend a server command line asks for (the last one wins, as in argparse), or
    ``default`` when it names none."""
    chosen = DEFAULT_BACKEND
    for i, word in enumerate(argv):
        if word == ATTENTION_FLAG and i + 1 < len(argv):
            chosen = argv[i + 1]
        elif word.startswith(ATTENTION_FLAG + "="):
            chosen = word.split("=", 1)[1]
    return chosen


def expand(choices: tuple[VariantSpec | Choice, ...], budgets: tuple[Budget, ...]) -> list[Variant]:
    out = []
    for choice in choices:
        spec, backend = (choice.spec, choice.backend) if isinstance(choice, Choice) else (choice, None)
        budgeted = budgets if spec.per_budget else (None,)
        out += [Variant(spec=spec, budget=b, backend=backend) for b in budgeted]
    return out
