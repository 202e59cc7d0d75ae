"""`patchkit port` interrupted: SIGKILL and SIGINT at named steps of a real port process.

SIGTERM takes SIGINT's path (the CLI turns it into KeyboardInterrupt; apply's tests cover that).
Afterwards the source set is untouched (or, in place, exactly the old or the new set), nothing is
left half-written next to --out, the next `patchkit port` resumes and ends with the same set an
uninterrupted port writes, and `--abort` restores everything.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.patchset import helpers
from tests.patchset import port_fixture as pf
from tests.patchset.test_port import home_port_dirs, upstream  # noqa: F401  (the session fixture)


@pytest.fixture(scope="session")
def set4_and_reference(upstream, tmp_path_factory) -> tuple[Path, dict[str, bytes]]:  # noqa: F811
    """The four patches that port without a stop, and what an uninterrupted port of them writes
    (commit ids, patches and report are reproducible, so every test compares against this one)."""
    root = tmp_path_factory.mktemp("port-four")
    mp = pytest.MonkeyPatch()
    mp.setenv("PATCHKIT_HOME", str(root / "home"))
    try:
        set4 = helpers.copy_set(upstream.set_dir, root / "v1")
        pf.truncate_set(set4, 4)
        code, doc = helpers.invoke_json("port", "--set", str(helpers.copy_set(set4, root / "copy")), "--to-git",
                                        upstream.v2, "--out", str(root / "reference"))
        assert code == 0, doc
        return set4, helpers.set_snapshot(root / "reference")
    finally:
        mp.undo()


@pytest.fixture
def src4(set4_and_reference, tmp_path) -> Path:
    return helpers.copy_set(set4_and_reference[0], tmp_path / "sets" / "v1")


@pytest.fixture
def reference(set4_and_reference) -> dict[str, bytes]:
    return set4_and_reference[1]


def start_paused(args: list[str], step: str) -> subprocess.Popen:
    env = helpers.cli_env({"PATCHKIT_TEST_PAUSE": step, "PATCHKIT_TEST_PAUSE_S": "60"})
    proc = subprocess.Popen([sys.executable, "-m", "patchkit", "port", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.strip() == f"patchkit-test-pause: {step}":
            return proc
    proc.kill()
    raise AssertionError(f"port never reached {step}: {proc.communicate()}")


MOMENTS = [
    ("port-replayed-2", signal.SIGKILL),
    ("port-replayed-2", signal.SIGINT),
    ("port-written", signal.SIGKILL),
    ("port-published", signal.SIGKILL),
]


@pytest.mark.parametrize("step,signum", MOMENTS, ids=[f"{s}-{g.name}" for s, g in MOMENTS])
def test_interrupted_port_resumes_to_the_same_set(upstream, src4, reference, tmp_path, step, signum):  # noqa: F811
    before = helpers.set_snapshot(src4)
    out = tmp_path / "sets" / "v2"
    args = ["--set", str(src4), "--to-git", upstream.v2, "--out", str(out)]
    proc = start_paused(args, step)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 130), err
    if signum != signal.SIGKILL:
        assert "`patchkit port --continue" in err
    assert helpers.set_snapshot(src4) == before, "the source set is never touched"
    if step != "port-published":
        assert not out.exists(), "the new set appears whole or not at all"

    again = helpers.run_cli("port", *args, "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    doc = json.loads(again.stdout)["result"]
    assert doc["state"] == "ported" and doc["recovered"], doc
    assert helpers.set_snapshot(out) == reference
    assert helpers.set_snapshot(src4) == before
    assert home_port_dirs() == [] and not list(out.parent.glob(".*port-staging"))


@pytest.mark.parametrize("step", ["port-written"])
def test_abort_after_a_kill_restores_everything(upstream, src4, tmp_path, step):  # noqa: F811
    sets = tmp_path / "sets"
    before = helpers.tree_snapshot(sets)
    proc = start_paused(["--set", str(src4), "--to-git", upstream.v2, "--out", str(sets / "v2")], step)
    proc.kill()
    proc.communicate(timeout=60)
    result = helpers.run_cli("port", "--abort")
    assert result.returncode == 0, result.stdout + result.stderr
    assert helpers.tree_snapshot(sets) == before and not list(sets.glob(".*"))
    assert home_port_dirs() == []


def test_kill_while_checking_out_a_conflict_stops_again_on_the_next_run(upstream, tmp_path):  # noqa: F811
    src = helpers.copy_set(upstream.set_dir, tmp_path / "sets" / "v1")
    args = ["--set", str(src), "--to-git", upstream.v2, "--out", str(tmp_path / "sets" / "v2")]
    proc = start_paused(args, "port-stopping")
    proc.kill()
    proc.communicate(timeout=60)
    again = helpers.run_cli("port", "--continue", "--json")
    doc = json.loads(again.stdout)["result"]
    assert again.returncode == 1 and doc["stopped"]["patch"] == pf.NAMES[4], again.stdout
    assert "<<<<<<< HEAD" in (Path(doc["stopped"]["tree"]) / "python/pkg/conflict.py").read_text()


def test_in_place_port_killed_after_the_swap_is_finished_by_the_next_run(upstream, src4, reference):  # noqa: F811
    proc = start_paused(["--set", str(src4), "--to-git", upstream.v2], "port-published")
    proc.kill()
    proc.communicate(timeout=60)
    assert helpers.set_snapshot(src4) == reference, "the swap is the commit point: the new set is in place"
    again = helpers.run_cli("port", "--continue", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already in place" in json.loads(again.stdout)["result"]["recovered"]
    assert home_port_dirs() == [] and not list(src4.parent.glob(".*port-staging"))


def test_a_second_port_on_the_same_set_is_refused_while_one_runs(upstream, src4, tmp_path):  # noqa: F811
    args = ["--set", str(src4), "--to-git", upstream.v2, "--out", str(tmp_path / "v2")]
    proc = start_paused(args, "port-replayed-1")
    try:
        second = helpers.run_cli("port", *args)
        assert second.returncode == 2 and "another patchkit port (pid" in second.stdout + second.stderr
        abort = helpers.run_cli("port", "--abort", "--set", str(src4))
        assert abort.returncode == 2, "an abort waits its turn too"
    finally:
        proc.kill()
        proc.communicate(timeout=60)
