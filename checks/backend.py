"""backend: the patched tree's own ServerArgs picks tree-safe settings for DDTREE on every GPU family.

The cases in ``expectations/backend.toml`` (simulated hardware, flashinfer present or absent, page and
TP sizes, explicit backends, widths) are resolved by the tree's real ``ServerArgs.__post_init__`` in
ONE subprocess of the isolated CPU interpreter (``checks/_backend/probe.py``: the tree's ``python/``
first on sys.path, ``device="cuda"``, the hardware probes imported into ``server_args`` patched per
case, tiny local config.json dirs for the target and the DFlash draft), twice: as
``ServerArgs(**kwargs)`` and through SGLang's own command line (``cli_entry``, default
``prepare_server_args``: the parser users hit), which must agree. Hand-written cases come from
``[[case]]``; ``[matrix]`` generates a covering array over declared axes (GPU family, MHA/MLA,
which flag gets an explicit backend, topk, deterministic inference, page size, ...) with an oracle
(``checks/_backend/matrix.py``), and the gate states what the matrix covers. Each case becomes a row
(an INFO finding, and :func:`evaluate` returns them typed) and is checked against:

- its declared ``expect`` values (attention backend, whether TARGET_VERIFY honours a tree mask,
  ``speculative_eagle_topk``, draft and verify widths, overlap, page size, ...) or ``expect_error``;
- the invariant that a DDTREE configuration that resolves must verify on backends (prefill AND
  decode) that honour the tree mask, per the ``[tree_mask]`` table (triton yes, flashinfer
  yes, fa3 only with topk > 1, trtllm_mha no, ...);
- the command line: every flag of the family (``[cli] family``, default the xref family) stores
  into a ServerArgs field and defaults like it, and a case with the flag given (``[cli] flags``
  holds a sample value per flag) resolves the same through the command line as through keywords.
  Flag problems are reported at the flag's ``add_argument`` line in the tree.

A failing case also names the line the series added that it traces back to (the ``raise`` that
refused it, or the added line that ran and mentions the wrong value), as a second finding there;
and when the value it failed on (a backend the tree refused, a backend without the tree mask, a
field other than expected) was produced by an added line, that line too: the probe follows each
field's last value back to the ``return`` or assignment in a touched file that made it (a default
that picks 'fa3' in an added helper, stored by the base's own code), so the finding names the
default, not only the check that refused it. A value the base's code produced names no added line.

Each row also records what ``is_no_spec_infer_or_topk_one`` returns (with the user's topk, as the
generic default rule sees it, and with the resolved args) and which backend the generic rule picks:
the seed's unevaluated question, answered per GPU family.

Rows are cached under ``ctx.cache_dir`` by the cases, the probe and the interpreter, and are valid
while every tree file the probe tried to import (a failed import included) is unchanged, so a warm
run (or an edit of a file ``server_args`` never imports) does not start the subprocess.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit import tomlfile
from patchkit.checks._backend.causes import (
    CONSTANT_CAUSE,
    branch_causes,
    constant_causes,
    default_causes,
    guard_causes,
    parsed_sources,
)
from patchkit.checks._backend.matrix import Coverage, describe_row, generated_cases
from patchkit.checks._probe.runner import (
    DependencyCache,
    probe_code,
    python_names,
    run_probe,
    tokens_of,
    trace_back,
    tree_relative,
)
from patchkit.checks._probe.runner import (
    folder_digest as _folder_digest,
)
from patchkit.checks._probe.runner import (
    interpreter as _probe_interpreter,
)
from patchkit.checks._uncompiled import Uncompiled, caused_by, skipped, uncompiled
from patchkit.errors import BadInput, Location
from patchkit.index import added_lines, settings_from_manifest
from patchkit.verify import envs
from patchkit.verify.api import Example, Finding, Severity, VerifyContext

NAME = "backend"
DESCRIPTION = "the tree's ServerArgs resolves DDTREE to tree-mask-safe backends and widths on simulated GPUs"

PROBE = Path(__file__).parent / "_backend" / "probe.py"
DEFAULT_EXPECTATIONS = "expectations/backend.toml"
CACHE_VERSION = 4  # rows carry each field's origin; deps hold the files whose import failed too

# Expectation keys that are names for row fields.
ALIASES = {
    "topk": "speculative_eagle_topk",
    "draft_width": "speculative_dflash_block_size",
    "verify_width": "speculative_num_draft_tokens",
    "backend": "attention_backend",
}
DEFAULT_PROBES = (
    "is_hopper_with_cuda_12_3", "is_sm90_supported", "is_sm100_supported", "is_sm120_supported",
    "is_blackwell_supported",
)


@dataclass(frozen=True)
class CaseResult:
    """One evaluated case: the resolved values (or ``error``) and the problems found."""

    name: str
    values: dict[str, Any]
    problems: tuple[str, ...]
    line: int | None = None  # the case's [[case]] line in the expectations file (or [matrix]'s)
    traced: tuple[str, int] | None = None  # the added tree line the failure traces back to
    # (file, line, "field = value"): the added lines that produced a value the case failed on
    produced: tuple[tuple[str, int, str], ...] = ()
    # (file, line, why): added class-level defaults and never-run added branches behind a failure
    causes: tuple[tuple[str, int, str], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


# ---------------------------------------------------------------------------------------------
# Expectations


def _case_lines(text: str) -> list[int]:
    """1-based line of each ``[[case]]`` header, so findings can name the case's line."""
    return [n for n, line in enumerate(text.splitlines(), 1) if line.strip() == "[[case]]"]


def _load_expectations(ctx: VerifyContext) -> tuple[dict[str, Any], str]:
    rel = ctx.gate_config(NAME).get("expectations", DEFAULT_EXPECTATIONS)
    path = ctx.set_dir / rel
    if not path.is_file():
        raise BadInput(f"no backend expectations at {rel}", location=Location(str(path)),
                       hint="write the cases there or set [verify.backend] expectations")
    text = path.read_text()
    spec = tomlfile.parse(text, path, "fix the expectations file")
    for case, line in zip(spec.get("case", []), _case_lines(text), strict=False):
        case.setdefault("_line", line)
    spec["_matrix_line"] = _matrix_line(text)
    return spec, rel


def _matrix_line(text: str) -> int | None:
    return next((n for n, line in enumerate(text.splitlines(), 1) if line.strip() == "[matrix]"), None)


def _build_cases(spec: dict[str, Any], rel: str) -> tuple[list[dict[str, Any]], Coverage | None]:
    """Cases with defaults, hardware profiles and model configs filled in: the hand-written ones,
    then the generated matrix."""
    defaults = spec.get("defaults", {})
    hardware, models = spec.get("hardware", {}), spec.get("models", {})
    generated, coverage = generated_cases(spec.get("matrix", {}))
    for case in generated:
        case["_line"] = spec.get("_matrix_line")
    cases = []
    for n, raw in enumerate([*spec.get("case", []), *generated]):
        case = {**defaults, **raw, "args": {**defaults.get("args", {}), **raw.get("args", {})}}
        name = case.get("name") or f"case{n}"
        hw = hardware.get(case.get("hardware", ""))
        if hw is None:
            raise BadInput(f"case {name}: unknown hardware {case.get('hardware')!r}", location=Location(rel),
                           hint=f"use one of: {', '.join(hardware)}")
        for role in ("target", "draft"):
            if case.get(role) and case[role] not in models:
                raise BadInput(f"case {name}: unknown {role} model {case[role]!r}", location=Location(rel),
                               hint=f"use one of: {', '.join(models)}")
        cases.append({
            "name": name,
            "probes_on": list(hw.get("probes_on", [])),
            "flashinfer": bool(case.get("flashinfer", True)),
            "target": models[case["target"]],
            "draft": models[case["draft"]] if case.get("draft") else None,
            "args": case["args"],
            "expect": case.get("expect", {}),
            "expect_error": case.get("expect_error"),
            "expect_error_flag": case.get("expect_error_flag"),
            "offending": case.get("offending"),
            "exception": case.get("exception"),
            "expect_resolves": bool(case.get("expect_resolves")),
            "generated": case.get("generated"),
            "hardware": case.get("hardware"),
            "line": raw.get("_line"),
        })
    return cases, coverage


# ---------------------------------------------------------------------------------------------
# Running the probe


def _probe_payload(ctx: VerifyContext, request: dict[str, Any], stub_folder: Path | None) -> dict[str, Any]:
    """The probe's rows for ``request``, from the dependency cache when nothing it imported changed."""
    source_root = ctx.manifest.verify.get("source_root", "python")
    key = hashlib.sha256(json.dumps(
        [CACHE_VERSION, request, _probe_interpreter(ctx, NAME), probe_code(PROBE),
         _folder_digest(stub_folder), python_names(ctx.root, source_root)], sort_keys=True).encode()).hexdigest()
    cache = DependencyCache(ctx.cache_dir, NAME, key)
    cached = cache.get(ctx.root)
    if cached is not None:
        return cached[0]
    module_file = f"{source_root}/{request['module'].replace('.', '/')}.py"
    payload = run_probe(ctx, NAME, PROBE, request, float(ctx.gate_config(NAME).get("timeout_s", 600)), module_file)
    deps = [r for path in payload.get("deps", []) if (r := tree_relative(ctx, path)) is not None]
    cache.put(ctx.root, deps, [payload])
    return payload


# ---------------------------------------------------------------------------------------------
# Evaluation


def _mask_support(table: dict[str, str], backend: str | None, topk: Any) -> bool | None:
    """Whether ``backend``'s TARGET_VERIFY honours a tree mask; None when the table lacks it."""
    rule = table.get(backend or "")
    if rule is None:
        return None
    if rule == "yes":
        return True
    if rule == "no":
        return False
    if rule.startswith("topk>"):
        return topk is not None and int(topk) > int(rule[5:])
    raise BadInput(f"[tree_mask] {backend} = {rule!r}: use yes, no or topk>N")


#: The same --attention-backend name builds a different class for MLA models (attention_registry).
MLA_BACKEND_NAMES = {"flashinfer": "flashinfer_mla"}


def effective_backend(name: str | None, use_mla: bool | None) -> str | None:
    """The backend that really runs: ``flashinfer`` on an MLA model is ``flashinfer_mla``."""
    return MLA_BACKEND_NAMES.get(name, name) if use_mla and name else name


def _derive(row: dict[str, Any], table: dict[str, str]) -> dict[str, Any]:
    values = dict(row)
    if "error" in row:
        return values
    mode = row.get("speculative_attention_mode") or "prefill"
    verify = row.get("decode_attention_backend") if mode == "decode" else row.get("prefill_attention_backend")
    values["verify_backend"] = effective_backend(verify or row.get("attention_backend"), row.get("use_mla"))
    topk = row.get("speculative_eagle_topk")
    values["tree_mask"] = _mask_support(table, values["verify_backend"], topk)
    other = row.get("prefill_attention_backend") if mode == "decode" else row.get("decode_attention_backend")
    values["other_backend"] = effective_backend(other or row.get("attention_backend"), row.get("use_mla"))
    values["other_tree_mask"] = _mask_support(table, values["other_backend"], topk)
    values["overlap"] = not row.get("disable_overlap_schedule")
    generic = effective_backend(row.get("generic_rule_at_selection"), row.get("use_mla"))
    values["generic_rule_tree_mask"] = _mask_support(table, generic, topk) if generic else None
    return values


def _check_case(case: dict[str, Any], values: dict[str, Any], algorithm: str) -> list[str]:
    problems: list[str] = []
    if "error" in values and case.get("generated") is not None:
        return problems  # the matrix oracle judges refusals (_check_generated)
    if "error" in values:
        if not case["expect_error"]:
            problems.append(f"ServerArgs raised {values['error']}")
        elif case["expect_error"] not in values["error"]:
            problems.append(f"expected an error containing {case['expect_error']!r}, got {values['error']}")
        return problems
    if case["expect_error"]:
        problems.append(f"expected an error containing {case['expect_error']!r}, but ServerArgs resolved "
                        f"(backend {values.get('verify_backend')})")
    for key, want in case["expect"].items():
        got = values.get(ALIASES.get(key, key), "<missing>")
        if got != want:
            problems.append(f"{key}: expected {want!r}, got {got!r}")
    if str(values.get("speculative_algorithm", "")).upper() == algorithm:
        if values.get("tree_mask") is None:
            problems.append(f"backend {values.get('verify_backend')!r} is not in the [tree_mask] table")
        elif not values["tree_mask"]:
            problems.append(f"DDTREE verifies on {values.get('verify_backend')!r}, whose TARGET_VERIFY ignores "
                            f"the tree mask (speculative_eagle_topk={values.get('speculative_eagle_topk')})")
        elif values.get("other_tree_mask") is False:
            problems.append(f"DDTREE's other target backend is {values.get('other_backend')!r}, which ignores the "
                            "tree mask (both prefill and decode must apply it)")
    return problems


def _words(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()) + " "


def _check_generated(case: dict[str, Any], values: dict[str, Any], algorithm: str = "DDTREE") -> list[str]:
    """The matrix oracle (checks/_backend/matrix.py) for a generated case. The set's own refusals
    (their message names the algorithm) must name the flag to change; the base's may name the
    offending value instead."""
    exception = case.get("exception")
    if exception is not None:
        if "error" not in values:
            return [f"expected the declared refusal ({exception['reason']}), but it resolved"]
        return [] if exception["error"] in values["error"] else [
            f"expected the declared refusal containing {exception['error']!r}, got {values['error']}"]
    flag, offending = case.get("expect_error_flag"), case.get("offending")
    if flag:
        if "error" not in values:
            return [f"expected a refusal naming {flag}, but it resolved (backend {values.get('verify_backend')})"]
        error = values["error"]
        own = algorithm in error
        # the set's own refusal names the flag, or the setting in words with its value ("prefill attention
        # backend 'fa3'"); the base's may name the offending value alone
        said = bool(offending) and _words(str(offending)) in _words(error)
        named = flag in error or (said and (not own or _words(flag.strip("-").replace("-", " ")) in _words(error)))
        return [] if named else [f"refused, but the error names neither {flag} nor {offending!r}: {error}"]
    if case.get("expect_resolves") and "error" in values:
        return [f"must resolve (every choice is allowed), but ServerArgs raised {values['error']}"]
    return []


def _check_cli(values: dict[str, Any], cli: dict[str, Any] | None) -> list[str]:
    """The command line must resolve a case exactly as ServerArgs(**kwargs) does."""
    if not cli or "unavailable" in cli:
        return []
    argv = " ".join(a for a in cli.get("argv", []) if not a.startswith("/"))
    if ("error" in values) != ("error" in cli):
        got = cli.get("error") or f"resolved (backend {cli.get('attention_backend')})"
        want = values.get("error") or f"resolved (backend {values.get('attention_backend')})"
        return [f"the command line ({argv}) gives {got}; ServerArgs(**kwargs) gives {want}"]
    if "error" in values:
        return [] if cli["error"].split(":")[0] == values["error"].split(":")[0] else [
            f"the command line ({argv}) is refused with {cli['error']}; ServerArgs(**kwargs) with {values['error']}"]
    differ = [f"{k}: command line {cli.get(k)!r}, keywords {values.get(k)!r}"
              for k in _CLI_FIELDS if cli.get(k) != values.get(k)]
    return [f"the command line ({argv}) resolves differently: {'; '.join(differ)}"] if differ else []


_CLI_FIELDS = (
    "attention_backend", "prefill_attention_backend", "decode_attention_backend", "speculative_algorithm",
    "speculative_eagle_topk", "speculative_num_steps", "speculative_num_draft_tokens",
    "speculative_dflash_block_size", "disable_overlap_schedule", "page_size", "max_running_requests",
    "enable_mixed_chunk", "tp_size",
)


@dataclass(frozen=True)
class Evaluation:
    """Every case's result, the flags' problems, and what the generated matrix covers."""

    results: list[CaseResult]
    rel: str  # the expectations file, set-relative
    flag_problems: list[tuple[str, int | None, str]]  # (tree file, line, message)
    coverage: Coverage | None
    cli_entry: bool


def _request(ctx: VerifyContext, spec: dict[str, Any], cases: list[dict[str, Any]], stub_paths: list[str],
             added: dict[str, frozenset[int]]) -> dict[str, Any]:
    cli = spec.get("cli", {})
    by_name = {c["name"]: c for c in cases}
    flag_case = by_name.get(cli.get("case", "")) if cli.get("case") else None
    keys = ("name", "probes_on", "flashinfer", "target", "draft", "args")
    return {
        "tree_python": str(ctx.root / ctx.manifest.verify.get("source_root", "python")),
        "stub_paths": stub_paths,
        "module": spec.get("module", "sglang.srt.server_args"),
        "probes": spec.get("probes", list(DEFAULT_PROBES)),
        "cases": [{k: c[k] for k in keys} for c in cases],
        "cli_entry": cli.get("entry", "prepare_server_args") if cli.get("enabled", True) else None,
        "flag_family": cli.get("family") or ctx.gate_config("xref").get("family") or "ddtree",
        "flag_samples": {k: v for k, v in cli.get("flags", {}).items()},
        "flag_case": {k: flag_case[k] for k in keys} if flag_case else None,
        "touched": [str((ctx.root / r).resolve()) for r in ctx.touched if r.endswith(".py")],
        "added": {str((ctx.root / r).resolve()): sorted(lines) for r, lines in added.items()},
    }


def _trace(ctx: VerifyContext, row: dict[str, Any], problems: list[str],
           added: dict[str, frozenset[int]]) -> tuple[str, int] | None:
    tokens = tokens_of(*problems)
    return trace_back(ctx, row.get("executed", []), added, tokens, None, row.get("raised_at"))


_QUOTED = re.compile(r"'([^'\s]+)'")
ANY_FIELD = "*"
BACKEND_FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
_DERIVED_BACKENDS = {"verify_backend": "verify_backend", "tree_mask": "verify_backend",
                     "other_backend": "other_backend", "other_tree_mask": "other_backend"}


def _failed_values(case: dict[str, Any], values: dict[str, Any], algorithm: str) -> set[tuple[str, str]]:
    """The (field, value) pairs a failing case is about: what the tree refused when it should not have
    (the quoted names in its message, in any field), the expected fields it resolved otherwise, and the
    backend fields behind a verify backend without the tree mask. A case refused for another reason
    than the refusal it expects (``trtllm_mha`` let through the tree-mask check, then refused for its
    page size) is also about the value that refusal was for: the generated case's offending value, else
    the backends the case names explicitly. A case that fails for another reason (a refusal naming the
    wrong flag, the command line disagreeing) is about no value."""
    if "error" in values:
        exception = case.get("exception")
        unexpected = (not case["expect_error"] and not case.get("expect_error_flag") and not exception
                      and (case.get("generated") is None or case.get("expect_resolves")))
        wrong = ((case["expect_error"] and case["expect_error"] not in values["error"])
                 or (exception is not None and exception["error"] not in values["error"]))
        if not (unexpected or wrong):
            return set()
        refused = {(ANY_FIELD, v) for v in _QUOTED.findall(values["error"])}
        if wrong and case["expect_error"]:
            refused_for = ([str(case["offending"])] if case.get("offending") is not None
                           else [str(case["args"][f]) for f in BACKEND_FIELDS if case.get("args", {}).get(f)])
            refused |= {(ANY_FIELD, v) for v in refused_for}
        return refused

    def backends(derived: str) -> set[tuple[str, str]]:
        return {(field, str(values.get(derived))) for field in BACKEND_FIELDS}

    failed: set[tuple[str, str]] = set()
    if (case["expect_error"] or case.get("expect_error_flag")) and case.get("offending") is not None:
        failed.add((ANY_FIELD, str(case["offending"])))  # a refusal that never came: the value it was for
    for key, want in case["expect"].items():
        field = ALIASES.get(key, key)
        if values.get(field, "<missing>") == want:
            continue
        if field in _DERIVED_BACKENDS:
            failed |= backends(_DERIVED_BACKENDS[field])
        elif values.get(field) is not None:
            failed.add((field, str(values[field])))
    if str(values.get("speculative_algorithm", "")).upper() == algorithm:
        if not values.get("tree_mask"):
            failed |= backends("verify_backend")
        elif values.get("other_tree_mask") is False:
            failed |= backends("other_backend")
    return failed


def _produced(ctx: VerifyContext, row: dict[str, Any], failed: set[tuple[str, str]],
              added: dict[str, frozenset[int]]) -> tuple[tuple[str, int, str], ...]:
    """The added lines that produced a field's last value where that value is one the case failed on
    (``origins`` from the probe: the ``return`` or assignment that made the value, followed up through
    the calls that passed it on). A value the base's own code produced traces back to no added line."""
    out = []
    for name, (file, line, value) in sorted(row.get("origins", {}).items()):
        rel = tree_relative(ctx, file) if file else None
        if rel is None or line is None or int(line) not in added.get(rel, frozenset()):
            continue
        shown = {str(value)}
        if name in BACKEND_FIELDS and isinstance(value, str):
            shown.add(str(effective_backend(value, row.get("use_mla"))))  # flashinfer on MLA: flashinfer_mla
        if any((field, v) in failed for field in (name, ANY_FIELD) for v in shown):
            out.append((rel, int(line), f"{name} = {value!r}"))
    return tuple(out)


def _causes(ctx: VerifyContext, row: dict[str, Any], failed: set[tuple[str, str]], added: dict[str, frozenset[int]],
            sources: dict[str, str]) -> tuple[tuple[str, int, str], ...]:
    """What the run-time trace-back cannot see (checks/_backend/causes.py): added class-level defaults
    the failed values point at, and the never-run added branch of each base function that produced one."""
    if not failed:
        return ()
    origins = []
    for name, (file, line, value) in sorted(row.get("origins", {}).items()):
        rel = tree_relative(ctx, file) if file else None
        shown = {str(value)} | ({str(effective_backend(value, row.get("use_mla")))}
                                if name in BACKEND_FIELDS and isinstance(value, str) else set())
        if rel is not None and line is not None and any((f, v) in failed for f in (name, ANY_FIELD) for v in shown):
            origins.append((rel, int(line), f"{name} = {value!r}"))
    executed: dict[str, set[int]] = {}
    for entry in row.get("executed", []):
        rel = tree_relative(ctx, entry[0])
        if rel is not None:
            executed.setdefault(rel, set()).add(int(entry[1]))
    base_origins = [o for o in origins if o[1] not in added.get(o[0], frozenset())]  # added ones: _produced
    family = settings_from_manifest(ctx.manifest).family_re().search
    texts = [_source_line(sources, ctx, rel, line) for rel, line, _assignment in origins]
    found = default_causes(sources, added, failed, row.get("origins", {}), family, texts)
    found += branch_causes(sources, added, base_origins, executed)
    ran = [_source_line(sources, ctx, rel, line) for rel, lines in sorted(executed.items()) for line in sorted(lines)
           if line in added.get(rel, frozenset())]
    found += constant_causes(sources, added, failed, ran)
    return tuple(dict.fromkeys(found))


def _guards(case: dict[str, Any], values: dict[str, Any], row: dict[str, Any], ctx: VerifyContext,
            added: dict[str, frozenset[int]], sources: dict[str, str]) -> tuple[tuple[str, int, str], ...]:
    """A case that expects a refusal the set raises and did not get it: the condition that let it through."""
    expected = case.get("expect_error")
    if not expected or expected in str(values.get("error", "")):
        return ()
    executed: dict[str, set[int]] = {}
    for entry in row.get("executed", []):
        rel = tree_relative(ctx, entry[0])
        if rel is not None:
            executed.setdefault(rel, set()).add(int(entry[1]))
    return tuple(guard_causes(sources, added, expected, executed))


def _reads_a_cause(ctx: VerifyContext, sources: dict[str, str], traced: tuple[str, int] | None,
                   causes: tuple[tuple[str, int, str], ...]) -> bool:
    """Whether the traced line only reads a constant named as the cause (then the constant is the
    finding: the line that changed, one finding per cause)."""
    if traced is None:
        return False
    text = _source_line(sources, ctx, *traced)
    names = [why.split(" ", 1)[0] for _file, _line, why in causes if CONSTANT_CAUSE in why]
    return any(re.search(rf"\b{re.escape(name)}\b", text) for name in names)


def _source_line(sources: dict[str, str], ctx: VerifyContext, rel: str, line: int) -> str:
    if rel not in sources:
        sources[rel] = (ctx.root / rel).read_text(errors="replace")
    lines = sources[rel].splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def evaluate(ctx: VerifyContext) -> Evaluation:
    """Every case, resolved and checked (keywords and command line); also the flags' problems."""
    spec, rel = _load_expectations(ctx)
    cases, coverage = _build_cases(spec, rel)
    table = spec.get("tree_mask", {})
    stub_folder, _ = envs.stubs(ctx, NAME)
    added = added_lines(ctx.root, [t for t in ctx.touched if t.endswith(".py")], ctx.base_commit)
    request = _request(ctx, spec, cases, [str(stub_folder)] if stub_folder else [], added)
    payload = _probe_payload(ctx, request, stub_folder)
    rows = {row["name"]: row for row in payload["rows"]}
    algorithm = spec.get("algorithm", "DDTREE")
    sources = parsed_sources({rel: (ctx.root / rel).read_text(errors="replace") for rel in added})
    results = []
    for case in cases:
        row = rows.get(case["name"], {"error": "no row from the probe"})
        values = _derive(row, table)
        values["hardware"], values["flashinfer"] = case["hardware"], case["flashinfer"]
        problems = _check_case(case, values, algorithm) + _check_generated(case, values, algorithm)
        problems += _check_cli(values, row.get("cli"))
        traced = _trace(ctx, row, problems, added) if problems else None
        failed = _failed_values(case, values, algorithm) if problems else set()
        produced = _produced(ctx, row, failed, added) if problems else ()
        causes = _causes(ctx, row, failed, added, sources) if problems else ()
        guards = _guards(case, values, row, ctx, added, sources) if problems else ()
        if guards:  # the condition that let the case through is the cause: the last line that ran is none
            causes, traced = tuple(dict.fromkeys(causes + guards)), None
        if _reads_a_cause(ctx, sources, traced, causes):
            traced = None
        name = case["name"] + (f" ({describe_row(case['generated'])})" if case.get("generated") else "")
        results.append(CaseResult(name, values, tuple(problems), case["line"], traced, produced, causes))
    flag_problems = []
    for flag in payload.get("flags", []):
        file = tree_relative(ctx, flag["file"]) if flag.get("file") else None
        for message, line in flag["problems"]:
            flag_problems.append((file or rel, line, message))
        if flag.get("case"):
            kw_values = _derive(flag["case"], table)
            for problem in _check_cli(kw_values, flag["case"].get("cli")):
                flag_problems.append((file or rel, flag.get("line"), f"with {flag['flag']}: {problem}"))
    return Evaluation(results, rel, flag_problems, coverage, bool(payload.get("cli_entry")))


ROW_KEYS = (
    ("hw", "hardware"), ("fi", "flashinfer"), ("verify", "verify_backend"), ("mask", "tree_mask"),
    ("topk", "speculative_eagle_topk"), ("draft", "speculative_dflash_block_size"),
    ("verify_w", "speculative_num_draft_tokens"), ("overlap", "overlap"), ("page", "page_size"),
    ("tp", "tp_size"), ("topk_one@sel", "topk_one_at_selection"), ("topk_one", "topk_one_resolved"),
    ("generic@sel", "generic_rule_at_selection"), ("generic", "generic_rule_resolved"),
)


def format_row(result: CaseResult) -> str:
    v = result.values
    if "error" in v:
        return f"{result.name}: hw={v.get('hardware')} fi={v.get('flashinfer')} error={v['error']}"
    return f"{result.name}: " + " ".join(f"{label}={v.get(key)}" for label, key in ROW_KEYS)


def run(ctx: VerifyContext) -> list[Finding]:
    broken = uncompiled(ctx)  # a failure one of these explains is the compile gate's finding
    try:
        evaluation = evaluate(ctx)
    except BadInput as error:
        cause = caused_by(error.message, broken, ctx.root)
        if cause is None:
            raise
        return [skipped(NAME, cause, "every backend case (the ServerArgs module does not import)")]
    rel = evaluation.rel
    findings = envs.stubs(ctx, NAME)[1]  # each stub in use is reported, an undeclared one refused
    unresolved: dict[Uncompiled, list[str]] = {}
    for result in evaluation.results:
        cause = caused_by("\n".join([*result.problems, str(result.values.get("error", ""))]), broken, ctx.root)
        if result.problems and cause is not None:
            unresolved.setdefault(cause, []).append(f"case {result.name}")
    skip = {name for names in unresolved.values() for name in names}  # their rows stay, as info
    evaluation = dataclasses.replace(evaluation, results=[
        dataclasses.replace(r, problems=()) if f"case {r.name}" in skip else r for r in evaluation.results])
    findings += [skipped(NAME, cause, cases) for cause, cases in unresolved.items()]
    if evaluation.coverage is not None:
        findings.append(Finding(gate=NAME, severity=Severity.INFO, file=rel, line=None,
                                message=evaluation.coverage.describe()))
    if not evaluation.cli_entry:
        findings.append(Finding(gate=NAME, severity=Severity.INFO, file=rel, line=None,
                                message="cases resolved through ServerArgs(**kwargs) only: "
                                "the module has no command-line entry ([cli] entry)"))
    traced: dict[tuple[str, int | None], list[str]] = {}
    for result in evaluation.results:
        findings.append(Finding(gate=NAME, severity=Severity.INFO, file=rel, line=result.line,
                                message=format_row(result)))
        for problem in result.problems:
            findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=rel, line=result.line,
                                    message=f"case {result.name}: {problem}",
                                    hint="fix the tree's DDTREE resolution or the declared expectation"))
        if result.traced and result.problems:
            traced.setdefault(result.traced, []).append(f"{result.name}: {result.problems[0]}")
        for source, number, assignment in result.produced:
            traced.setdefault((source, number), []).append(f"{result.name}: {assignment} came from here; "
                                                       f"{result.problems[0]}")
    caused: dict[tuple[str, int], list[str]] = {}
    for result in evaluation.results:
        for source, number, why in result.causes if result.problems else ():
            caused.setdefault((source, number), []).append(f"{why}; case {result.name}: {result.problems[0]}")
    for (cause_file, cause_line), failures in caused.items():
        more = f" (and {len(failures) - 1} more case(s))" if len(failures) > 1 else ""
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=cause_file, line=cause_line,
                                message=f"backend case failure points at this added line: {failures[0]}{more}",
                                hint=f"see the case rows of {rel}"))
    for (file, line), failures in traced.items():
        more = f" (and {len(failures) - 1} more case(s))" if len(failures) > 1 else ""
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=file, line=line,
                                message=f"backend case failure traces back to this added line: {failures[0]}{more}",
                                hint=f"see the case rows of {rel}"))
    for file, line, message in evaluation.flag_problems:
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=file, line=line, message=message,
                                hint="make the flag store into its ServerArgs field with the field's default"))
    return findings


# ---------------------------------------------------------------------------------------------
# Examples: a self-contained fake ServerArgs (no sglang needed), evaluated by the current python.

_FAKE_SERVER_ARGS = '''\
from dataclasses import dataclass


def is_hopper_with_cuda_12_3():
    return False


def is_flashinfer_available():
    return False


def is_no_spec_infer_or_topk_one(args):
    return args.speculative_eagle_topk is None or (args.speculative_eagle_topk == 1 and args.page_size in (1, None))


@dataclass
class ServerArgs:
    model_path: str = ""
    speculative_draft_model_path: str = None
    device: str = "cuda"
    skip_tokenizer_init: bool = False
    speculative_algorithm: str = None
    speculative_eagle_topk: int = None
    speculative_num_draft_tokens: int = None
    speculative_dflash_block_size: int = None
    page_size: int = None
    attention_backend: str = None
    disable_overlap_schedule: bool = False

    def use_mla_backend(self):
        return False

    def get_model_config(self):
        return None

    def _get_default_attn_backend(self, use_mla, model_config):
        if is_hopper_with_cuda_12_3() and is_no_spec_infer_or_topk_one(self):
            return "fa3"
        return "flashinfer" if is_flashinfer_available() else "triton"

    def __post_init__(self):
        if self.page_size is None:
            self.page_size = 1
        if self.attention_backend is None:
            self.attention_backend = self._get_default_attn_backend(False, None)
        if self.speculative_algorithm == "DDTREE":
            TOPK
            self.speculative_num_draft_tokens = 9
            self.speculative_dflash_block_size = 4
            self.disable_overlap_schedule = True

    def get_attention_backends(self):
        return self.attention_backend, self.attention_backend
'''
_EXPECT = '''\
module = "sglang.srt.server_args"
probes = ["is_hopper_with_cuda_12_3"]

[tree_mask]
triton = "yes"
flashinfer = "yes"
fa3 = "topk>1"

[hardware.hopper]
probes_on = ["is_hopper_with_cuda_12_3"]

[hardware.ampere]
probes_on = []

[models.tiny]
architectures = ["LlamaForCausalLM"]

[defaults]
target = "tiny"
args = { speculative_algorithm = "DDTREE" }

[[case]]
name = "hopper"
hardware = "hopper"
expect = { tree_mask = true, verify_width = 9, draft_width = 4, overlap = false }

[[case]]
name = "ampere"
hardware = "ampere"
flashinfer = false
expect = { verify_backend = "triton", tree_mask = true }
'''


def _example_tree(topk_line: str) -> dict[str, str]:
    return {
        "python/sglang/__init__.py": "",
        "python/sglang/srt/__init__.py": "",
        "python/sglang/srt/server_args.py": _FAKE_SERVER_ARGS.replace("TOPK", topk_line),
        "@set/expectations/backend.toml": _EXPECT,
    }


# The trace-back to the line that produced a refused value: a base ServerArgs whose default backend
# the set routes through its own DDTREE default (an added helper), stored by the base's assignment,
# and the set's refusal of a backend without the tree mask.
_TRACE_BASE = '''\
from dataclasses import dataclass


def is_hopper_with_cuda_12_3():
    return False


@dataclass
class ServerArgs:
    model_path: str = ""
    speculative_draft_model_path: str = None
    device: str = "cuda"
    skip_tokenizer_init: bool = False
    speculative_algorithm: str = None
    speculative_eagle_topk: int = None
    attention_backend: str = None

    def use_mla_backend(self):
        return False

    def get_model_config(self):
        return None

    def _get_default_attn_backend(self, use_mla, model_config):
        return BASE_DEFAULT

    def __post_init__(self):
        if self.attention_backend is None:
            self.attention_backend = self._get_default_attn_backend(
                False, None
            )

    def get_attention_backends(self):
        return self.attention_backend, self.attention_backend
'''
_TRACE_SET_DEFAULT = '''\
    def _get_default_attn_backend(self, use_mla, model_config):
        if self.speculative_algorithm == "DDTREE":
            return self._get_default_ddtree_attn_backend()
        return BASE_DEFAULT

    def _get_default_ddtree_attn_backend(self):
        return DDTREE_DEFAULT
'''
_TRACE_SET_CHECK = '''\
    def __post_init__(self):
        if self.attention_backend is None:
            self.attention_backend = self._get_default_attn_backend(
                False, None
            )
        if self.speculative_algorithm == "DDTREE":
            self.speculative_eagle_topk = 8
            if self.attention_backend not in ("flashinfer", "triton"):
                raise ValueError(
                    f"DDTREE: attention backend '{self.attention_backend}' does not apply the tree mask"
                )
'''
_TRACE_EXPECT = '''\
module = "sglang.srt.server_args"
probes = ["is_hopper_with_cuda_12_3"]

[tree_mask]
triton = "yes"
flashinfer = "yes"
fa3 = "topk>1"

[hardware.hopper]
probes_on = ["is_hopper_with_cuda_12_3"]

[models.tiny]
architectures = ["LlamaForCausalLM"]

[[case]]
name = "ddtree default"
hardware = "hopper"
target = "tiny"
args = { speculative_algorithm = "DDTREE" }
'''


def traced_example_tree(ddtree_default: str | None, base_default: str = "triton") -> dict[str, str]:
    """The trace-back fixture: with ``ddtree_default`` the set adds a DDTREE default returning it
    (an added line); with None the set only adds its refusal and the value comes from the base."""
    base = _TRACE_BASE
    default = "    def _get_default_attn_backend(self, use_mla, model_config):\n        return BASE_DEFAULT\n"
    patched = base
    if ddtree_default is not None:
        patched = patched.replace(default, _TRACE_SET_DEFAULT).replace("DDTREE_DEFAULT", repr(ddtree_default))
    start = patched.index("    def __post_init__(self):")
    end = patched.index("    def get_attention_backends(self):")
    patched = patched[:start] + _TRACE_SET_CHECK + "\n" + patched[end:]
    return {
        "python/sglang/__init__.py": "",
        "python/sglang/srt/__init__.py": "",
        "@base/python/sglang/srt/server_args.py": base.replace("BASE_DEFAULT", repr(base_default)),
        "python/sglang/srt/server_args.py": patched.replace("BASE_DEFAULT", repr(base_default)),
        "@set/expectations/backend.toml": _TRACE_EXPECT,
    }


def _patched(files: dict[str, str], *edits: tuple[str, str]) -> dict[str, str]:
    """The fixture with the set's own server_args.py edited (each edit must apply)."""
    text = files["python/sglang/srt/server_args.py"]
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return {**files, "python/sglang/srt/server_args.py": text}


# A DDTREE branch placed below the base's return: it never runs, the refused value is the base's.
_DDTREE_BRANCH = ('        if self.speculative_algorithm == "DDTREE":\n'
                  "            return self._get_default_ddtree_attn_backend()\n")
_UNREACHABLE_BRANCH = _patched(traced_example_tree("triton", base_default="fa3"),
                               (_DDTREE_BRANCH + "        return 'fa3'\n", "        return 'fa3'\n" + _DDTREE_BRANCH))
# A DDTREE backend kept in a class-level default the set adds: no run-time assignment made the value.
_CLASS_DEFAULT = _patched(
    traced_example_tree("triton"),
    ("    attention_backend: str = None\n", "    attention_backend: str = None\n    ddtree_backend: str = 'fa3'\n"),
    ("        return 'triton'\n\n    def __post_init__", "        return self.ddtree_backend\n\n    def __post_init__"))

EXAMPLES = (
    Example(name="tree topk keeps fa3 on its mask path", files=_example_tree("self.speculative_eagle_topk = 4"),
            passes=True, config={"interpreter": "current"}),
    Example(name="fa3 with topk 1 ignores the tree mask", files=_example_tree("self.speculative_eagle_topk = 1"),
            passes=False, expect="ignores the tree mask", config={"interpreter": "current"}),
    Example(name="an added DDTREE default picks a tree-mask backend", files=traced_example_tree("triton"),
            passes=True, config={"interpreter": "current"}),
    Example(name="an added DDTREE default picks a backend the set refuses", files=traced_example_tree("fa3"),
            passes=False, expect="traces back to this added line: ddtree default: attention_backend = 'fa3' came "
            "from here", config={"interpreter": "current"}),
    Example(name="an added DDTREE branch below the base's return is named", files=_UNREACHABLE_BRANCH,
            passes=False, expect="this added branch never ran, and attention_backend = 'fa3' came from",
            config={"interpreter": "current"}),
    Example(name="an added class-level default behind a refused backend is named", files=_CLASS_DEFAULT,
            passes=False, expect="ddtree_backend = fa3 (a class-level default)", config={"interpreter": "current"}),
)
