"""ci/verify.sh runs fetch, apply, verify in order, stops at the first failure and keeps its status."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest
from tests.verify.verify_helpers import REPO

SCRIPT = REPO / "ci" / "verify.sh"
WORKFLOW = REPO / "ci" / "patchkit-verify.yml"


@pytest.fixture
def fake_patchkit(tmp_path):
    """A stand-in command that logs its arguments and exits with $FAIL_<STEP> (default 0)."""
    log = tmp_path / "calls.log"
    fake = tmp_path / "patchkit"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\nvar="FAIL_$1"\nexit "${{!var:-0}}"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake, log


def run_script(fake, **extra):
    env = {**os.environ, "PATCHKIT": str(fake), "PATCHKIT_SET": "ddtree_patches/v9", "PATCHKIT_JUNIT": "out.xml", **extra}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env)


def test_runs_the_three_steps_with_the_set_and_the_junit_path(fake_patchkit):
    fake, log = fake_patchkit
    done = run_script(fake)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "base fetch --set ddtree_patches/v9",
        "apply --set ddtree_patches/v9",
        "verify --set ddtree_patches/v9 --junit out.xml",
    ]


@pytest.mark.parametrize(("step", "code", "calls"), [("base", 2, 1), ("apply", 1, 2), ("verify", 3, 3)])
def test_stops_at_the_first_failure_with_its_status(fake_patchkit, step, code, calls):
    fake, log = fake_patchkit
    done = run_script(fake, **{f"FAIL_{step}": str(code)})
    assert done.returncode == code
    assert len(log.read_text().splitlines()) == calls


def test_the_workflow_runs_the_helper_and_uploads_the_report_even_on_failure():
    text = WORKFLOW.read_text()
    assert "run: bash ci/verify.sh" in text
    upload = text[text.index("upload the JUnit report"):]
    assert "if: always()" in upload and "path: patchkit-verify.xml" in upload
    assert "PATCHKIT_JUNIT: patchkit-verify.xml" in text


def test_ci_runs_the_readme_test_command_then_the_slow_tests_it_skips():
    """.ci/run and the quick start cannot drift apart, and the slow tests are deselected, not dropped."""
    from patchkit import tomlfile

    readme = (REPO / "README.md").read_text()
    quick_start = readme[readme.index("## Quick start"):]
    block = quick_start[quick_start.index("```sh") + 5:quick_start.index("```", quick_start.index("```sh") + 5)]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2, "the quick start is two commands"
    steps = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    test_command = commands[1]
    assert test_command in steps, f".ci/run must run the README's test command: {test_command}"
    after = steps[steps.index(test_command) + 1:]
    assert any("pytest" in step and "-m 'slow and not corpus'" in step for step in after)
    pyproject = REPO / "pyproject.toml"
    pytest_config = tomlfile.parse(pyproject.read_text(), pyproject)["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow'" in pytest_config["addopts"]
