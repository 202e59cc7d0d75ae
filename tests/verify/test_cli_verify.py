"""End to end through the real entry point: exit codes, the --json envelope, the JUnit report, what
verify prints (the target statement first, the gate table, findings, progress) and what it refuses
before any gate runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from patchkit.cli import cli
from patchkit.testing.verify import applied_example
from tests.verify.verify_helpers import REPO

BASE = {"python/pkg/__init__.py": ""}


def patchkit(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env)


@pytest.fixture
def clean(tmp_path):
    return applied_example(tmp_path / "clean", BASE, {"python/pkg/ok.py": "X = 1\n"})


@pytest.fixture
def broken(tmp_path):
    return applied_example(tmp_path / "broken", BASE, {"python/pkg/bad.py": "X = 1\ndef f(:\n    pass\n"})


def test_clean_tree_exits_0_with_a_pinned_json_envelope(clean, tmp_path):
    root, set_dir = clean
    done = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "compile", "--gate", "imports", "--json",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert list(doc) == ["patchkit", "command", "ok", "exit_code", "result"]
    assert (doc["patchkit"], doc["command"], doc["ok"], doc["exit_code"]) == (1, "verify", True, 0)
    result = doc["result"]
    assert set(result) == {"target", "set_dir", "target_check", "touched", "gates", "seconds", "junit"}
    assert result["target_check"]["state"] == "applied" and not result["target_check"]["allowed"]
    assert [g["gate"] for g in result["gates"]] == ["compile", "imports"]
    assert set(result["gates"][0]) == {"gate", "status", "seconds", "findings", "traceback", "reused"}
    assert result["touched"] == ["python/pkg/ok.py"]
    assert done.stderr == ""  # --json: no progress


def test_findings_exit_1_and_name_file_and_line_in_json_and_junit(broken, tmp_path):
    root, set_dir = broken
    report = tmp_path / "out" / "verify.xml"
    done = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "compile", "--json", "--junit", report,
                    cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    gates = {g["gate"]: g for g in json.loads(done.stdout)["result"]["gates"]}
    assert gates["compile"]["status"] == "fail"
    (finding,) = gates["compile"]["findings"]
    assert set(finding) == {"gate", "severity", "file", "line", "message", "hint"}
    assert (finding["file"], finding["line"], finding["severity"]) == ("python/pkg/bad.py", 2, "error")
    suites = {s.get("name"): s for s in ET.parse(report).getroot()}
    compile_suite = suites["patchkit.verify.compile"]
    assert compile_suite.get("failures") == "1"
    failure = compile_suite.find("testcase/failure")
    assert failure is not None and "python/pkg/bad.py:2" in failure.get("message")


def test_human_output_states_the_target_then_the_ascii_table_and_streams_progress(broken, tmp_path):
    root, set_dir = broken
    done = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "compile", cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"target: {root.resolve()} is exactly example@1.0.0 applied to its base"
    assert "| compile | fail" in done.stdout and "python/pkg/bad.py:2" in done.stdout  # ASCII: stdout is a pipe
    assert not any(ord(c) > 127 for c in done.stdout)
    assert "verify: compile fail (1/1," in done.stderr  # progress goes to stderr, one line per gate
    assert lines[-1].startswith("findings: verification failed in ")


def test_info_rows_are_counted_by_default_shown_with_verbose_and_quiet_prints_only_failures(clean, tmp_path):
    root, set_dir = clean
    args = ("verify", "--set", set_dir, "--target", root, "--gate", "imports")
    normal = patchkit(*args, cwd=tmp_path)
    assert normal.returncode == 0 and "info row(s) not shown (--verbose shows them)" in normal.stdout
    verbose = patchkit(*args, "--verbose", cwd=tmp_path)
    assert "module(s) imported" in verbose.stdout and "not shown" not in verbose.stdout
    quiet = patchkit(*args, "-q", cwd=tmp_path)
    assert quiet.stdout.splitlines() == [quiet.stdout.splitlines()[-1]] and "all gates passed" in quiet.stdout
    assert quiet.stderr == ""
    both = patchkit(*args, "-q", "-v", cwd=tmp_path)
    assert both.returncode == 2 and "exclude each other" in both.stderr


def test_unknown_gate_exits_2(clean, tmp_path):
    root, set_dir = clean
    done = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "nope", cwd=tmp_path)
    assert done.returncode == 2 and "unknown gate 'nope'" in done.stderr


def test_an_unwritable_junit_path_exits_2_before_the_gates(clean, tmp_path):
    root, set_dir = clean
    (tmp_path / "file").write_text("")
    done = patchkit("verify", "--set", set_dir, "--target", root, "--junit", tmp_path / "file" / "r.xml",
                    cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert f"--junit {tmp_path / 'file' / 'r.xml'} cannot be written" in done.stderr


def test_a_tree_that_is_not_the_set_applied_exits_2_with_the_fix(clean, tmp_path):
    root, set_dir = clean
    (root / "python/pkg/ok.py").write_text("X = 'edited by hand'\n")
    done = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "compile", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "is not exactly example@1.0.0 applied: python/pkg/ok.py" in done.stderr
    assert "--allow-drift" in done.stderr
    anyway = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "compile", "--allow-drift", cwd=tmp_path)
    assert anyway.returncode == 0
    assert anyway.stdout.splitlines()[0].endswith("verified as it is (--allow-drift)")


def test_a_crashing_gate_exits_3_and_the_others_still_run(clean, tmp_path, monkeypatch):
    import patchkit.checks.registry

    root, set_dir = clean

    def explode(ctx):
        raise ZeroDivisionError("gate bug")

    crashing = SimpleNamespace(NAME="boom", DESCRIPTION="", EXAMPLES=(), run=explode)
    registry = patchkit.checks.registry
    monkeypatch.setattr(registry, "GATES", {"boom": crashing, "compile": registry.GATES["compile"]})
    out = tmp_path / "r.xml"
    done = CliRunner().invoke(cli, ["verify", "--set", str(set_dir), "--target", str(root), "--json",
                                    "--junit", str(out)])
    assert done.exit_code == 3, done.output
    doc = json.loads(done.stdout)
    assert {g["gate"]: g["status"] for g in doc["result"]["gates"]} == {"boom": "crash", "compile": "pass"}
    assert "ZeroDivisionError: gate bug" in doc["result"]["gates"][0]["traceback"]
    error = ET.parse(out).getroot().find("testsuite/testcase/error")
    assert error is not None and error.get("type") == "crash"
