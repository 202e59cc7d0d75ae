"""calls: the tree's graph-capture, replay and request-gate code, called on CPU, does what DDTREE needs.

Some integration paths only run on a GPU server: the CUDA-graph capture builds the TARGET_VERIFY
spec info once and every replay reuses it; the scheduler refuses requests the worker cannot serve.
A mistake there (a capture without the tree mask, a request gate that only warns) passes every
static rule and every CPU test. This gate imports those modules in the isolated environment (with
the declared stubs) and calls the functions themselves with small stand-ins, as declared in
``expectations/calls.toml`` (``[verify.calls] expectations``)::

    [imports]
    cgr = "sglang.srt.model_executor.cuda_graph_runner"

    [[call]]
    name = "the DDTREE target graph is captured with the tree mask"
    function = "cgr.CudaGraphRunner.get_spec_info"
    self = { "model_runner.is_draft_worker" = "False", "buffers.custom_mask" = "torch.ones(8, dtype=torch.bool)" }
    args = ["4"]
    expect = ["result.custom_mask is self.buffers.custom_mask"]

A call fails when an ``expect`` expression is false, when it raises (unless ``raises`` names the
error it must raise, or ``allow_error``), or when it does not raise what ``raises`` names. A
nested function is reachable as ``mod.Class.method.<locals>.inner`` with its free variables under
``free``. See ``checks/_probe/calls_probe.py`` for the helpers expressions can use.

Each failure is reported at the line the series added that it traces back to: of the added lines
that ran during the call, the last one mentioning a name in the failed expectation (else the last
one that ran), so ``custom_mask=None`` in the capture path is named, not the expectations file.
Where another call of the same function passes, the lines only the failing call ran come first
(the branch it took and the passing call did not: a DDTREE request sent to DFLASH's validator is
named at that call, not at the queueing both calls share).
Results are cached by the content of every tree file the probe imported.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from patchkit import tomlfile
from patchkit.checks._probe.runner import (
    DependencyCache,
    folder_digest,
    interpreter,
    probe_code,
    python_names,
    run_probe,
    source_root,
    tokens_of,
    trace_back,
    tree_relative,
)
from patchkit.checks._uncompiled import Uncompiled, caused_by, skipped, uncompiled
from patchkit.errors import BadInput, Location
from patchkit.index import added_lines
from patchkit.verify import envs
from patchkit.verify.api import Example, Finding, Severity, VerifyContext

NAME = "calls"
DESCRIPTION = "declared calls into the tree's capture, replay and request-gate code behave as DDTREE needs"

PROBE = Path(__file__).parent / "_probe" / "calls_probe.py"
DEFAULT_EXPECTATIONS = "expectations/calls.toml"
CACHE_VERSION = 2  # deps hold the files whose import failed too


def _call_lines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if line.strip() == "[[call]]"]


def load_calls(ctx: VerifyContext) -> tuple[dict[str, Any], str, list[int]] | None:
    """The expectations (None when the set declares none), their set-relative path and call lines."""
    config = ctx.gate_config(NAME)
    rel = str(config.get("expectations", DEFAULT_EXPECTATIONS))
    path = ctx.set_dir / rel
    if not path.is_file():
        if "expectations" in config:
            raise BadInput(f"no calls expectations at {rel}", location=Location(str(path)),
                           hint="write the calls there or fix [verify.calls] expectations")
        return None
    text = path.read_text()
    spec = tomlfile.parse(text, path, "fix the calls file")
    lines = _call_lines(text)
    for n, call in enumerate(spec.get("call", [])):
        missing = [k for k in ("name", "function") if not call.get(k)]
        if missing:
            raise BadInput(f"call {n + 1} lacks {', '.join(missing)}",
                           location=Location(rel, lines[n] if n < len(lines) else None),
                           hint="every [[call]] needs a name and a function")
    return spec, rel, lines


def _request(ctx: VerifyContext, spec: dict[str, Any], stub_paths: list[str],
             added: dict[str, frozenset[int]]) -> dict[str, Any]:
    return {
        "tree_python": str(ctx.root / source_root(ctx)),
        "stub_paths": stub_paths,
        "touched": [str((ctx.root / rel).resolve()) for rel in ctx.touched if rel.endswith(".py")],
        "added": {str((ctx.root / rel).resolve()): sorted(lines) for rel, lines in added.items()},
        "imports": spec.get("imports", {}),
        "calls": [{k: v for k, v in call.items()} for call in spec.get("call", [])],
    }


def _payload(ctx: VerifyContext, request: dict[str, Any], stub_folder: Path | None, rel: str) -> dict[str, Any]:
    key = hashlib.sha256(json.dumps(
        [CACHE_VERSION, request, interpreter(ctx, NAME), probe_code(PROBE), folder_digest(stub_folder),
         python_names(ctx.root, source_root(ctx))], sort_keys=True).encode()).hexdigest()
    cache = DependencyCache(ctx.cache_dir, NAME, key)
    cached = cache.get(ctx.root)
    if cached is not None:
        return cached[0]
    payload = _probe(ctx, request, rel)
    if "rows" in payload:  # a probe that could not run read who knows what: computed again next time
        deps = [r for path in payload.get("deps", []) if (r := tree_relative(ctx, path)) is not None]
        cache.put(ctx.root, deps, [payload])
    return payload


def _probe(ctx: VerifyContext, request: dict[str, Any], rel: str) -> dict[str, Any]:
    from patchkit.checks._probe.runner import MARKER  # noqa: F401 - the probe prints the same marker

    try:
        return run_probe(ctx, NAME, PROBE, request, float(ctx.gate_config(NAME).get("timeout_s", 600)), rel)
    except BadInput as error:
        return {"import_error": error.message, "deps": []}


def run(ctx: VerifyContext) -> list[Finding]:
    loaded = load_calls(ctx)
    if loaded is None:
        return [Finding(gate=NAME, severity=Severity.INFO, file="", line=None,
                        message=f"no {DEFAULT_EXPECTATIONS} in the set: no calls declared")]
    spec, rel, lines = loaded
    stub_folder, findings = envs.stubs(ctx, NAME)
    added = added_lines(ctx.root, [t for t in ctx.touched if t.endswith(".py")], ctx.base_commit)
    request = _request(ctx, spec, [str(stub_folder)] if stub_folder else [], added)
    payload = _payload(ctx, request, stub_folder, rel)
    broken = uncompiled(ctx)  # a failure one of these explains is the compile gate's finding
    if "rows" not in payload:
        cause = caused_by(str(payload.get("import_error", "")), broken, ctx.root)
        if cause is not None:
            return [*findings, skipped(NAME, cause, f"every call of {rel} (its modules do not import)")]
        where = payload.get("raised_at")
        file, line = (tree_relative(ctx, where[0]), where[1]) if where else (rel, None)
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=file or rel, line=line,
                                message=f"the modules of {rel} do not import: "
                                f"{str(payload.get('import_error', '')).strip()[-600:]}",
                                hint="the imports gate names the failing import; fix it first"))
        return findings
    calls = spec.get("call", [])
    unchecked: dict[Uncompiled, list[str]] = {}
    for n, row in enumerate(payload["rows"]):
        call_line = lines[n] if n < len(lines) else None
        if not row["problems"]:
            findings.append(Finding(gate=NAME, severity=Severity.INFO, file=rel, line=call_line,
                                    message=f"call ok: {row['name']}"))
            continue
        cause = caused_by("\n".join(row["problems"]), broken, ctx.root)
        if cause is not None:
            unchecked.setdefault(cause, []).append(f"call {row['name']!r}")
            continue
        call = calls[n] if n < len(calls) else {}
        tokens = tokens_of(*row["problems"], call.get("raises") or "")
        passing = [line for other in payload["rows"] if not other["problems"] and other.get("function")
                   and other.get("function") == row.get("function") for line in other.get("executed", [])]
        traced = trace_back(ctx, row.get("executed", []), added, tokens, row.get("function"), row.get("raised_at"),
                            passing)
        file, line = traced if traced else (rel, call_line)
        where = f" (declared at {rel}:{call_line})" if traced else ""
        for problem in row["problems"]:
            findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=file, line=line,
                                    message=f"call {row['name']!r}: {problem}{where}",
                                    hint="fix the tree's code on this path "
                                    "(or the declared call, if the contract changed)"))
    return findings + [skipped(NAME, cause, what) for cause, what in unchecked.items()]


# ---------------------------------------------------------------------------------------------
# Examples: a self-contained fake runner (no sglang needed), evaluated by the current python.

_RUNNER = '''\
class Input:
    def __init__(self, custom_mask, width):
        self.custom_mask = custom_mask
        self.width = width


class Runner:
    def get_spec_info(self, num_tokens):
        if self.algorithm == "DDTREE":
            return Input(custom_mask=self.buffers.custom_mask, width=self.width)
        return None

    def replay(self, batch):
        if self.is_tree and batch.mode == "verify" and batch.spec_info.custom_mask is None:
            raise RuntimeError("DDTREE target verify requires the tree custom_mask")
        return "replayed"


def validate(req, algorithm="DFLASH"):
    if req.return_logprob:
        return f"{algorithm} does not support return_logprob"
    return None


def validate_tree(req):
    return validate(req, "DDTREE")


class Scheduler:
    def handle(self, req):
        if self.algorithm in ("DFLASH", "DDTREE"):
            error = (
                validate_tree(req)
                if self.algorithm == "DDTREE"
                else validate(req)
            )
            if error is not None:
                self.queue.append(error)
                return
        self.queue.append(None)
'''
_CALLS = '''\
[imports]
runner = "pkg.runner"

[[call]]
name = "capture carries the mask"
function = "runner.Runner.get_spec_info"
self = { algorithm = "'DDTREE'", "buffers.custom_mask" = "[True, False]", width = "9" }
args = ["4"]
expect = ["result.custom_mask is self.buffers.custom_mask", "result.width == 9"]

[[call]]
name = "replay refuses a verify batch without a mask"
function = "runner.Runner.replay"
self = { is_tree = "True" }
args = ["ns(mode='verify', spec_info=ns(custom_mask=None))"]
raises = "requires the tree custom_mask"

[[call]]
name = "a logprob request is refused"
function = "runner.validate"
args = ["ns(return_logprob=True)", "'DDTREE'"]
expect = ["result is not None and 'DDTREE' in result"]

[[call]]
name = "the scheduler refuses a DDTREE logprob request with DDTREE's message"
function = "runner.Scheduler.handle"
self = { algorithm = "'DDTREE'" }
args = ["ns(return_logprob=True)"]
expect = ["'DDTREE does not support' in self.queue.append.call_args.args[0]"]

[[call]]
name = "the scheduler refuses a DFLASH logprob request with DFLASH's message"
function = "runner.Scheduler.handle"
self = { algorithm = "'DFLASH'" }
args = ["ns(return_logprob=True)"]
expect = ["'DFLASH does not support' in self.queue.append.call_args.args[0]"]
'''


_CURRENT = {"interpreter": "current"}


def _example_tree(runner: str) -> dict[str, str]:
    return {"python/pkg/__init__.py": "", "python/pkg/runner.py": runner, "@set/expectations/calls.toml": _CALLS}


EXAMPLES = (
    Example(name="capture, replay and request gate behave", files=_example_tree(_RUNNER), passes=True,
            expect="call ok: capture carries the mask", config={"interpreter": "current"}),
    Example(name="capture without the tree mask", files=_example_tree(_RUNNER.replace(
        "Input(custom_mask=self.buffers.custom_mask,", "Input(custom_mask=None,")),
        passes=False, expect="`result.custom_mask is self.buffers.custom_mask` is false", config=_CURRENT),
    Example(name="replay guard checks the wrong mode",
            files=_example_tree(_RUNNER.replace('batch.mode == "verify"', 'batch.mode == "decode"')),
            passes=False, expect="expected an error containing 'requires the tree custom_mask'", config=_CURRENT),
    Example(name="request gate only warns", files=_example_tree(_RUNNER.replace(
        'return f"{algorithm} does not support return_logprob"',
        'print(f"{algorithm} does not support return_logprob")')),
        passes=False, expect="`result is not None and 'DDTREE' in result` is false", config={"interpreter": "current"}),
    Example(name="the scheduler sends DDTREE to DFLASH's validator", files=_example_tree(_RUNNER.replace(
        "                validate_tree(req)\n", "                validate(req)\n")),
        passes=False, expect="`'DDTREE does not support' in self.queue.append.call_args.args[0]` is false",
        config=_CURRENT),
)
