"""backend: the patched tree's own ServerArgs picks tree-safe settings for DDTREE on every GPU family.

The cases in ``expectations/backend.toml`` (simulated hardware, flashinfer present or absent, page and
TP sizes, explicit backends, widths) are resolved by the tree's real ``ServerArgs.__post_init__`` in
ONE subprocess of the isolated CPU interpreter (``checks/_backend/probe.py``: the tree's ``python/``
first on sys.path, ``device="cuda"``, the hardware probes imported into ``server_args`` patched per
case, tiny local config.json dirs for the target and the DFlash draft). Each case becomes a row
(an INFO finding, and :func:`evaluate` returns them typed) and is checked against:

- its declared ``expect`` values (attention backend, whether TARGET_VERIFY honours a tree mask,
  ``speculative_eagle_topk``, draft and verify widths, overlap, page size, ...) or ``expect_error``;
- the invariant that a DDTREE configuration that resolves must verify on a backend that honours the
  tree mask, per the ``[tree_mask]`` table (map §3: triton yes, flashinfer yes, fa3 only with
  topk > 1, trtllm_mha no, ...).

Each row also records what ``is_no_spec_infer_or_topk_one`` returns (with the user's topk, as the
generic default rule sees it, and with the resolved args) and which backend the generic rule picks:
the seed's unevaluated question, answered per GPU family.

Rows are cached under ``ctx.cache_dir`` by the hash of the tree's Python sources, the cases, the
probe and the interpreter, so a warm run does not start the subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit import proc, tomlfile

from patchkit.verify import envs
from patchkit.errors import BadInput, Location
from patchkit.verify.api import Example, Finding, Severity, VerifyContext

NAME = "backend"
DESCRIPTION = "the tree's ServerArgs resolves DDTREE to tree-mask-safe backends and widths on simulated GPUs"

PROBE = Path(__file__).parent / "_backend" / "probe.py"
DEFAULT_EXPECTATIONS = "expectations/backend.toml"
MARKER = "=== patchkit backend probe rows ==="
CACHE_VERSION = 1

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
    line: int | None = None  # the case's [[case]] line in the expectations file

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
    for case, line in zip(spec.get("case", []), _case_lines(text)):
        case.setdefault("_line", line)
    return spec, rel


def _build_cases(spec: dict[str, Any], rel: str) -> list[dict[str, Any]]:
    """Cases with defaults, hardware profiles and model configs filled in."""
    defaults = spec.get("defaults", {})
    hardware, models = spec.get("hardware", {}), spec.get("models", {})
    cases = []
    for n, raw in enumerate(spec.get("case", [])):
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
            "hardware": case.get("hardware"),
            "line": raw.get("_line"),
        })
    return cases


# ---------------------------------------------------------------------------------------------
# Running the probe


def _interpreter(ctx: VerifyContext) -> str:
    override = os.environ.get("PATCHKIT_VERIFY_PYTHON")
    if override:
        return override
    if ctx.gate_config(NAME).get("interpreter") == "current":
        return sys.executable  # only for self-contained example trees that need nothing installed
    return str(envs.verify_interpreter(ctx).python)


def _tree_digest(ctx: VerifyContext, source_root: str) -> str:
    digest = hashlib.sha256()
    base = ctx.root / source_root
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = Path(dirpath, name)
                digest.update(str(path.relative_to(base)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _folder_digest(folder: Path | None) -> str | None:
    """Content hash of a stub folder, so editing a stub invalidates cached rows."""
    if folder is None or not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _probe_rows(ctx: VerifyContext, request: dict[str, Any]) -> list[dict[str, Any]]:
    python = _interpreter(ctx)
    source_root = ctx.manifest.verify.get("source_root", "python")
    key = hashlib.sha256(json.dumps(
        [CACHE_VERSION, request, python, PROBE.read_text(), _tree_digest(ctx, source_root)], sort_keys=True
    ).encode()).hexdigest()
    cached = ctx.cache_dir / "backend" / f"{key}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    timeout = float(ctx.gate_config(NAME).get("timeout_s", 600))
    done = proc.run([python, str(PROBE)], input=json.dumps(request), timeout=timeout,
                    env={"PYTHONDONTWRITEBYTECODE": "1"}, cwd=ctx.root)
    payload = json.loads(done.stdout.split(MARKER, 1)[1]) if MARKER in done.stdout else {}
    if "rows" not in payload:
        detail = payload.get("import_error") or done.stderr[-2000:] or done.stdout[-2000:]
        raise BadInput(f"the tree's ServerArgs could not be imported in {python}: {detail.strip()}",
                       location=Location(f"{source_root}/{request['module'].replace('.', '/')}.py"),
                       hint="check the isolated environment ([verify.env]) and the tree")
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(payload["rows"]))
    return payload["rows"]


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
    values["overlap"] = not row.get("disable_overlap_schedule")
    generic = effective_backend(row.get("generic_rule_at_selection"), row.get("use_mla"))
    values["generic_rule_tree_mask"] = _mask_support(table, generic, topk) if generic else None
    return values


def _check_case(case: dict[str, Any], values: dict[str, Any], algorithm: str) -> list[str]:
    problems = []
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
    return problems


def evaluate(ctx: VerifyContext) -> tuple[list[CaseResult], str]:
    """Every case, resolved and checked; also the expectations file's set-relative path."""
    spec, rel = _load_expectations(ctx)
    cases = _build_cases(spec, rel)
    table = spec.get("tree_mask", {})
    stub_folder, _ = envs.stubs(ctx, NAME)
    stub_paths = [str(stub_folder)] if stub_folder else []
    request = {
        "tree_python": str(ctx.root / ctx.manifest.verify.get("source_root", "python")),
        "stub_paths": stub_paths,
        "stub_digest": _folder_digest(stub_folder),
        "module": spec.get("module", "sglang.srt.server_args"),
        "probes": spec.get("probes", list(DEFAULT_PROBES)),
        "cases": [{k: c[k] for k in ("name", "probes_on", "flashinfer", "target", "draft", "args")} for c in cases],
    }
    rows = {row["name"]: row for row in _probe_rows(ctx, request)}
    algorithm = spec.get("algorithm", "DDTREE")
    results = []
    for case in cases:
        values = _derive(rows.get(case["name"], {"error": "no row from the probe"}), table)
        values["hardware"], values["flashinfer"] = case["hardware"], case["flashinfer"]
        results.append(CaseResult(case["name"], values, tuple(_check_case(case, values, algorithm)), case["line"]))
    return results, rel


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
    results, rel = evaluate(ctx)
    findings = envs.stubs(ctx, NAME)[1]  # each stub in use is reported, an undeclared one refused
    for result in results:
        findings.append(Finding(gate=NAME, severity=Severity.INFO, file=rel, line=result.line,
                                message=format_row(result)))
        for problem in result.problems:
            findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=rel, line=result.line,
                                    message=f"case {result.name}: {problem}",
                                    hint="fix the tree's DDTREE resolution or the declared expectation"))
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


EXAMPLES = (
    Example(name="tree topk keeps fa3 on its mask path", files=_example_tree("self.speculative_eagle_topk = 4"),
            passes=True, config={"interpreter": "current"}),
    Example(name="fa3 with topk 1 ignores the tree mask", files=_example_tree("self.speculative_eagle_topk = 1"),
            passes=False, expect="ignores the tree mask", config={"interpreter": "current"}),
)
