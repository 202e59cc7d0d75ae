"""The dispatch gate on small real trees: site identity, declarations, skeleton generation."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from patchkit.checks import dispatch
from patchkit.errors import BadInput
from patchkit.verify.api import Severity

RUNNER = "python/sglang/srt/model_executor/runner.py"
SRC = '''\
class Runner:
    def init(self, algo, server_args):
        if algo.is_dflash_family() and not self.draft:  # DFlash family
            self.capture = True
        x = algo.is_eagle() or algo.is_standalone()
        if server_args.speculative_algorithm in ("EAGLE", "EAGLE3"):
            pass
        assert server_args.speculative_algorithm != "NGRAM"
        return algo == SpeculativeAlgorithm.NONE
'''


def errors(findings):
    return [f for f in findings if f.severity == Severity.ERROR]


def test_sites_are_whole_conditions_with_qualified_scope(make_ctx):
    sites = dispatch.collect_sites(make_ctx({RUNNER: SRC}))
    assert [(s.scope, s.expr, s.line) for s in sites] == [
        ("Runner.init", "algo.is_dflash_family()and not self.draft", 3),
        ("Runner.init", "algo.is_eagle()or algo.is_standalone()", 5),
        ("Runner.init", 'server_args.speculative_algorithm in("EAGLE","EAGLE3")', 6),
        ("Runner.init", 'server_args.speculative_algorithm != "NGRAM"', 8),
        ("Runner.init", "algo == SpeculativeAlgorithm.NONE", 9),
    ]
    assert sites[1].primitives == ("is_eagle()", "is_standalone()")


def test_site_identity_survives_line_shifts_and_reformatting(make_ctx):
    before = {s.key for s in dispatch.collect_sites(make_ctx({RUNNER: SRC}))}
    shifted = "# a new header comment\n\n" + SRC.replace(
        "x = algo.is_eagle() or algo.is_standalone()",
        "x = (\n            algo.is_eagle()  # why\n            or algo.is_standalone()\n        )",
    )
    after = dispatch.collect_sites(make_ctx({RUNNER: shifted}))
    assert {s.key for s in after} == before
    assert after[0].line == 5


def test_identical_expressions_get_occurrence_indexes(make_ctx):
    src = "def f(a):\n    if a.is_eagle():\n        pass\n    if a.is_eagle():\n        pass\n"
    sites = dispatch.collect_sites(make_ctx({"python/m.py": src}))
    assert [s.occurrence for s in sites] == [0, 1]


def test_skeleton_round_trip_keeps_reviews_and_leaves_new_sites_failing(make_ctx, tmp_path):
    ctx = make_ctx({RUNNER: SRC})
    update = dispatch.write_declarations(ctx)
    assert (update.kept, update.added) == (0, 5)
    data = tomllib.loads(dispatch.declarations_path(ctx).read_text())
    assert [d["treatment"] for d in data["site"]] == [""] * 5
    # still failing: generated entries must be reviewed
    assert any("lacks treatment" in f.message for f in errors(dispatch.run(ctx)))
    text = dispatch.declarations_path(ctx).read_text()
    text = text.replace('treatment = ""', 'treatment = "not_applicable"').replace('reason = ""', 'reason = "r"')
    dispatch.declarations_path(ctx).write_text(text)
    assert errors(dispatch.run(ctx)) == []
    again = dispatch.write_declarations(ctx)
    assert (again.kept, again.added, again.dropped) == (5, 0, ())


def test_handled_site_must_mention_ddtree(make_ctx):
    ctx = make_ctx({RUNNER: SRC})
    dispatch.write_declarations(ctx)
    path = dispatch.declarations_path(ctx)
    path.write_text(path.read_text().replace('treatment = ""', 'treatment = "handled"').replace('reason = ""', 'reason = "r"'))
    found = errors(dispatch.run(ctx))
    # only the is_dflash_family() site is covered; four other "handled" claims are false
    assert len(found) == 4 and all("does not mention DDTREE" in f.message for f in found)
    assert {f.line for f in found} == {5, 6, 8, 9}


def test_custom_covering_helpers(make_ctx):
    ctx = make_ctx({RUNNER: SRC}, {"verify": {"dispatch": {"covers": ["is_eagle"]}}})
    dispatch.write_declarations(ctx)
    path = dispatch.declarations_path(ctx)
    path.write_text(path.read_text().replace('treatment = ""', 'treatment = "handled"').replace('reason = ""', 'reason = "r"'))
    assert {f.line for f in errors(dispatch.run(ctx))} == {3, 6, 8, 9}


def test_bad_treatment_and_duplicates_are_findings(make_ctx):
    decl = ('[[site]]\nfile = "python/m.py"\nscope = "f"\nexpr = "a.is_eagle()"\ntreatment = "maybe"\nreason = "r"\n'
            '\n[[site]]\nfile = "python/m.py"\nscope = "f"\nexpr = "a.is_eagle()"\ntreatment = "handled"\nreason = "r"\n')
    ctx = make_ctx({"python/m.py": "def f(a):\n    return a.is_eagle()\n", "@set/expectations/dispatch.toml": decl})
    messages = [f.message for f in errors(dispatch.run(ctx))]
    assert any("'maybe' is not one of" in m and "line 1" in m for m in messages)


def test_invalid_toml_is_bad_input_with_location(make_ctx):
    ctx = make_ctx({"python/m.py": "x = 1\n", "@set/expectations/dispatch.toml": "[[site]\n"})
    with pytest.raises(BadInput) as info:
        dispatch.run(ctx)
    assert info.value.location.line == 1 and "dispatch.toml" in info.value.location.file


@pytest.mark.parametrize("set_name", ["v1", "v2", "v3"])
def test_shipped_declarations_are_all_reviewed(set_name):
    """Every site a shipped set declares carries a treatment and a reason: a skeleton written over a
    reviewed file (empty treatments) is caught here in seconds, not by the slow clean-tree run."""
    path = Path(__file__).resolve().parents[3] / "ddtree_patches" / set_name / "expectations" / "dispatch.toml"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    declarations, problems = dispatch.load_declarations(path)
    assert problems == [] and len(declarations) > 50


def _chain_example(name: str):
    return next(e for e in dispatch.EXAMPLES if e.name == name)


def test_a_wrong_family_helper_over_several_lines_fails_at_the_deciding_operand(make_ctx):
    """The disjunct that admits a member the helper must not cover is the line reported, not `return (`."""
    bad = _chain_example("a family helper's disjunct admits DDTREE")
    findings = errors(dispatch.run(make_ctx(bad.files, {"verify": {"dispatch": bad.config}})))
    source = bad.files[dispatch._SPEC].splitlines()
    (finding,) = [f for f in findings if "is_chain_verified()" in f.message]
    assert source[finding.line - 1].strip() == "or self.is_ddtree()"
    good = _chain_example("a family helper over several lines covers what it declares")
    assert errors(dispatch.run(make_ctx(good.files, {"verify": {"dispatch": good.config}}))) == []


def test_a_family_helper_that_misses_a_member_fails_at_its_return_line(make_ctx):
    """No single operand is wrong when an `or` misses a member: the return line is reported."""
    good = _chain_example("a family helper over several lines covers what it declares")
    files = {**good.files, dispatch._SPEC: good.files[dispatch._SPEC].replace("and not self.is_ddtree()",
                                                                             "or self.is_dflash()")}
    config = {"families": {"is_chain_verified": ["DFLASH", "DDTREE"]}}
    findings = errors(dispatch.run(make_ctx(files, {"verify": {"dispatch": config}})))
    source = files[dispatch._SPEC].splitlines()
    (finding,) = [f for f in findings if "is_chain_verified()" in f.message]
    assert "misses DDTREE" in finding.message and source[finding.line - 1].strip() == "return ("


def test_a_site_edited_into_its_twin_is_the_one_reported(make_ctx):
    """`if self.is_ddtree():` edited into the `if self.is_dflash():` of the next branch: the edited line is
    the undeclared site (occurrence numbers alone would blame the unchanged twin below it)."""
    bad = _chain_example("a handled site copies the next branch's test")
    findings = errors(dispatch.run(make_ctx(bad.files)))
    source = bad.files[dispatch._SPEC].splitlines()
    assert [(source[f.line - 1].strip(), "replaces the declared `self.is_ddtree()`" in f.message)
            for f in findings] == [("if self.is_dflash():", True)]
    assert source.index("        if self.is_dflash():") + 1 == findings[0].line  # the first of the twins


def test_a_copied_branch_is_reported_at_the_branch_written_for_ddtree(make_ctx):
    """`validate_tree(req) if self.is_ddtree() else validate_chain(req)` with the first arm copied from
    the second: the test decides nothing; the DDTREE arm is the line reported."""
    bad = _chain_example("the tree branch copies the chain branch")
    findings = errors(dispatch.run(make_ctx(bad.files)))
    source = bad.files[dispatch._SPEC].splitlines()
    assert [source[f.line - 1].strip() for f in findings] == ["validate_chain(req)"]
    assert findings[0].line < source.index("            else validate_chain(req)") + 1
    good = _chain_example("the tree branch validates the tree")
    assert errors(dispatch.run(make_ctx(good.files))) == []
