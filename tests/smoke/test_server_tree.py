"""No server process outlives `patchkit smoke` or `patchkit bench`, on any exit path (issue 37, point 8).

The stand-in server is made as hard to stop as SGLang's is: its launcher and workers sleep on SIGTERM
before they exit (the launcher's crash diagnostics), the launcher starts a helper in its own session that
ignores SIGTERM when it gets one, one worker left the group at start, and one is a daemon (its own
session, its parent gone at once, so it is re-parented before anyone saw whose child it was). Every
process of the tree carries a tag in its environment, so the test finds them all in /proc, whether or not
patchkit (or a log) knows them. Each exit path: a normal end, a server that never becomes healthy, a
request that times out, SIGTERM to patchkit, Ctrl-C twice, an error in the work, and the bench's end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from patchkit.smoke.launch import Launch, QuietUI, serve, server_argv

TAG = "PATCHKIT_TEST_SERVER_TREE"
#: Each fault that makes a tree hard to stop (see the stand-in's README).
HARD_TO_STOP = {"term_delay": "3", "term_spawn": "1", "daemon": "1", "escape": "1"}


def tagged(tag: str) -> set[int]:
    """Every live (non-zombie) process whose environment carries ``tag``: the server trees of one test."""
    found = set()
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def tag(smoke_env):
    value = uuid.uuid4().hex
    smoke_env.env[TAG] = value
    yield value
    for pid in tagged(value):  # a safety net only: the test has failed already if one is left
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def set_profile(smoke_env, **values: str) -> None:
    """Change ``[smoke]`` keys of the test set's manifest."""
    manifest = smoke_env.set_dir / "manifest.toml"
    text = manifest.read_text()
    for key, value in values.items():
        lines = [f"{key} = {value}" if line.startswith(f"{key} = ") else line for line in text.splitlines()]
        text = "\n".join(lines) + "\n"
    manifest.write_text(text)


def assert_tree_gone(smoke_env, tag: str, servers: int) -> None:
    """Nothing tagged is alive now that the command returned, and the trees were as big as they should be."""
    assert tagged(tag) == set(), "a server process outlived the command"
    logged = smoke_env.server_pids()  # the daemon may be killed before it logs: a loaded machine starts it late
    assert len(logged) >= 3 * servers, f"each server logs its main process, 2 workers (and the daemon): {logged}"


def test_a_normal_end_leaves_no_process(smoke_env, tag):
    out = smoke_env.run(**HARD_TO_STOP)
    assert out.code == 0, out.stderr
    for run in out.doc["result"]["servers"]:
        assert run["teardown"]["sigkill_sent"] and run["teardown"]["leftover_pids"] == []
    assert_tree_gone(smoke_env, tag, servers=2)


def test_a_server_that_never_becomes_healthy_leaves_no_process(smoke_env, tag):
    set_profile(smoke_env, startup_timeout_s="3")
    out = smoke_env.run(start_delay="600", **HARD_TO_STOP)
    assert out.code == 1 and "not ready after 3s" in out.doc["result"]["servers"][0]["failure"]
    assert_tree_gone(smoke_env, tag, servers=1)


def test_a_request_that_times_out_leaves_no_process(smoke_env, tag):
    out = smoke_env.run(role="spec", hang="1", **HARD_TO_STOP)
    assert out.code == 1
    assert_tree_gone(smoke_env, tag, servers=2)


def test_sigterm_to_patchkit_mid_run_leaves_no_process(smoke_env, tag):
    process = smoke_env.start(role="spec", hang="1", **HARD_TO_STOP)
    try:
        smoke_env.wait_for_log("ddtree", "request stuck", timeout=60)
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "interrupted during check of the ddtree server" in err and "no process left" in err
    assert_tree_gone(smoke_env, tag, servers=2)


def test_a_second_ctrl_c_kills_at_once_and_leaves_no_process(smoke_env, tag):
    """The first Ctrl-C starts the teardown (SIGTERM, a 60 s grace period here); a second one, while
    the tree sleeps in its SIGTERM handlers, skips the rest of the grace period: SIGKILL, and nothing is left."""
    set_profile(smoke_env, grace_period_s="60")
    process = smoke_env.start(start_delay="600", **{**HARD_TO_STOP, "term_delay": "600"})
    try:
        smoke_env.wait_for_log("baseline", "loading weights", timeout=60)
        process.send_signal(signal.SIGINT)
        smoke_env.wait_for_log("baseline", "crash diagnostics", timeout=30)
        began = time.monotonic()
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert time.monotonic() - began < 30, "the second Ctrl-C did not cut the grace period short"
    assert "SIGKILLed after SIGTERM" in err and "no process left" in err
    assert_tree_gone(smoke_env, tag, servers=1)


def test_an_error_in_the_work_tears_the_tree_down_before_it_is_raised(smoke_env, tag):
    """A bug in the work (not a server failure, not an interrupt) is raised as it is, after the teardown."""
    launch = Launch(python=sys.executable, model=smoke_env.model, draft_model=smoke_env.draft,
                    target=smoke_env.target, port=smoke_env.port, gpus=0, server_args=(), extra_args=(),
                    draft_model_flag="--speculative-draft-model-path", startup_timeout_s=20, request_timeout_s=3,
                    grace_period_s=1, logs=smoke_env.logs)
    seen: dict[str, set[int]] = {}

    def work(server, status):
        seen["running"] = tagged(tag)
        raise RuntimeError("a bug in the work")

    faults = {f"SGLANG_STANDIN_{k.upper()}": v for k, v in HARD_TO_STOP.items()}
    with pytest.raises(RuntimeError, match="a bug in the work"):
        serve("baseline", server_argv(launch, (), False), launch, QuietUI(), work, extra_env={TAG: tag, **faults})
    assert len(seen["running"]) >= 3, "the tree ran: main process, 2 workers (and the daemon)"
    assert_tree_gone(smoke_env, tag, servers=1)


def test_bench_leaves_no_process_of_any_variant(tmp_path):
    from tests.bench.conftest import make_bench_env, server_pids

    env = make_bench_env(tmp_path / "bench")
    value = uuid.uuid4().hex
    try:
        out = env.run(env={TAG: value}, **HARD_TO_STOP)
        assert out.code == 0, out.stderr + out.stdout[-2000:]
        assert tagged(value) == set(), "a bench server process outlived the command"
        assert len(server_pids(env.tmp / "logs")) >= 4 * 3, "4 variants, each with 3 or 4 logged processes"
    finally:
        for pid in tagged(value):
            subprocess.run(["kill", "-9", str(pid)], check=False)
