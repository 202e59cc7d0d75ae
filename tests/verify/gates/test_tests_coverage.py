"""Added-line coverage and the Ochiai locator of the tests gate (checks/_tests/coverage.py): statements,
declarations (bad ones are exit 2 naming the manifest's line), and the CLI's --strict-coverage."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from patchkit.checks._tests.coverage import Counts, Declaration, Statements, declarations, ochiai, uncovered
from patchkit.cli import cli
from patchkit.errors import BadInput
from patchkit.testing.verify import applied_example

SOURCE = '''\
"""Module docstring: not code."""


def widths(args):
    """Docstring: not code."""
    # a comment: not code
    out = dict(
        budget=args.budget,
        topk=args.topk,
    )
    if out["budget"] > 4:
        return out
    return None
'''


def test_a_multi_line_statement_counts_once_by_its_first_line():
    table = Statements.of(SOURCE)
    assert table.owner[8] == table.owner[9] == table.owner[10] == 7  # the call's continuation lines
    assert 1 not in table.owner and 5 not in table.owner and 6 not in table.owner  # docstrings, comment
    assert table.spans["widths"] == (4, 13)
    added = {"m.py": frozenset(range(1, 14))}
    # the runner saw line 9 of the multi-line statement: the statement ran; `return out` did not
    groups, counts = uncovered(added, {"m.py": {4, 9, 11, 13}}, {"m.py": table}, [])
    assert (counts.total, counts.done, counts.gaps) == (5, 4, 0)
    assert [(g.file, g.lines, g.scope) for g in groups] == [("m.py", (12,), "widths")]
    declared = [Declaration("m.py", frozenset({12}), "GPU only", 3)]
    assert uncovered(added, {"m.py": {4, 9, 11, 13}}, {"m.py": table}, declared) == ([], Counts(5, 5, 0))
    gap = [Declaration("m.py", frozenset({12}), "no test yet", 3, "untested")]
    assert uncovered(added, {"m.py": {4, 9, 11, 13}}, {"m.py": table}, gap) == ([], Counts(5, 5, 1))


def test_ochiai_ranks_the_line_only_failing_tests_run_first():
    table = Statements.of(SOURCE)
    added = {"m.py": frozenset(range(1, 14))}
    buckets = {"t::fail": {"m.py": [4, 7, 11, 12]}, "t::pass": {"m.py": [4, 7, 11, 13]}}
    ranked = ochiai(buckets, {"t::fail"}, {"t::pass"}, added, {"m.py": table})
    assert ranked[0][1:] == ("m.py", 12) and ranked[0][0] == pytest.approx(1.0)
    assert {line for score, _f, line in ranked if score < 1} == {4, 7, 11}  # shared with the passing test


@pytest.mark.parametrize(("spec", "reason", "message"), [
    ("m.py:widths", "", "has no reason"),
    ("m.py:1", "GPU only", "line(s) the set does not add"),  # the docstring: added, but not code
    ("m.py:40-41", "GPU only", "line(s) the set does not add"),
    ("m.py:5-6", "GPU only", "line(s) the set does not add"),  # a docstring and a comment: no code
    ("m.py:nowhere", "GPU only", "defines no nowhere"),
    ("other.py:3", "GPU only", "adds no Python line to other.py"),
    ("m.py", "GPU only", "is not FILE:FUNCTION"),
])
def test_a_bad_declaration_names_the_manifest_line(tmp_path, spec, reason, message):
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(f'[set]\nname = "x"\n\n[verify.tests.unreachable]\n"{spec}" = "{reason}"\n')
    with pytest.raises(BadInput) as raised:
        declarations(manifest, {"unreachable": {spec: reason}}, {"m.py": frozenset(range(1, 14))},
                     {"m.py": Statements.of(SOURCE)})
    assert message in raised.value.message
    assert raised.value.location is not None and raised.value.location.line == 5


def test_a_line_range_may_span_blank_and_comment_lines(tmp_path):
    manifest = tmp_path / "manifest.toml"
    manifest.write_text('[verify.tests.unreachable]\n"m.py:5-9" = "GPU only"\n')
    added = {"m.py": frozenset(range(1, 14))}
    (declared,) = declarations(manifest, {"unreachable": {"m.py:5-9": "GPU only"}}, added,
                               {"m.py": Statements.of(SOURCE)})
    assert declared.lines == frozenset(range(5, 10)) and declared.manifest_line == 2
    base_line = {"m.py": frozenset(range(1, 14)) - {8}}  # line 8 of the range is the base's
    with pytest.raises(BadInput, match="does not add"):
        declarations(manifest, {"unreachable": {"m.py:5-9": "GPU only"}}, base_line, {"m.py": Statements.of(SOURCE)})


ALGO = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TEST = ("import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
        "from pkg.algo import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")


def _set(tmp_path, unreachable=None):
    extra = {"verify": {"tests": {"interpreter": "current", **({"unreachable": unreachable} if unreachable else {})}}}
    target, set_dir = applied_example(tmp_path, {"python/pkg/__init__.py": ""}, {"python/pkg/algo.py": ALGO}, extra)
    (set_dir / "tests").mkdir()
    (set_dir / "tests" / "test_algo.py").write_text(TEST)
    return target, set_dir


def _verify(target, set_dir, *extra):
    args = ["verify", "--set", str(set_dir), "--target", str(target), "--gate", "tests", "--json", *extra]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_strict_coverage_turns_the_warning_into_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("PATCHKIT_STRICT_COVERAGE", raising=False)
    target, set_dir = _set(tmp_path)
    loose = _verify(target, set_dir)
    assert loose.exit_code == 0, loose.output
    assert "in sub run in no set test" in loose.output
    strict = _verify(target, set_dir, "--strict-coverage")
    assert strict.exit_code == 1, strict.output
    findings = [f for g in json.loads(strict.stdout)["result"]["gates"] for f in g["findings"]]
    assert any(f["severity"] == "error" and f["file"] == "python/pkg/algo.py" and f["line"] == 6 for f in findings)
    assert "PATCHKIT_STRICT_COVERAGE" not in os.environ  # the flag is this command's, not the process's


def test_a_declaration_of_a_line_the_set_does_not_add_is_exit_2(tmp_path):
    target, set_dir = _set(tmp_path, {"python/pkg/algo.py:9": "GPU only"})
    done = _verify(target, set_dir)
    assert done.exit_code == 2, done.output
    line = next(n for n, text in enumerate((set_dir / "manifest.toml").read_text().splitlines(), 1)
                if text.startswith('"python/pkg/algo.py:9"'))
    assert f"manifest.toml:{line}" in done.output and "does not add" in done.output




SHARED = '''\
def norm(xs):
    total = sum(xs)
    return [x / total for x in xs]


def first(xs):
    ys = norm(xs)
    return ys[0]


def last(xs):
    ys = norm(xs)
    return ys[-1]
'''
SHARED_TESTS = ("import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
                "import pytest\nfrom pkg.algo import first, last, norm\n\n\n"
                "def test_first():\n    assert first([1, 3]) == 0.25\n\n\n"
                "def test_last():\n    assert last([1, 3]) == 0.75\n\n\n"
                "@pytest.mark.parametrize('n', [2, 3, 4, 5])\n"
                "def test_norm_sums_to_one(n):\n    assert sum(norm(list(range(1, n)))) == pytest.approx(1)\n")


def test_the_locator_puts_the_changed_line_first_though_passing_tests_run_it(make_ctx):
    from patchkit.checks import settests

    files = {"python/pkg/__init__.py": "", "python/pkg/algo.py": SHARED, "@set/tests/test_algo.py": SHARED_TESTS}
    ctx = make_ctx(files, {"verify": {"tests": {"interpreter": "current"}}})
    assert not [f for f in settests.run(ctx) if f.severity.value == "error"]
    # norm() now reverses: first() and last() fail, the sums still pass (the spectrum alone ranks the
    # lines of first() and last(), which only failing tests run, above norm()'s)
    (ctx.root / "python/pkg/algo.py").write_text(SHARED.replace("for x in xs]", "for x in reversed(xs)]"))
    located = [f for f in settests.run(ctx) if "likely cause" in f.message]
    # norm()'s two statements first (the change is in one of them; the function is what changed), then
    # the spectrum's own best, a line of first() or last()
    assert {(f.file, f.line) for f in located[:2]} == {("python/pkg/algo.py", 2), ("python/pkg/algo.py", 3)}
    for finding in located[:2]:
        assert "its function changed since the recorded run" in finding.message
        assert "runs in 2 of 2 failing and 4 of 4 passing test(s)" in finding.message
    assert located[2].line in (7, 8, 12, 13) and "changed" not in located[2].message
