"""A long verify is never silent: piped to a log, a line at least every few seconds naming the gate,
what it does and its latest step (pytest's running counts, pip's steps); in a terminal the same step
shows live in the spinner. Real threads and a real pytest process."""

from __future__ import annotations

import io
import re
import sys
import time

from patchkit import proc
from patchkit.checks.settests import PytestCounts
from patchkit.render.verify import VerifyView


def test_a_piped_verify_prints_a_line_while_a_gate_runs_long(monkeypatch):
    log = io.StringIO()  # not a terminal: what a CI log or `2> file` is
    monkeypatch.setattr(sys, "stderr", log)
    with VerifyView(every_s=0.4) as view:
        view.started("tests", 7, 7)
        view.note("set tests: 12 passed, 1 skipped so far [40%]")
        time.sleep(1.5)
    lines = [line for line in log.getvalue().splitlines() if line]
    beats = [line for line in lines if "verify: tests (7/7) running the set's tests (pytest)" in line]
    assert len(beats) >= 2, lines
    assert "12 passed, 1 skipped so far" in beats[-1] and re.search(r", \d+ s so far", beats[-1])


def test_the_heartbeat_is_quiet_while_lines_come_and_with_quiet(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    with VerifyView(verbosity=-1, every_s=0.2) as view:
        view.started("tests", 1, 1)
        time.sleep(0.6)
    assert log.getvalue() == "", "--quiet prints no progress"


def test_pytest_rows_become_running_counts(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\n"
        + "".join(f"def test_ok_{n}():\n    pass\n\n" for n in range(3))
        + "@pytest.mark.skip(reason='x')\ndef test_skipped():\n    pass\n\n"
        + "def test_fails():\n    assert False\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    told: list[str] = []
    done = proc.stream([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        str(tmp_path)], PytestCounts(told.append), check=False, cwd=tmp_path)
    assert done.returncode == 1
    assert told and told[-1] == "set tests: 3 passed, 1 skipped, 1 failed so far [100%]", told
