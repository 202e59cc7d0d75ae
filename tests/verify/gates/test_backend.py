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


# ---------------------------------------------------------------------------------------------
# The trace-back to the line that produced a refused value


def _line_of(ctx, text: str) -> int:
    lines = (ctx.root / "python/sglang/srt/server_args.py").read_text().splitlines()
    numbers = [n for n, line in enumerate(lines, 1) if line.strip() == text]
    assert len(numbers) == 1, (text, numbers)
    return numbers[0]


def test_a_refused_value_an_added_default_produced_traces_back_to_that_default(make_ctx):
    """The set's DDTREE default returns 'fa3' (an added line); the base's own assignment stores it and the
    set's check refuses it: besides the case row and the check, a finding names the default's line."""
    ctx = make_ctx(backend.traced_example_tree("fa3"), CURRENT)
    findings = [f for f in backend.run(ctx) if f.severity == Severity.ERROR]
    default = _line_of(ctx, "return 'fa3'")
    assert default in backend.added_lines(ctx.root, ["python/sglang/srt/server_args.py"], ctx.base_commit)[
        "python/sglang/srt/server_args.py"]
    at_default = [f for f in findings if (f.file, f.line) == ("python/sglang/srt/server_args.py", default)]
    assert len(at_default) == 1
    assert at_default[0].message.startswith("backend case failure traces back to this added line: ddtree default: "
                                            "attention_backend = 'fa3' came from here; ServerArgs raised ValueError")
    assert any(f.file == "expectations/backend.toml" and "attention backend 'fa3'" in f.message for f in findings)
    result = backend.evaluate(ctx).results[0]
    assert result.produced == (("python/sglang/srt/server_args.py", default, "attention_backend = 'fa3'"),)


def test_a_refused_value_the_base_produced_traces_back_to_no_default(make_ctx):
    """The same refusal, but the base's default picks 'fa3' and the set adds only the check: the case
    fails, and no finding names the base's line or says where the value came from."""
    ctx = make_ctx(backend.traced_example_tree(None, base_default="fa3"), CURRENT)
    findings = [f for f in backend.run(ctx) if f.severity == Severity.ERROR]
    base_default = _line_of(ctx, "return 'fa3'")
    assert base_default not in backend.added_lines(ctx.root, ["python/sglang/srt/server_args.py"],
                                                   ctx.base_commit)["python/sglang/srt/server_args.py"]
    assert any(f.file == "expectations/backend.toml" and "attention backend 'fa3'" in f.message for f in findings)
    assert not any(f.line == base_default for f in findings if f.file == "python/sglang/srt/server_args.py")
    assert not any("came from here" in f.message for f in findings)
    assert backend.evaluate(ctx).results[0].produced == ()


def test_a_wrong_field_traces_back_to_the_added_line_that_set_it_and_only_that_field(make_ctx):
    """Any field the case checks: an expected topk the set's resolution overrides names the added line
    that set it; the added default whose 'triton' the case did not fail on is not named."""
    text = backend._TRACE_EXPECT + 'expect = { topk = 4 }\n'
    files = {**backend.traced_example_tree("triton"), "@set/expectations/backend.toml": text}
    ctx = make_ctx(files, CURRENT)
    result = backend.evaluate(ctx).results[0]
    assert result.problems == ("topk: expected 4, got 8",)
    topk = _line_of(ctx, "self.speculative_eagle_topk = 8")
    assert result.produced == (("python/sglang/srt/server_args.py", topk, "speculative_eagle_topk = 8"),)


def test_failed_values_are_the_refused_and_the_wrongly_resolved_ones():
    from patchkit.checks.backend import ANY_FIELD, BACKEND_FIELDS, _failed_values

    case = {"expect_error": None, "expect": {"backend": "triton"}}
    assert _failed_values(case, {"error": "ValueError: backend 'fa3' ignores the mask"}, "DDTREE") == {
        (ANY_FIELD, "fa3")}
    refused_as_declared = {**case, "expect_error": "ignores"}
    assert _failed_values(refused_as_declared, {"error": "ValueError: backend 'fa3' ignores"}, "DDTREE") == set()
    refused_otherwise = {**case, "expect_error": "page size"}
    assert _failed_values(refused_otherwise, {"error": "ValueError: backend 'fa3' x"}, "DDTREE") == {
        (ANY_FIELD, "fa3")}
    refused_for_another_reason = {**case, "expect_error": "tree mask", "args": {"attention_backend": "trtllm_mha"}}
    assert _failed_values(refused_for_another_reason, {"error": "ValueError: page size 64"}, "DDTREE") == {
        (ANY_FIELD, "trtllm_mha")}
    generated = {**refused_for_another_reason, "offending": "fa3"}
    assert _failed_values(generated, {"error": "ValueError: page size 64"}, "DDTREE") == {(ANY_FIELD, "fa3")}
    flag_naming = {**case, "expect_error_flag": "--decode-attention-backend", "generated": {"x": 1}}
    assert _failed_values(flag_naming, {"error": "ValueError: 'fa3' (--prefill-attention-backend)"}, "DDTREE") == set()
    resolved = {"attention_backend": "fa3", "verify_backend": "fa3", "tree_mask": False,
                "speculative_algorithm": "DDTREE", "speculative_eagle_topk": 1}
    assert _failed_values(case, resolved, "DDTREE") == {(f, "fa3") for f in BACKEND_FIELDS}
    other = {**resolved, "tree_mask": True, "other_tree_mask": False, "other_backend": "trtllm_mha"}
    assert _failed_values({**case, "expect": {}}, other, "DDTREE") == {(f, "trtllm_mha") for f in BACKEND_FIELDS}
    assert _failed_values({**case, "expect": {"topk": 4}}, {**other, "other_tree_mask": True}, "DDTREE") == {
        ("speculative_eagle_topk", "1")}


def test_provenance_follows_a_value_up_the_returns_to_the_line_that_made_it(tmp_path):
    """Probe-side: the origin of a stored value is the innermost traced ``return`` that produced that
    object, followed through multi-line statements of its callers; a literal stored directly originates
    at the store; a write from outside the traced files has no origin."""
    import importlib.util

    from patchkit.checks._probe.tracing import Provenance, lines_run

    source = tmp_path / "fake_args.py"
    source.write_text('''\
class Args:
    backend = None
    mode = None

    def _inner(self):
        return "fa" + "3"

    def _outer(self):
        return self._inner(
        )

    def resolve(self):
        self.backend = (
            self._outer()
        )
        self.mode = "decode"

    def overwrite_from_a_local(self):
        value = self._outer()
        self.backend = value
''')
    spec = importlib.util.spec_from_file_location("fake_args", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = {str(source)}
    provenance = Provenance(["backend", "mode"], files)
    with provenance.watching(module.Args), lines_run(files, provenance):
        args = module.Args()
        args.resolve()
    assert provenance.origins == {"backend": [str(source), 6, "fa3"], "mode": [str(source), 16, "decode"]}
    assert "__setattr__" not in module.Args.__dict__  # the hook is gone
    with provenance.watching(module.Args), lines_run(files, provenance):
        args.overwrite_from_a_local()  # through a local variable: the store's own line
    assert provenance.origins["backend"] == [str(source), 20, "fa3"]
    with provenance.watching(module.Args), lines_run(files, provenance):
        args.backend = "triton"  # from this test file: not traced
    assert provenance.origins["backend"] == [None, None, "triton"]


def test_a_cause_finder_never_crashes_on_a_touched_file_that_does_not_parse(make_ctx):
    """Issue 37, point 9: the class-level default finder parsed every added file and raised SyntaxError
    on one that does not compile, so the gate crashed (verify exit 3). The file is the compile gate's;
    the cause behind the failing case is still named."""
    from patchkit.verify.run import run_gate

    files = {**backend._CLASS_DEFAULT, "python/sglang/srt/broken.py": "def f(:\n    return 1\n"}
    run = run_gate("backend", lambda name: backend, make_ctx(files, CURRENT))
    assert run.status == "fail", run.traceback
    assert any("ddtree_backend = fa3 (a class-level default)" in f.message for f in run.findings)
    assert not any(f.file == "python/sglang/srt/broken.py" and f.severity == Severity.ERROR for f in run.findings)


def _tuple_tree(backends: str) -> dict[str, str]:
    """The set checks the backend against a constant it adds, then refuses fa3 with topk 8 for another
    reason (a page-size stand-in); the case expects fa3's tree-mask refusal."""
    files = backend._patched(
        backend.traced_example_tree("triton"),
        ("from dataclasses import dataclass\n",
         f"from dataclasses import dataclass\n\nDDTREE_TREE_MASK_BACKENDS = {backends}\n"),
        ('            if self.attention_backend not in ("flashinfer", "triton"):\n',
         "            if self.attention_backend not in DDTREE_TREE_MASK_BACKENDS:\n"),
        ("    def get_attention_backends(self):\n",
         "        if self.attention_backend == 'fa3':\n"
         "            raise ValueError('DDTREE needs a page size of 1 here')\n\n"
         "    def get_attention_backends(self):\n"))
    case = ('\n[[case]]\nname = "explicit fa3"\nhardware = "hopper"\ntarget = "tiny"\n'
            'expect_error = "does not apply the tree mask"\n'
            'args = { speculative_algorithm = "DDTREE", attention_backend = "fa3" }\n')
    return {**files, "@set/expectations/backend.toml": backend._TRACE_EXPECT + case}


def test_a_backend_let_through_by_a_constant_then_refused_otherwise_names_the_constant(make_ctx):
    """"fa3" joins the tuple of tree-mask backends: the case's tree-mask refusal never comes, a later
    check refuses fa3 for another reason. The value that refusal was for is the explicit backend, which
    the constant now holds: the finding is at "fa3" inside the tuple, where the edit is."""
    ctx = make_ctx(_tuple_tree('(\n    "flashinfer",\n    "triton",\n    "fa3",\n)'), CURRENT)
    findings = [f for f in backend.run(ctx) if f.severity == Severity.ERROR]
    at_fa3 = _line_of(ctx, '"fa3",')
    named = [f for f in findings if (f.file, f.line) == ("python/sglang/srt/server_args.py", at_fa3)]
    assert named and "DDTREE_TREE_MASK_BACKENDS (a constant the set adds) holds 'fa3'" in named[0].message, findings
    clean = make_ctx(_tuple_tree('(\n    "flashinfer",\n    "triton",\n)'), CURRENT)
    assert [f for f in backend.run(clean) if f.severity == Severity.ERROR] == []


def _bound_tree(bound: str) -> dict[str, str]:
    """The set refuses a DDTREE topk below 2 (an added raise under an added bound), before its own topk;
    the case expects that refusal for topk 1."""
    files = backend._patched(
        backend.traced_example_tree("triton"),
        ('        if self.speculative_algorithm == "DDTREE":\n            self.speculative_eagle_topk = 8\n',
         '        if self.speculative_algorithm == "DDTREE":\n'
         f"            if self.speculative_eagle_topk is not None and self.speculative_eagle_topk {bound}:\n"
         "                raise ValueError(\n"
         '                    "DDTREE needs a tree of at least 2 nodes "\n'
         '                    f"(--speculative-eagle-topk), got {self.speculative_eagle_topk}"\n'
         "                )\n"
         "            self.speculative_eagle_topk = 8\n"))
    case = ('\n[[case]]\nname = "topk 1 refused"\nhardware = "hopper"\ntarget = "tiny"\n'
            'expect_error = "DDTREE needs a tree of at least 2 nodes"\n'
            'args = { speculative_algorithm = "DDTREE", speculative_eagle_topk = 1 }\n')
    return {**files, "@set/expectations/backend.toml": backend._TRACE_EXPECT + case}


def test_a_refusal_that_never_came_names_the_condition_that_let_the_case_through(make_ctx):
    """`if topk < 1:` where `< 2` was meant: the case expecting the refusal resolves; of the added lines,
    the test guarding the raise whose message the case expects ran, the raise did not: it is named."""
    ctx = make_ctx(_bound_tree("< 1"), CURRENT)
    findings = [f for f in backend.run(ctx) if f.severity == Severity.ERROR]
    guard = _line_of(ctx, "if self.speculative_eagle_topk is not None and self.speculative_eagle_topk < 1:")
    named = [f for f in findings if (f.file, f.line) == ("python/sglang/srt/server_args.py", guard)]
    assert named and "this condition ran and let the case through" in named[0].message, findings
    in_tree = [f for f in findings if f.file == "python/sglang/srt/server_args.py"]
    assert in_tree == named  # one finding per cause: not also the last added line that ran
    clean = make_ctx(_bound_tree("< 2"), CURRENT)
    assert [f for f in backend.run(clean) if f.severity == Severity.ERROR] == []
