"""Run the set's tests with pytest; run by the tests gate in the chosen interpreter (stdlib + pytest).

    python runner.py OUT.json TREE_ROOT [pytest args...]

Writes every failure (with its traceback locations), the counts, each test's own outcome, and, with
``PATCHKIT_TRACE_DEPS=1``, which code of the tree each test ran: the tests gate reruns a test only when
code it ran has changed. Code is recorded per *bucket*: a test (setup, call, teardown), a fixture wider
than a function (set up once and shared by the tests that request it), or ``<global>`` (collection,
imports). A test that starts a subprocess is marked ``opaque``: its children's code is not seen.
"""

from __future__ import annotations

import json
import multiprocessing.process
import os
import subprocess
import sys
import threading

sys.dont_write_bytecode = True
import pytest  # noqa: E402

out_path, tree_root = sys.argv[1], os.path.abspath(sys.argv[2]) + os.sep
failures: list[dict] = []
counts = {"passed": 0, "failed": 0, "skipped": 0}
tests: dict[str, dict] = {}


def describe(report, when):
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", [])
    locs = [getattr(e, "reprfileloc", None) for e in entries]
    return {"nodeid": report.nodeid, "when": when, "location": list(getattr(report, "location", None) or []),
            "crash": [crash.path, crash.lineno, crash.message] if crash else None,
            "entries": [[loc.path, loc.lineno] for loc in locs if loc is not None],
            "text": str(longrepr)[-3000:]}


class Collector:
    def pytest_runtest_logreport(self, report):
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

    def pytest_collectreport(self, report):
        if report.failed:
            failures.append(describe(report, "collect"))


class Tracker:
    """Which code objects of the tree run, per bucket (see the module docstring)."""

    def __init__(self):
        self.bucket = "<global>"
        self.codes: dict[str, set] = {"<global>": set()}
        self.known: dict = {}
        self.opaque: set[str] = set()
        self.fixtures: dict[str, list[str]] = {}

    def trace(self, frame, event, arg):
        code = frame.f_code
        inside = self.known.get(code)
        if inside is None:
            inside = self.known[code] = code.co_filename.startswith(tree_root)
        if inside:
            self.codes.setdefault(self.bucket, set()).add(code)
        return None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.bucket = item.nodeid
        self.fixtures[item.nodeid] = list(getattr(item, "fixturenames", []))
        yield
        self.bucket = "<global>"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope == "function":
            yield
            return
        previous, self.bucket = self.bucket, f"fixture:{fixturedef.argname}"
        yield
        self.bucket = previous

    def mark_opaque(self):
        self.opaque.add(self.bucket)

    def dump(self) -> dict:
        return {"buckets": {b: sorted({(c.co_filename, c.co_firstlineno, c.co_name) for c in codes})
                            for b, codes in self.codes.items()},
                "opaque": sorted(self.opaque), "fixtures": self.fixtures}


tracker = Tracker() if os.environ.get("PATCHKIT_TRACE_DEPS") == "1" else None
plugins: list = [Collector()]
if tracker is not None:
    plugins.append(tracker)
    _popen_init = subprocess.Popen.__init__
    _process_start = multiprocessing.process.BaseProcess.start

    def popen_init(self, *args, **kwargs):
        tracker.mark_opaque()
        _popen_init(self, *args, **kwargs)

    def process_start(self):
        tracker.mark_opaque()
        _process_start(self)

    subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = process_start  # type: ignore[method-assign]
    threading.settrace(tracker.trace)
    sys.settrace(tracker.trace)

code = pytest.main(sys.argv[3:], plugins=plugins)
if tracker is not None:
    sys.settrace(None)
    threading.settrace(None)  # type: ignore[arg-type]
result = {"returncode": int(code), "failures": failures, "counts": counts, "tests": tests}
if tracker is not None:
    result["deps"] = tracker.dump()
with open(out_path, "w") as handle:
    json.dump(result, handle)
