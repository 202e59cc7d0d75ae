"""End to end through the real entry point: exit codes, the --json envelope, the JUnit report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from types import SimpleNamespace

from click.testing import CliRunner
from verify_helpers import REPO, make_tree

from patchkit.cli import cli

MANIFEST = '[set]\npython = ["3.11"]\n'


def make_case(tmp_path, patched):
    root = make_tree(tmp_path / "tree", {"python/pkg/__init__.py": ""}, patched)
    set_dir = tmp_path / "set"
    set_dir.mkdir()
    (set_dir / "manifest.toml").write_text(MANIFEST)
    return root, set_dir


def patchkit(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env)


def test_clean_tree_exits_0_with_a_pinned_json_envelope(tmp_path):
    root, set_dir = make_case(tmp_path, {"python/pkg/ok.py": "X = 1\n"})
    done = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "compile", "--gate", "imports", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert list(doc) == ["patchkit", "command", "ok", "exit_code", "result"]
    assert (doc["patchkit"], doc["command"], doc["ok"], doc["exit_code"]) == (1, "verify", True, 0)
    result = doc["result"]
    assert {"target", "set_dir", "touched", "gates", "seconds", "unavailable", "junit"} <= set(result)
    assert [g["gate"] for g in result["gates"]] == ["compile", "imports"]
    assert set(result["gates"][0]) == {"gate", "status", "seconds", "findings", "traceback"}
    assert result["touched"] == ["python/pkg/ok.py"]


def test_findings_exit_1_and_name_file_and_line_in_json_and_junit(tmp_path):
    root, set_dir = make_case(tmp_path, {"python/pkg/bad.py": "X = 1\ndef f(:\n    pass\n"})
    report = tmp_path / "out" / "verify.xml"
    done = patchkit("verify", "--set", set_dir, "--target", root, "--json", "--junit", report, cwd=tmp_path)
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


def test_human_output_has_the_summary_table(tmp_path):
    root, set_dir = make_case(tmp_path, {"python/pkg/bad.py": "def f(:\n"})
    done = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "compile", cwd=tmp_path)
    assert done.returncode == 1
    assert "compile" in done.stdout and "fail" in done.stdout and "python/pkg/bad.py:1" in done.stdout


def test_unknown_gate_exits_2(tmp_path):
    root, set_dir = make_case(tmp_path, {"python/pkg/ok.py": "X = 1\n"})
    done = patchkit("verify", "--set", set_dir, "--target", root, "--gate", "nope", cwd=tmp_path)
    assert done.returncode == 2 and "unknown gate 'nope'" in done.stderr


def test_a_crashing_gate_exits_3_and_the_others_still_run(tmp_path, monkeypatch):
    import checks.registry

    root, set_dir = make_case(tmp_path, {"python/pkg/ok.py": "X = 1\n"})

    def explode(ctx):
        raise ZeroDivisionError("gate bug")

    crashing = SimpleNamespace(NAME="boom", DESCRIPTION="", EXAMPLES=(), run=explode)
    gates = {"boom": crashing, "compile": checks.registry.GATES["compile"]}
    monkeypatch.setattr(checks.registry, "GATES", gates)
    out = tmp_path / "r.xml"
    done = CliRunner().invoke(cli, ["verify", "--set", str(set_dir), "--target", str(root), "--json", "--junit", str(out)])
    assert done.exit_code == 3, done.output
    doc = json.loads(done.output)
    statuses = {g["gate"]: g["status"] for g in doc["result"]["gates"]}
    assert statuses == {"boom": "crash", "compile": "pass"}
    assert "ZeroDivisionError: gate bug" in doc["result"]["gates"][0]["traceback"]
    error = ET.parse(out).getroot().find("testsuite/testcase/error")
    assert error is not None and error.get("type") == "crash"
