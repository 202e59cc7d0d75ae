"""Added-line coverage and the Ochiai locator of the tests gate (checks/_tests/coverage.py): statements,
declarations (a stale one is a finding at the manifest's line, naming the nearest match), and the CLI's
--strict-coverage."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from click.testing import CliRunner

from patchkit.checks._tests.coverage import Counts, Declaration, Statements, declarations, ochiai, uncovered
from patchkit.cli import cli
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


@pytest.mark.parametrize(("spec", "reason", "message", "hint"), [
    ("m.py:widths", "", "has no reason", "say why"),
    ("m.py:1", "GPU only", "names lines by number", "declare by name"),  # the docstring: added, but not code
    ("m.py:12", "GPU only", "names lines by number", '"m.py:widths:return out"'),
    ("m.py:7-13", "GPU only", "names lines by number", '"m.py:widths"'),
    ("m.py:widht", "GPU only", "names no function or class of m.py", "the nearest name is m.py:widths"),
    ("m.py:widths:return outs", "GPU only", "matches no statement", "'return out'"),
    ("mm.py:widths", "GPU only", "names a file the set adds no Python line to", "the nearest file the set touches is "
     "m.py"),
    ("m.py", "GPU only", "is not FILE:FUNCTION", "write e.g."),
])
def test_a_bad_declaration_is_a_problem_at_the_manifest_line_with_the_nearest_name(tmp_path, spec, reason, message,
                                                                                    hint):
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(f'[set]\nname = "x"\n\n[verify.tests.unreachable]\n"{spec}" = "{reason}"\n')
    declared, (problem,) = declarations(manifest, {"unreachable": {spec: reason}}, {"m.py": frozenset(range(1, 14))},
                                        {"m.py": Statements.of(SOURCE)})
    assert declared == []
    assert message in problem.message and hint in problem.hint, problem
    assert problem.manifest_line == 5


def test_a_declaration_by_name_moves_with_the_code(tmp_path):
    manifest = tmp_path / "manifest.toml"
    specs = {"m.py:widths:return out": "GPU only", "m.py::def widths": "the whole function, from the module"}
    manifest.write_text("[verify.tests.unreachable]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in specs.items()))
    shifted = SOURCE.replace("    out = dict(", "    # a comment added above\n\n    out = dict(")
    for source, offset in ((SOURCE, 0), (shifted, 2)):
        table = Statements.of(source)
        added = {"m.py": frozenset(range(1, len(table.text) + 1))}
        (statement, whole), problems = declarations(manifest, {"unreachable": specs}, added, {"m.py": table})
        assert problems == []
        assert statement.lines == {12 + offset} and statement.manifest_line == 2
        assert whole.lines == set(range(4, 14 + offset))


def test_a_declaration_of_a_file_that_does_not_parse_waits_for_the_compile_gate(tmp_path):
    manifest = tmp_path / "manifest.toml"
    manifest.write_text('[verify.tests.unreachable]\n"m.py:gone" = "GPU only"\n')
    assert declarations(manifest, {"unreachable": {"m.py:gone": "GPU only"}}, {"m.py": frozenset({1})}, {}) == ([], [])


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


def _manifest_line(set_dir, key):
    return next(n for n, text in enumerate((set_dir / "manifest.toml").read_text().splitlines(), 1)
                if text.startswith(f'"{key}"'))


def test_a_stale_declaration_is_a_tests_finding_and_the_other_gates_still_run(tmp_path):
    target, set_dir = _set(tmp_path, {"python/pkg/algo.py:subb": "GPU only"})
    done = _verify(target, set_dir, "--gate", "compile")
    assert done.exit_code == 1, done.output
    gates = {g["gate"]: g for g in json.loads(done.stdout)["result"]["gates"]}
    assert gates["compile"]["status"] == "pass"
    (stale,) = [f for f in gates["tests"]["findings"] if f["severity"] == "error"]
    assert stale["file"].endswith("manifest.toml")
    assert stale["line"] == _manifest_line(set_dir, "python/pkg/algo.py:subb")
    assert "python/pkg/algo.py:subb" in stale["message"] and "python/pkg/algo.py:sub" in stale["hint"]


def test_a_file_that_does_not_compile_is_the_compile_gates_error_at_its_line(tmp_path):
    broken = ALGO.replace("return a - b", "return (a - b")
    extra = {"verify": {"tests": {"interpreter": "current", "unreachable": {"python/pkg/algo.py:sub": "GPU only",
                                                                           "python/pkg/algo.py:4": "GPU only"}}}}
    target, set_dir = applied_example(tmp_path, {"python/pkg/__init__.py": ""}, {"python/pkg/algo.py": broken}, extra)
    (set_dir / "tests").mkdir()
    (set_dir / "tests" / "test_algo.py").write_text(TEST)
    done = CliRunner().invoke(cli, ["verify", "--set", str(set_dir), "--target", str(target), "--json"],
                              catch_exceptions=False)
    assert done.exit_code == 1, done.output
    gates = {g["gate"]: g for g in json.loads(done.stdout)["result"]["gates"]}
    assert {g["status"] for g in gates.values()} <= {"pass", "fail"}  # nothing crashed
    (error,) = [f for f in gates["compile"]["findings"] if f["severity"] == "error"]
    assert (error["file"], error["line"]) == ("python/pkg/algo.py", 6)
    # the declarations of the file that does not parse are not judged until it does
    assert not [f for f in gates["tests"]["findings"] if f["file"].endswith("manifest.toml")]


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


def test_the_locator_puts_the_changed_line_first_though_passing_tests_run_it(make_ctx, tmp_path):
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
        assert "its function has uncommitted edits" in finding.message
        assert "every failing test runs this added line, and 4 of the 4 passing tests do too" in finding.message
        assert "Ochiai" not in finding.message  # said in words (issue 37, point 4)
    assert located[2].line in (7, 8, 12, 13) and "uncommitted" not in located[2].message
    # the ranking is a fact of the tree, not of the recorded run: without any cache, the same findings
    afresh = [f for f in settests.run(dataclasses.replace(ctx, cache_dir=tmp_path / "empty")) if "likely" in f.message]
    assert afresh == located


def test_a_declaration_of_code_the_tests_run_is_a_warning_to_remove_it(tmp_path):
    target, set_dir = _set(tmp_path, {"python/pkg/algo.py:add": "GPU only", "python/pkg/algo.py:sub": "GPU only"})
    done = _verify(target, set_dir)
    assert done.exit_code == 0, done.output
    findings = [f for g in json.loads(done.stdout)["result"]["gates"] for f in g["findings"]
                if f["severity"] == "warning"]
    (stale,) = findings  # add() runs in test_add; sub() runs in no test, so its declaration holds
    assert stale["line"] == _manifest_line(set_dir, "python/pkg/algo.py:add")
    assert "covers only code the set tests ran" in stale["message"]


COMMIT = '''\
from types import SimpleNamespace


def commit(lengths):
    steps = len(lengths)
    total = sum(lengths)
    first = lengths[0]
    last = lengths[-1]
    commit_lens = [n for n in lengths]
    return SimpleNamespace(steps=steps, total=total, first=first, last=last, commit_lens=commit_lens)
'''
COMMIT_TESTS = ("import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
                "from pkg.algo import commit\n\n\n"
                "def test_each_request_commits_its_bonus_token():\n    out = commit([1, 2])\n"
                "    assert out.commit_lens == [2, 3]\n\n\n"
                "def test_a_longer_batch_too():\n    lengths = [3, 1, 4]\n"
                "    assert commit(lengths).commit_lens == [n + 1 for n in lengths]\n\n\n"
                "def test_the_steps_are_the_requests():\n    assert commit([1, 2]).steps == 2\n")


def test_of_equally_suspect_lines_the_locator_puts_those_naming_what_failed_first(make_ctx):
    """Every statement of commit() runs in the failing tests and in the passing one (the spectrum ties
    them all); both failing assertions check `commit_lens`, one also `lengths`, which the function's
    first statements read: the statement assigning `commit_lens` comes first, then the return naming
    it, on a tree without uncommitted edits (the defect is in the patch)."""
    from patchkit.checks import settests

    files = {"python/pkg/__init__.py": "", "python/pkg/algo.py": COMMIT, "@set/tests/test_algo.py": COMMIT_TESTS}
    ctx = make_ctx(files, {"verify": {"tests": {"interpreter": "current"}}})
    located = [f for f in settests.run(ctx) if "likely cause" in f.message]
    source = COMMIT.splitlines()
    assert [source[f.line - 1].strip() for f in located[:2]] == [
        "commit_lens = [n for n in lengths]",
        "return SimpleNamespace(steps=steps, total=total, first=first, last=last, commit_lens=commit_lens)"]
    assert not any("uncommitted" in f.message for f in located)


CUT = '''\
def cut(xs, n):
    if n < 1:
        raise ValueError("nothing to keep")
    if n >= len(xs) - 1:
        return xs
    return xs[:n]
'''
CUT_TESTS = ("import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
             "import pytest\nfrom pkg.algo import cut\n\n\n"
             "def test_a_cut_to_the_whole_list_is_the_list():\n    xs = [1, 2, 3]\n    assert cut(xs, 3) is xs\n\n\n"
             "def test_a_cut_to_two():\n    assert cut([1, 2, 3], 2) == [1, 2]\n\n\n"
             "def test_a_cut_to_one():\n    assert cut([1, 2, 3], 1) == [1]\n\n\n"
             "def test_nothing_is_refused():\n    with pytest.raises(ValueError):\n        cut([1], 0)\n")


def test_a_branch_the_failing_tests_take_points_at_its_condition(make_ctx):
    """`if n >= len(xs) - 1:` where `n == len(xs)` was meant: every cut test runs the condition, the
    failing one takes its branch (`return xs`) with one passing test; the condition is named first, before
    the branch it decided, on a tree without uncommitted edits."""
    from patchkit.checks import settests

    files = {"python/pkg/__init__.py": "", "python/pkg/algo.py": CUT, "@set/tests/test_algo.py": CUT_TESTS}
    ctx = make_ctx(files, {"verify": {"tests": {"interpreter": "current"}}})
    located = [f for f in settests.run(ctx) if "likely cause" in f.message]
    source = CUT.splitlines()
    assert [source[f.line - 1].strip() for f in located[:2]] == ["if n >= len(xs) - 1:", "return xs"]
    assert "it decides whether the branch at line 5 runs" in located[0].message
