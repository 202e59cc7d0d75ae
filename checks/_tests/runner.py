"""Run the set's tests with pytest; run by the tests gate in the chosen interpreter (stdlib + pytest).

    python runner.py OUT.json TREE_ROOT [pytest args...]

Writes every failure (with its traceback locations), the counts, each test's own outcome, and, with
``PATCHKIT_TRACE_DEPS=1``, which code of the tree each test ran: the tests gate reruns a test only when
code it ran has changed. Code is recorded per *bucket*: a test (setup, call, teardown), a fixture wider
than a function (set up once and shared by the tests that request it), or ``<global>`` (collection,
imports). A test that starts a subprocess is marked ``opaque``: its children's code is not seen. Every
tree file a bucket's imports located counts as its module-level code, whether the import worked or
not: a file that does not compile (or raises at import) runs no code, yet the test's outcome depends
on it, and its fix must rerun the test.

With ``PATCHKIT_COVER_FILES`` (absolute paths, ``os.pathsep``-separated: the files the series touches),
the lines of those files that run are recorded per bucket too: the tests gate's added-line coverage
and its spectrum-based locator read them. Only frames of those files get a line tracer, so the rest
of the tree and the libraries run at the cost of the call tracer alone.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing.process
import os
import subprocess
import sys
import threading
from typing import Any

sys.dont_write_bytecode = True
import pytest  # noqa: E402


def _probe_helpers() -> Any:
    """The probes' helper module, loaded by path under a private name (nothing is put on sys.path)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_probe", "tracing.py")
    spec = importlib.util.spec_from_file_location("_patchkit_probe_tracing", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


out_path, tree_root = sys.argv[1], os.path.abspath(sys.argv[2]) + os.sep
failures: list[dict[str, Any]] = []
counts = {"passed": 0, "failed": 0, "skipped": 0}
tests: dict[str, dict[str, Any]] = {}


def describe(report: Any, when: str) -> dict[str, Any]:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", [])
    locs = [getattr(e, "reprfileloc", None) for e in entries]
    return {"nodeid": report.nodeid, "when": when, "location": list(getattr(report, "location", None) or []),
            "crash": [crash.path, crash.lineno, crash.message] if crash else None,
            "entries": [[loc.path, loc.lineno] for loc in locs if loc is not None],
            "text": str(longrepr)[-3000:]}


class Collector:
    def pytest_runtest_logreport(self, report: Any) -> None:
        entry = tests.setdefault(report.nodeid, {"outcome": "passed", "failures": []})
        if report.failed:
            counts["failed"] += 1
            failure = describe(report, report.when)
            failures.append(failure)
            entry["outcome"] = "failed"
            entry["failures"].append(failure)
        elif report.skipped and report.when in ("setup", "call"):
            counts["skipped"] += 1
            entry["outcome"] = "skipped"
        elif report.passed and report.when == "call":
            counts["passed"] += 1

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            failures.append(describe(report, "collect"))


class Tracker:
    """Which code objects of the tree run, per bucket (see the module docstring)."""

    def __init__(self) -> None:
        self.bucket = "<global>"
        self.codes: dict[str, set[Any]] = {"<global>": set()}
        self.known: dict[Any, bool] = {}
        self.opaque: set[str] = set()
        self.fixtures: dict[str, list[str]] = {}
        self.cover = frozenset(filter(None, os.environ.get("PATCHKIT_COVER_FILES", "").split(os.pathsep)))
        self.lines: dict[str, dict[str, set[int]]] = {}
        self.imported: dict[str, set[str]] = {}  # per bucket, the tree files its imports located

    def located(self, path: str) -> None:
        """An import of the running bucket found ``path`` in the tree (it may fail to load)."""
        self.imported.setdefault(self.bucket, set()).add(path)

    def trace(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        inside = self.known.get(code)
        if inside is None:
            inside = self.known[code] = code.co_filename.startswith(tree_root)
        if inside:
            self.codes.setdefault(self.bucket, set()).add(code)
            if code.co_filename in self.cover:
                self.lines.setdefault(self.bucket, {}).setdefault(code.co_filename, set()).add(frame.f_lineno)
                return self.trace_lines
        return None

    def trace_lines(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines.setdefault(self.bucket, {}).setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
        return self.trace_lines

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Any:
        self.bucket = item.nodeid
        self.fixtures[item.nodeid] = list(getattr(item, "fixturenames", []))
        yield
        self.bucket = "<global>"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Any:
        if fixturedef.scope == "function":
            yield
            return
        previous, self.bucket = self.bucket, f"fixture:{fixturedef.argname}"
        yield
        self.bucket = previous

    def mark_opaque(self) -> None:
        self.opaque.add(self.bucket)

    def dump(self) -> dict[str, Any]:
        buckets = {b: {(c.co_filename, c.co_firstlineno, c.co_name) for c in codes} for b, codes in self.codes.items()}
        for bucket, paths in self.imported.items():  # a located file: that file's module-level code
            buckets.setdefault(bucket, set()).update((path, 1, "<module>") for path in paths)
        return {"buckets": {b: sorted(codes) for b, codes in buckets.items()},
                "opaque": sorted(self.opaque), "fixtures": self.fixtures}

    def dump_lines(self) -> dict[str, dict[str, list[int]]]:
        return {b: {f: sorted(lines) for f, lines in files.items()} for b, files in self.lines.items()}


def watch_subprocesses(tracker: Tracker) -> None:
    """Mark the running test opaque when it starts a process (its children's code is not traced)."""
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        tracker.mark_opaque()
        popen_init(self, *args, **kwargs)

    def start(self: Any) -> None:
        tracker.mark_opaque()
        process_start(self)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]


tracker = Tracker() if os.environ.get("PATCHKIT_TRACE_DEPS") == "1" else None
plugins: list[Any] = [Collector()]
if tracker is not None:
    plugins.append(tracker)
    watch_subprocesses(tracker)
    _probe_helpers().ImportLog(tree_root, seen=tracker.located).install()
    threading.settrace(tracker.trace)
    sys.settrace(tracker.trace)

code = pytest.main(sys.argv[3:], plugins=plugins)
if tracker is not None:
    sys.settrace(None)
    threading.settrace(None)
result: dict[str, Any] = {"returncode": int(code), "failures": failures, "counts": counts, "tests": tests}
if tracker is not None:
    result["deps"] = tracker.dump()
    result["lines"] = tracker.dump_lines()
with open(out_path, "w") as handle:
    json.dump(result, handle)
