"""The backend gate: case evaluation against a self-contained fake ServerArgs (real subprocess,
the current interpreter), plus an opt-in run on a real patched tree with the isolated env."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.checks import backend
from patchkit.errors import BadInput
from patchkit.verify.api import Severity

CURRENT = {"verify": {"backend": {"interpreter": "current"}}}


def fake_tree(topk_line: str = "self.speculative_eagle_topk = 4", expectations: str | None = None) -> dict[str, str]:
    files = backend._example_tree(topk_line)
    if expectations is not None:
        files["@set/expectations/backend.toml"] = expectations
    return files


def errors(findings):
    return [f.message for f in findings if f.severity == Severity.ERROR]


def test_rows_report_resolution_and_the_generic_rule(make_ctx):
    evaluation = backend.evaluate(make_ctx(fake_tree(), CURRENT))
    results, rel = evaluation.results, evaluation.rel
    assert rel == "expectations/backend.toml"
    hopper = {r.name: r for r in results}["hopper"].values
    # the fake resolves the backend before the DDTREE block, like the real ordering trap
    assert (hopper["verify_backend"], hopper["speculative_eagle_topk"], hopper["tree_mask"]) == ("fa3", 4, True)
    assert hopper["topk_one_at_selection"] is True and hopper["topk_one_resolved"] is False
    assert hopper["generic_rule_at_selection"] == "fa3"
    assert all(r.ok for r in results)


def test_expectation_mismatch_and_unexpected_error(make_ctx):
    text = backend._EXPECT.replace('expect = { verify_backend = "triton", tree_mask = true }',
                                   'expect_error = "boom"')
    text = text.replace("verify_width = 9", "verify_width = 10")
    found = errors(backend.run(make_ctx(fake_tree(expectations=text), CURRENT)))
    assert "case hopper: verify_width: expected 10, got 9" in found
    findings = backend.run(make_ctx(fake_tree(expectations=text), CURRENT))
    lines = {f.line for f in findings if f.severity == Severity.ERROR and f.file == "expectations/backend.toml"}
    headers = {n for n, line in enumerate(text.splitlines(), 1) if line == "[[case]]"}
    assert len(headers) == 2 and lines == headers  # each finding points at its case
    traced = [f for f in findings if f.severity == Severity.ERROR and f.file == "python/sglang/srt/server_args.py"]
    assert traced and all("traces back to this added line" in f.message for f in traced)
    assert any(m.startswith("case ampere: expected an error containing 'boom', but ServerArgs resolved") for m in found)


def test_backend_missing_from_mask_table_is_a_finding(make_ctx):
    text = backend._EXPECT.replace('triton = "yes"\n', "")
    found = errors(backend.run(make_ctx(fake_tree(expectations=text), CURRENT)))
    assert "case ampere: backend 'triton' is not in the [tree_mask] table" in found


def test_rows_are_cached_by_the_content_of_the_files_the_probe_imported(make_ctx, monkeypatch):
    from patchkit.checks._probe import runner

    ctx = make_ctx(fake_tree(), CURRENT)
    first = backend.evaluate(ctx).results
    calls = []
    real_run = runner.proc.run
    monkeypatch.setattr(runner.proc, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    assert backend.evaluate(ctx).results == first and calls == []
    (ctx.root / "python/sglang/srt/unrelated.py").write_text("X = 1\n")  # a new module: any import may change
    assert backend.evaluate(ctx).results == first and len(calls) == 1
    calls.clear()
    server_args = ctx.root / "python/sglang/srt/server_args.py"
    server_args.write_text(server_args.read_text().replace("speculative_eagle_topk = 4", "speculative_eagle_topk = 1"))
    found = errors(backend.run(ctx))
    assert len(calls) == 1 and any("ignores the tree mask" in m for m in found)


def test_unknown_hardware_is_bad_input(make_ctx):
    text = backend._EXPECT.replace('hardware = "ampere"', 'hardware = "volta"')
    with pytest.raises(BadInput, match="unknown hardware 'volta'"):
        backend.run(make_ctx(fake_tree(expectations=text), CURRENT))


def test_import_failure_names_the_module(make_ctx):
    files = fake_tree()
    files["python/sglang/srt/server_args.py"] = "import not_a_module_anywhere\n"
    with pytest.raises(BadInput, match="could not run") as info:
        backend.run(make_ctx(files, CURRENT))
    assert info.value.location.file == "python/sglang/srt/server_args.py"


@pytest.mark.slow
def test_real_patched_tree_with_v1_expectations(tmp_path):
    """Needs a patched SGLang tree (PATCHKIT_TEST_TREE) and the isolated CPU interpreter
    (PATCHKIT_VERIFY_PYTHON): importing sglang's ServerArgs needs torch, transformers and more,
    ~10-20 s plus ~1 s per case, so it is opt-in; CI runs it through `patchkit verify`."""
    tree = os.environ.get("PATCHKIT_TEST_TREE")
    if not tree or not os.environ.get("PATCHKIT_VERIFY_PYTHON"):
        pytest.skip("set PATCHKIT_TEST_TREE and PATCHKIT_VERIFY_PYTHON to run against a real tree")
    from patchkit.verify.run import build_context

    set_dir = Path(__file__).resolve().parents[3] / "ddtree_patches" / "v1"
    ctx = build_context(set_dir, Path(tree))
    findings = backend.run(ctx)
    assert errors(findings) == []
    assert sum(f.severity == Severity.INFO for f in findings) >= 20


def test_flashinfer_on_an_mla_model_is_judged_as_flashinfer_mla():
    """The same flag builds FlashInferMLAAttnBackend for MLA models, which ignores the tree mask:
    a DDTREE row resolving to "flashinfer" on an MLA model must fail the tree-mask rule."""
    from patchkit.checks.backend import _check_case, _derive

    table = {"flashinfer": "yes", "flashinfer_mla": "no", "triton": "yes"}
    row = {"name": "mla", "speculative_algorithm": "DDTREE", "attention_backend": "flashinfer",
           "prefill_attention_backend": "flashinfer", "decode_attention_backend": "flashinfer",
           "speculative_eagle_topk": 64, "use_mla": True}
    values = _derive(row, table)
    assert values["verify_backend"] == "flashinfer_mla" and values["tree_mask"] is False
    case = {"expect_error": None, "expect": {}}
    assert any("ignores the tree mask" in p for p in _check_case(case, values, "DDTREE"))
    assert _derive({**row, "use_mla": False}, table)["tree_mask"] is True
