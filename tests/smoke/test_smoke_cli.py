"""End-to-end: the real CLI in a subprocess against the stand-in sglang server, one test per behaviour."""

from __future__ import annotations

import signal
import socket

import pytest

from tests.smoke.conftest import alive


def servers(doc):
    return {run["role"]: run for run in doc["result"]["servers"]}


def assert_all_gone(smoke_env, expected_min: int = 2):
    pids = smoke_env.server_pids()
    assert len(pids) >= expected_min, f"the logs name too few server pids: {pids}"
    assert alive(pids) == set()


def test_identical_outputs_pass_and_report_acceptance(smoke_env):
    out = smoke_env.run()
    assert out.code == 0, out.stderr
    result = out.doc["result"]
    assert out.doc["ok"] is True and result["mismatches"] == 0
    assert [p["prompt_id"] for p in result["prompts"]] == ["short", "mid", "long", "words"]
    assert all(p["matched"] and p["baseline_tokens"] == 12 for p in result["prompts"])
    runs = servers(out.doc)
    assert runs["baseline"]["stats"]["accept_length"] is None
    assert runs["ddtree"]["stats"]["accept_length"] > 1
    assert runs["ddtree"]["stats"]["tokens_per_s"] > 0 and runs["ddtree"]["stats"]["ttft_s"] > 0
    expected = runs["ddtree"]["stats"]["tokens_per_s"] / runs["baseline"]["stats"]["tokens_per_s"]
    assert result["speedup"] == pytest.approx(expected)
    assert all(run["teardown"]["leftover_pids"] == [] and not run["teardown"]["sigkill_sent"] for run in runs.values())
    ddtree_log = (smoke_env.logs / "ddtree.log").read_text()
    assert "--speculative-algorithm DDTREE" in ddtree_log and "--tp-size 1" in ddtree_log
    assert "--speculative-algorithm" not in (smoke_env.logs / "baseline.log").read_text()
    assert_all_gone(smoke_env, expected_min=4)


def test_text_prompts_skipped_without_tokenizer_and_extra_args_reach_both_servers(smoke_env):
    out = smoke_env.run("--", "--skip-tokenizer-init")
    assert out.code == 0, out.stderr
    assert out.doc["result"]["skipped_prompts"] == ["words"]
    assert len(out.doc["result"]["prompts"]) == 3
    for role in ("baseline", "ddtree"):
        command_line = (smoke_env.logs / f"{role}.log").read_text().splitlines()[0]
        assert command_line.endswith(" --skip-tokenizer-init")


def test_slow_start_is_waited_for(smoke_env):
    out = smoke_env.run(start_delay="1.5")
    assert out.code == 0, out.stderr
    assert all(run["ready_s"] >= 1.5 for run in servers(out.doc).values())
    assert_all_gone(smoke_env)


def test_server_that_never_becomes_healthy_times_out(smoke_env):
    out = smoke_env.run("--timeout", "1.5", start_delay="600")
    assert out.code == 1
    baseline = servers(out.doc)["baseline"]
    assert "not ready after 1.5s" in baseline["failure"]
    assert len(out.doc["result"]["servers"]) == 1, "the DDTREE server must not start after a failure"
    assert (smoke_env.logs / "baseline.log").is_file()
    assert_all_gone(smoke_env)


def test_crash_at_start_shows_log_tail(smoke_env):
    out = smoke_env.run(as_json=False, crash_at_start="1")
    assert out.code == 1
    assert ("baseline server failed: baseline server: exited with code 1 before it was ready: "
            "RuntimeError: standin: crash at start (as asked)") in out.stdout
    assert "baseline server had exited (code 1), no process left" in out.stderr
    assert "SIGTERM" not in out.stderr + out.stdout, "a server that died by itself was not stopped by a signal"
    assert "smoke: FAIL" in out.stdout
    assert "crash at start" in (smoke_env.logs / "baseline.log").read_text()
    assert alive(smoke_env.server_pids()) == set()


def test_crash_mid_run_kills_orphaned_workers(smoke_env):
    out = smoke_env.run(role="spec", crash_after="1")
    assert out.code == 1
    ddtree = servers(out.doc)["ddtree"]
    assert "prompt 'mid' failed: " in ddtree["failure"]
    assert "the server exited with code 3" in ddtree["failure"]
    assert "fatal error in scheduler" in ddtree["log_tail"]
    assert ddtree["teardown"]["leftover_pids"] == []
    # The prompt answered before the crash is still compared.
    assert [p["prompt_id"] for p in out.doc["result"]["prompts"]] == ["short"]
    assert_all_gone(smoke_env, expected_min=4)


def test_hung_request_fails_on_request_timeout(smoke_env):
    out = smoke_env.run(role="spec", hang="1")
    assert out.code == 1
    assert "prompt 'short' failed: no answer within 3s" in servers(out.doc)["ddtree"]["failure"]
    assert_all_gone(smoke_env, expected_min=4)


def test_diverging_tokens_are_reported_per_prompt(smoke_env):
    out = smoke_env.run(role="spec", diverge_at="5")
    assert out.code == 1
    result = out.doc["result"]
    assert result["mismatches"] == 4
    for prompt in result["prompts"]:
        assert prompt["first_mismatch"] == 5
        assert len(prompt["baseline_continuation"]) == len(prompt["ddtree_continuation"]) == 7
        assert prompt["baseline_continuation"][0] != prompt["ddtree_continuation"][0]
    assert all(run["failure"] is None for run in result["servers"])
    assert_all_gone(smoke_env, expected_min=4)


def test_diverging_tokens_human_output(smoke_env):
    out = smoke_env.run(as_json=False, role="spec", diverge_at="0")
    assert out.code == 1
    assert "MISMATCH" in out.stdout and "identical" not in out.stdout.split("baseline vs DDTREE")[1].split("smoke:")[0]
    assert "smoke: FAIL: 0/4 prompts identical, 4 mismatched" in out.stdout


def test_server_ignoring_sigterm_is_killed(smoke_env):
    out = smoke_env.run(ignore_sigterm="1")
    assert out.code == 0, out.stderr
    for run in servers(out.doc).values():
        assert run["teardown"]["sigkill_sent"] is True
        assert run["teardown"]["seconds"] >= 1.0  # the grace period from the manifest
        assert run["teardown"]["leftover_pids"] == []
    assert_all_gone(smoke_env, expected_min=4)


def test_descendant_that_left_the_group_is_killed_too(smoke_env):
    out = smoke_env.run(escape="1")
    assert out.code == 0, out.stderr
    assert_all_gone(smoke_env, expected_min=6)


def test_port_already_taken_fails_preflight_before_anything_starts(smoke_env):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", smoke_env.port))
        holder.listen()
        out = smoke_env.run()
    assert out.code == 2
    assert f"port {smoke_env.port} is already in use" in out.doc["error"]["message"]
    assert not smoke_env.logs.exists()


def _interrupt_when(smoke_env, log_of, text, **faults):
    process = smoke_env.start(**faults)
    try:
        smoke_env.wait_for_log(log_of, text)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stdout, stderr


def test_ctrl_c_mid_run_tears_down(smoke_env):
    code, _stdout, stderr = _interrupt_when(smoke_env, "ddtree", "request stuck", role="spec", hang="1")
    assert code == 130
    assert "interrupted during check of the ddtree server" in stderr
    assert "no process left" in stderr
    assert_all_gone(smoke_env, expected_min=4)


def test_ctrl_c_during_launch_tears_down(smoke_env):
    code, _stdout, stderr = _interrupt_when(smoke_env, "baseline", "loading weights", start_delay="600")
    assert code == 130
    assert "interrupted during launch of the baseline server" in stderr
    assert_all_gone(smoke_env)


def test_sigterm_to_patchkit_tears_down(smoke_env):
    process = smoke_env.start(start_delay="600")
    try:
        smoke_env.wait_for_log("baseline", "loading weights")
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert_all_gone(smoke_env)


def test_server_interpreter_that_cannot_run_fails_preflight(smoke_env, tmp_path):
    # It exists and is on PATH, but cannot be executed: preflight runs it, so no server is started.
    broken = tmp_path / "python-broken"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    out = smoke_env.run("--python", str(broken), as_json=False)
    lines = out.stderr.strip().splitlines()
    assert out.code == 2 and len(lines) == 1, out.stderr
    assert f"server imports: {broken} cannot be run: No such file or directory; pass --python" in lines[0]
    assert not smoke_env.logs.exists()
