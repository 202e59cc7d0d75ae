"""A reader that goes away (``patchkit status | true``, ``patchkit apply | head -1``) is no failure: the
command finishes its work and ends with its own exit code, never rich's or click's 1 (which means
"failed" or "drift" here) and never a traceback. Real pipes, the reading end closed before a byte is read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from patchkit.git import Repo
from tests.patchset import helpers


def run_into_closed_pipe(*args: str) -> tuple[int, str]:
    """Run ``python -m patchkit ARGS`` with stdout a pipe nobody reads (closed at once); (exit, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "patchkit", *args], env=helpers.cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    return proc.wait(timeout=120), err


@pytest.mark.parametrize("json_flag", [(), ("--json",)], ids=["text", "json"])
def test_apply_then_status_into_a_closed_pipe_exit_0_and_do_their_work(fx, json_flag):
    code, err = run_into_closed_pipe("apply", "--set", str(fx.set_dir), "--target", str(fx.target), *json_flag)
    assert (code, err) == (0, "")
    assert len(Repo(fx.target).run("log", "--format=%H", f"{fx.base_commit}..HEAD").split()) == 5, "applied"
    code, err = run_into_closed_pipe("status", "--set", str(fx.set_dir), "--target", str(fx.target), *json_flag)
    assert (code, err) == (0, "")


def test_status_of_a_drifted_tree_into_a_closed_pipe_still_says_drift_by_its_code(fx):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    (fx.target / "pkg" / "core.py").write_text("edited\n")
    code, err = run_into_closed_pipe("status", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert (code, err) == (1, "")


@pytest.mark.parametrize("args", [("--help",), ("apply", "--help"), ("sets",), ("sets", "--json")], ids=" ".join)
def test_help_and_listings_into_a_closed_pipe_exit_0(args):
    assert run_into_closed_pipe(*args) == (0, "")


def test_head_1_reads_one_line_and_apply_exits_0(fx):
    """The shell's `patchkit apply ... | head -1`, with a real head."""
    script = (f'"{sys.executable}" -m patchkit apply --set "{fx.set_dir}" --target "{fx.target}" -v | head -1; '
              'echo "exit=${PIPESTATUS[0]}"')
    done = subprocess.run(["bash", "-c", script], env=helpers.cli_env(), capture_output=True, text=True, timeout=120)
    first, verdict = done.stdout.splitlines()
    assert first.startswith("applied 5 patches") and verdict == "exit=0", done
