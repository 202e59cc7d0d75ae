"""The tests gate's impact selection: which set tests a change of the tree can affect, on real runs."""

from __future__ import annotations

from patchkit.checks import settests
from patchkit.checks._tests.impact import code_index
from patchkit.verify.api import Severity

ALGO = '''\
LIMIT = 10


def add(a, b):
    return a + b


def first(xs):
    return xs[0]
'''
FIND_TREE = "import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
TESTS = FIND_TREE + '''from pkg.algo import add, first


def test_add():
    assert add(2, 3) == 5


def test_first():
    assert first([7, 8]) == 7
'''
CURRENT = {"verify": {"tests": {"interpreter": "current"}}}


def info(findings):
    return [f.message for f in findings if f.severity == Severity.INFO and "passed" in f.message]


def errors(findings):
    return [(f.file, f.line, f.message) for f in findings if f.severity == Severity.ERROR]


def test_function_hashes_ignore_layout_and_comments_but_not_code():
    base = code_index(ALGO)
    moved = code_index("# a comment\n\n" + ALGO.replace("return a + b", "return a + b  # why"))
    changed = code_index(ALGO.replace("return a + b", "return a - b"))
    assert moved.hashes == base.hashes and moved.module == base.module
    assert changed.hashes["add"] != base.hashes["add"] and changed.hashes["first"] == base.hashes["first"]
    assert code_index(ALGO.replace("LIMIT = 10", "LIMIT = 11")).module != base.module


def test_only_the_test_that_ran_the_changed_function_runs_again(make_ctx):
    ctx = make_ctx({"python/pkg/__init__.py": "", "python/pkg/algo.py": ALGO, "@set/tests/test_algo.py": TESTS},
                   CURRENT)
    first_run = settests.run(ctx)
    assert info(first_run) == ["2 passed, 0 failed, 0 skipped"], first_run
    algo = ctx.root / "python/pkg/algo.py"
    sliced = ALGO.replace("return xs[0]", "return xs[:1][0]")  # only test_first runs first()
    algo.write_text(sliced)
    second = settests.run(ctx)
    assert info(second) == ["2 passed, 0 failed, 0 skipped (1 rerun, 1 reused: they ran no code that changed)"]
    algo.write_text(ALGO.replace("return xs[0]", "return xs[5]"))  # an IndexError in first()
    third = settests.run(ctx)
    # a failing run is never partly reused: every test runs, so the findings are those of a run without
    # the cache (the locator ranks lines with every test's spectrum)
    assert info(third) == ["1 passed, 1 failed, 0 skipped"]
    assert next(e[2].split(" failed")[0] for e in errors(third)) == "tests/test_algo.py::test_first"
    # the failure also names the added line it passed through
    assert ("python/pkg/algo.py", 9) in [(f, line) for f, line, _ in errors(third)]
    algo.write_text("# reworded\n" + sliced.replace("LIMIT = 10\n", "LIMIT = 10  # cap\n"))  # layout only
    fourth = settests.run(ctx)
    assert info(fourth) == ["2 passed, 0 failed, 0 skipped (0 rerun, 2 reused: they ran no code that changed)"]
    algo.write_text(ALGO.replace("LIMIT = 10", "LIMIT = 12"))  # module-level code: everything reruns
    assert info(settests.run(ctx)) == ["2 passed, 0 failed, 0 skipped"]


def test_impact_can_be_turned_off(make_ctx):
    config = {"verify": {"tests": {"interpreter": "current", "impact": False}}}
    ctx = make_ctx({"python/pkg/__init__.py": "", "python/pkg/algo.py": ALGO, "@set/tests/test_algo.py": TESTS}, config)
    settests.run(ctx)
    (ctx.root / "python/pkg/algo.py").write_text(ALGO.replace("return xs[0]", "return xs[1]"))
    assert info(settests.run(ctx)) == ["1 passed, 1 failed, 0 skipped"]


COMPUTE = '''\
def double(x):
    try:  # the fast path when it loads, else the plain one
        from pkg.fast import double_fast
    except Exception:
        return x + x
    return double_fast(x)
'''
FAST = "def double_fast(x):\n    return x * 2\n"
DOUBLE_TEST = FIND_TREE + "from pkg.compute import double\n\n\ndef test_double():\n    assert double(2) == 4\n"


def test_a_file_whose_import_failed_is_a_dependency_of_the_test_that_tried(make_ctx):
    """A test that passed while ``pkg.fast`` did not compile (it fell back) ran no code of that file;
    the file is still what its outcome depends on, so fixing it reruns the test (issue 37, point 1)."""
    files = {"python/pkg/__init__.py": "", "python/pkg/compute.py": COMPUTE,
             "python/pkg/fast.py": FAST.replace("(x):", "(x)"), "@set/tests/test_double.py": DOUBLE_TEST}
    ctx = make_ctx(files, CURRENT)
    assert info(settests.run(ctx)) == ["1 passed, 0 failed, 0 skipped"]  # fast.py does not compile: fallback
    (ctx.root / "python/pkg/fast.py").write_text(FAST.replace("x * 2", "x * 3"))  # compiles now, and is wrong
    second = settests.run(ctx)
    assert info(second) == ["0 passed, 1 failed, 0 skipped"], second
