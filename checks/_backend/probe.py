"""Resolve the target tree's own ``ServerArgs`` for a list of cases; run by the backend gate.

Runs in the isolated CPU interpreter, NOT in patchkit's environment: standard library only, plus
the target tree. Reads a JSON request on stdin::

    {"tree_python": "<tree>/python", "module": "sglang.srt.server_args",
     "probes": ["is_hopper_with_cuda_12_3", ...],
     "cases": [{"name", "probes_on": [...], "flashinfer": bool, "target": {config.json},
                "draft": {config.json} | null, "args": {ServerArgs kwargs}}]}

and writes one JSON row per case on stdout (after a marker line, so that log noise on stdout
cannot corrupt the result). Each row holds the resolved fields or the error text, plus what
``is_no_spec_infer_or_topk_one`` says and what the generic (pre-DDTREE) backend rule picks.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import sys
import tempfile
import traceback
import warnings

MARKER = "=== patchkit backend probe rows ==="
FIELDS = (
    "attention_backend", "prefill_attention_backend", "decode_attention_backend",
    "speculative_algorithm", "speculative_eagle_topk", "speculative_num_steps",
    "speculative_num_draft_tokens", "speculative_dflash_block_size", "disable_overlap_schedule",
    "page_size", "max_running_requests", "enable_mixed_chunk", "speculative_attention_mode", "tp_size",
)


def _write_config(root: str, name: str, config: dict) -> str:
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def _platform(probes: list[str], on: set[str], flashinfer: bool):
    """SGLang 0.5.23+ reads the machine through ``runtime_context.get_platform()``: a scoped
    ``override_platform`` of its facts (each named after the utils probe it calls), a CUDA machine
    with exactly the ``on`` probes true. Older trees have no such context: nothing to override."""
    try:
        from sglang.srt import runtime_context
    except Exception:  # noqa: BLE001 - an older tree
        return contextlib.nullcontext()
    override = getattr(runtime_context, "override_platform", None)
    table = getattr(runtime_context, "_PLATFORM_PROBES", None)
    if override is None or not isinstance(table, dict):
        return contextlib.nullcontext()
    facts = {fact: probe in on for fact, probe in table.items()}
    facts.update(is_cuda=True, has_flashinfer=flashinfer)
    if "is_sm100_or_sm110" in facts:
        facts["is_sm100_or_sm110"] = facts.get("is_sm100", False) or facts.get("is_sm110", False)
    return override(**facts)


@contextlib.contextmanager
def _hardware(module, probes: list[str], on: set[str], flashinfer: bool):
    """Monkeypatch the hardware probes imported into the server_args module (and, on trees with
    a platform context, override its facts)."""
    names = [p for p in probes if hasattr(module, p)] + ["is_flashinfer_available"]
    saved = {name: getattr(module, name) for name in names if hasattr(module, name)}
    for name in names:
        value = flashinfer if name == "is_flashinfer_available" else name in on
        setattr(module, name, (lambda v: (lambda *a, **k: v))(value))
    try:
        with _platform(probes, on, flashinfer):
            yield
    finally:
        for name, fn in saved.items():
            setattr(module, name, fn)


class _GenericView:
    """SGLang 0.5.23+: a stand-in record for the generic rule, reading the resolved record except
    for the topk and page size under test (msgspec ServerArgs refuse even object.__setattr__)."""

    _resolved_overrides = ()

    def __init__(self, args, topk, page_size):
        self._args, self.speculative_eagle_topk, self.page_size = args, topk, page_size

    def __getattr__(self, name):
        return getattr(self._args, name)


def _generic_rule_pipeline(args, topk, page_size):
    """The base default rule of a tree whose backend default lives in arg_groups/ (0.5.23+),
    with the set's DDTREE branch (``is_ddtree_requested``) switched off."""
    from sglang.srt.arg_groups import model_override_base as base

    saved = getattr(base, "is_ddtree_requested", None)
    if saved is not None:
        base.is_ddtree_requested = lambda cfg: False
    try:
        return base.get_default_attn_backend(_GenericView(args, topk, page_size), base.use_mla_backend(args),
                                             base.model_config_of(args))
    except Exception as exc:  # noqa: BLE001 - report, do not fail the row
        return f"error: {type(exc).__name__}: {exc}"
    finally:
        if saved is not None:
            base.is_ddtree_requested = saved


def _generic_rule(module, args, topk, page_size):
    """The backend the generic (base) default rule picks for ``args`` with the given topk and page
    size, i.e. ignoring any DDTREE-specific default the tree may add."""
    if not hasattr(args, "_get_default_attn_backend"):
        return _generic_rule_pipeline(args, topk, page_size)
    probe = copy.copy(args)
    # SGLang 0.5.17 seals a resolved ServerArgs against attribute writes; the probe is a throwaway copy.
    object.__setattr__(probe, "speculative_eagle_topk", topk)
    object.__setattr__(probe, "page_size", page_size)
    if hasattr(type(probe), "_is_ddtree_requested"):
        object.__setattr__(probe, "_is_ddtree_requested", lambda: False)
    try:
        return probe._get_default_attn_backend(probe.use_mla_backend(), probe.get_model_config())
    except Exception as exc:  # noqa: BLE001 - report, do not fail the row
        return f"error: {type(exc).__name__}: {exc}"


def _topk_one(module, topk, page_size):
    fn = getattr(module, "is_no_spec_infer_or_topk_one", None)
    if fn is None:  # 0.5.23+: no longer imported into server_args
        with contextlib.suppress(Exception):
            from sglang.srt.utils.common import is_no_spec_infer_or_topk_one as fn
    if fn is None:
        return None
    holder = type("Args", (), {"speculative_eagle_topk": topk, "page_size": page_size})()
    return bool(fn(holder))


def _resolve(module, case: dict, workdir: str) -> dict:
    row = {"name": case["name"]}
    kwargs = dict(case.get("args", {}))
    kwargs.setdefault("device", "cuda")
    kwargs.setdefault("skip_tokenizer_init", True)
    kwargs["model_path"] = _write_config(workdir, case["name"] + "-target", case["target"])
    if case.get("draft") is not None:
        kwargs["speculative_draft_model_path"] = _write_config(workdir, case["name"] + "-draft", case["draft"])
    user_topk, user_page = kwargs.get("speculative_eagle_topk"), kwargs.get("page_size")
    with _hardware(module, case["probes"], set(case["probes_on"]), case["flashinfer"]):
        try:
            args = module.ServerArgs(**kwargs)
            if hasattr(args, "resolve_once"):  # 0.5.23+: construction leaves the record unresolved
                args.resolve_once()
        except Exception as exc:  # the error text is the result of a refused case
            row["error"] = f"{type(exc).__name__}: {exc}"
            return row
        source = args
        with contextlib.suppress(Exception):  # 0.5.23+: resolved values are declarations over the record
            from sglang.srt.arg_groups.overrides import resolved_view
            source = resolved_view(args)
        for field in FIELDS:
            row[field] = getattr(source, field, None)
        if hasattr(args, "get_attention_backends"):
            row["prefill_attention_backend"], row["decode_attention_backend"] = args.get_attention_backends()
        else:  # 0.5.23+: the resolution helpers live in arg_groups/
            with contextlib.suppress(Exception):
                from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view
                row["prefill_attention_backend"], row["decode_attention_backend"] = attention_backends_of(
                    resolved_view(args))
        try:  # "flashinfer" on an MLA model builds FlashInferMLAAttnBackend, which has no tree mask
            if hasattr(args, "use_mla_backend"):
                row["use_mla"] = bool(args.use_mla_backend())
            else:
                from sglang.srt.arg_groups.model_override_base import use_mla_backend
                row["use_mla"] = bool(use_mla_backend(args))
        except Exception:  # noqa: BLE001 - an older tree without the method
            row["use_mla"] = None
        row["topk_one_at_selection"] = _topk_one(module, user_topk, user_page)
        row["topk_one_resolved"] = _topk_one(module, row["speculative_eagle_topk"], row["page_size"])
        row["generic_rule_at_selection"] = _generic_rule(module, args, user_topk, user_page)
        row["generic_rule_resolved"] = _generic_rule(module, args, row["speculative_eagle_topk"], row["page_size"])
    return row


def main() -> int:
    request = json.load(sys.stdin)
    sys.path.insert(0, request["tree_python"])
    # Declared stub packages ([verify.env.stubs]) come right after the tree, before site-packages.
    for offset, extra in enumerate(request.get("stub_paths", [])):
        sys.path.insert(1 + offset, extra)
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    try:
        module = __import__(request["module"], fromlist=["ServerArgs"])
    except Exception:  # noqa: BLE001
        print(MARKER)
        print(json.dumps({"import_error": traceback.format_exc(limit=5)}))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="patchkit-backend-") as workdir:
        for case in request["cases"]:
            case.setdefault("probes", request["probes"])
            rows.append(_resolve(module, case, workdir))
    print(MARKER)
    print(json.dumps({"rows": rows}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
