"""``patchkit bench`` end to end: the real CLI in a subprocess against the stand-in server.

One full run (every variant at every level, report, plot, projection) is shared by the tests that only
read its results; the others start the fewest servers that show their behaviour.
"""

from __future__ import annotations

import json
import re
import socket

import pytest

from patchkit.bench import power, sampling
from tests.bench.conftest import server_pids
from tests.smoke.conftest import REPO_ROOT, alive

TABLE = REPO_ROOT / "benchmarks" / "acceptance" / "ddtree-paper-qwen3-8b-math500.toml"
#: Rounds slow enough that every request takes about 2 s, so the client's HTTP overhead (10 to 20 ms
#: on a busy 2-core machine: connect, the last event) stays inside 1%.
SLOW = {"round_ms": "30", "spec_round_ms": "120", "prefill_ms": "30"}


@pytest.fixture(scope="module")
def full(shared_env):
    logs = shared_env.tmp / "logs-full"
    out = shared_env.run("--report", str(shared_env.tmp / "report.md"), "--plot", str(shared_env.tmp / "bench.png"),
                         "--acceptance", str(TABLE), "--expect-tree-gain", "1.3", "--max-new-tokens", "24",
                         logs=logs, timeout=240)
    return shared_env, logs, out


def variants(doc):
    return {v["name"]: v for v in doc["result"]["variants"]}


def test_every_variant_and_level_runs_and_matches_the_baseline(full):
    env, logs, out = full
    assert out.code == 0, out.stderr + out.stdout[-2000:]
    runs = variants(out.doc)
    assert list(runs) == ["baseline", "dflash", "ddtree-b8", "ddtree-b16"]
    for run in runs.values():
        assert run["failure"] is None and run["teardown"]["leftover_pids"] == []
        assert [level["concurrency"] for level in run["levels"]] == [1, 4]
        for level in run["levels"]:
            assert len(level["repeats"]) == 2 and level["requests"] == 4
            assert level["compared"] == 8 and level["mismatches"] == []
            assert all(r["output_tokens"] == 4 * 24 for r in level["repeats"])
    assert "--speculative-ddtree-budget 16" in (logs / "ddtree-b16.log").read_text().splitlines()[0]
    assert "--speculative-algorithm DFLASH" in (logs / "dflash.log").read_text().splitlines()[0]
    assert "--speculative-algorithm" not in (logs / "baseline.log").read_text().splitlines()[0]
    assert alive(server_pids(logs)) == set() and len(server_pids(logs)) >= 8


def test_accept_lengths_histograms_and_the_tree_gain(full):
    _env, _logs, out = full
    runs = variants(out.doc)
    # The stand-in's rounds accept 1, 2, 3, 2, ... (DFLASH), +1 at B=8 and +2 at B=16 (DDTREE).
    for name, rounds in (("dflash", (1, 2, 3, 2)), ("ddtree-b8", (2, 3, 4, 3)), ("ddtree-b16", (3, 4, 5, 4))):
        for level in runs[name]["levels"]:
            hist = level["histogram"]
            assert hist["source"] == "stream"
            assert (hist["requests"], hist["left_out"]) == (8, 0)  # one event per round: every request counted
            assert set(map(int, hist["counts"])) <= set(rounds)
            assert level["accept_length"] > 1
    assert runs["baseline"]["levels"][0]["histogram"] is None and runs["baseline"]["levels"][0]["accept_length"] is None
    gains = {g["variant"]: g for g in out.doc["result"]["tree_gain"]}
    assert set(gains) == {"ddtree-b8", "ddtree-b16"} and all(g["ok"] for g in gains.values())
    assert gains["ddtree-b16"]["gain"] > gains["ddtree-b8"]["gain"] > 1.3


def _hand_counts(log_text: str) -> list[tuple[int, float, float]]:
    """(tokens, created, finished) of every request, in arrival order, from the stand-in's own log."""
    rows = re.findall(r"request rid=(\d+) tokens=(\d+) created=([\d.]+) finished=([\d.]+)", log_text)
    return [(int(t), float(c), float(f)) for _rid, t, c, f in sorted(rows, key=lambda r: int(r[0]))]


def test_speeds_agree_with_a_hand_count_within_2_percent(bench_env):
    """Tokens over wall time from the server's log (its own clock), request by request and per batch."""
    prompts = bench_env.tmp / "two.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [5, 6]}\n{"id": "b", "input_ids": [7]}\n')
    out = bench_env.run("--variants", "baseline,ddtree", "--budgets", "16", "--concurrency", "1,2", "--repeats", "1",
                        "--warmup", "0", "--prompts", str(prompts), "--max-new-tokens", "64", **SLOW)
    assert out.code == 0, out.stdout + out.stderr
    for name, run in variants(out.doc).items():
        requests = _hand_counts((bench_env.tmp / "logs" / f"{name}.log").read_text())
        cursor = 0
        for level in run["levels"]:
            for repeat in level["repeats"]:
                batch = requests[cursor:cursor + repeat["requests"]]
                cursor += repeat["requests"]
                tokens = sum(t for t, _c, _f in batch)
                assert tokens == repeat["output_tokens"] == 64 * len(batch)
                aggregate = tokens / (max(f for _t, _c, f in batch) - min(c for _t, c, _f in batch))
                per_request = sum(t / (f - c) for t, c, f in batch) / len(batch)
                where = (name, level["concurrency"])
                assert repeat["aggregate_tok_s"] == pytest.approx(aggregate, rel=0.02), where
                assert repeat["per_request_tok_s"] == pytest.approx(per_request, rel=0.02), where
        assert cursor == len(requests)
    ddtree = variants(out.doc)["ddtree-b16"]["levels"][0]
    assert ddtree["ms_per_round"]["mean"] == pytest.approx(120, rel=0.05)  # the stand-in's round, measured


def test_ratios_have_their_spread(full):
    _env, _logs, out = full
    runs = variants(out.doc)
    for level, base in zip(runs["ddtree-b16"]["levels"], runs["baseline"]["levels"]):
        ratios = [a["aggregate_tok_s"] / b["aggregate_tok_s"] for a, b in zip(level["repeats"], base["repeats"])]
        assert level["vs_baseline"] == pytest.approx({"mean": sum(ratios) / 2, "min": min(ratios), "max": max(ratios)})
    assert all(level["vs_dflash"]["mean"] == pytest.approx(1.0) for level in runs["dflash"]["levels"])


def test_json_keys_are_pinned(full):
    _env, _logs, out = full
    doc = out.doc
    assert list(doc) == ["patchkit", "command", "ok", "exit_code", "result"]
    assert (doc["command"], doc["ok"], doc["exit_code"]) == ("bench", True, 0)
    result = doc["result"]
    assert result["schema"] == 1
    assert list(result) == ["schema", "mode", "set_id", "gpus", "preflight", "logs", "prompt_file", "prompts",
                            "skipped_prompts", "max_new_tokens", "budgets", "concurrency", "repeats", "warmup",
                            "outputs_checked", "variants", "mismatches", "expected_tree_gain", "tree_gain",
                            "projection", "sampling", "phases", "report", "plot", "plot_note", "failures",
                            "prompt_sets", "fastest_dflash", "changing_load", "start_timeout_s", "not_started", "notes"]
    run = result["variants"][1]
    assert list(run) == ["name", "label", "kind", "budget", "argv", "log", "ready_s", "teardown", "failure",
                         "log_tail", "levels", "backend", "overlap", "start_limit_s", "not_started"]
    level = run["levels"][0]
    assert list(level) == ["concurrency", "requests", "repeats", "per_request_tok_s", "aggregate_tok_s", "ttft_ms",
                           "ms_per_round", "accept_length", "histogram", "compared", "mismatches", "vs_baseline",
                           "vs_dflash", "dflash_reference", "phases", "prompt_set", "load", "baseline_reference"]
    assert list(result["prompt_sets"][0]) == ["name", "file", "prompts", "mean_tokens", "skipped", "generated"]
    assert list(result["fastest_dflash"][0]) == ["prompt_set", "concurrency", "variant", "label", "backend", "overlap",
                                                 "aggregate_tok_s"]
    assert list(level["repeats"][0]) == ["requests", "output_tokens", "wall_s", "aggregate_tok_s",
                                         "per_request_tok_s", "ttft_ms", "ms_per_round", "verify_rounds",
                                         "accept_length"]
    assert list(level["histogram"]) == ["counts", "source", "requests", "left_out"]
    assert list(level["per_request_tok_s"]) == ["mean", "min", "max"]
    assert list(result["projection"]["rows"][0]) == ["variant", "concurrency", "measured_ms_per_round",
                                                      "accept_length", "projected_tok_s", "vs_dflash", "vs_baseline",
                                                      "note", "dflash_reference", "prompt_set"]


def test_projection_uses_the_measured_round_cost(full):
    _env, _logs, out = full
    projection = out.doc["result"]["projection"]
    assert projection["source"].startswith("Ringel & Romano")
    rows = {(r["variant"], r["concurrency"]): r for r in projection["rows"]}
    runs = variants(out.doc)
    dflash = rows[("dflash", 1)]
    assert dflash["measured_ms_per_round"] == pytest.approx(runs["dflash"]["levels"][0]["ms_per_round"]["mean"])
    assert dflash["projected_tok_s"] == pytest.approx(7.79 / dflash["measured_ms_per_round"] * 1000)
    b16 = rows[("ddtree-b16", 1)]
    assert b16["accept_length"] == 8.61 and b16["vs_dflash"] == pytest.approx(b16["projected_tok_s"] / dflash["projected_tok_s"])
    assert rows[("baseline", 1)]["vs_baseline"] == pytest.approx(1.0)
    # B=8 is not in the table: interpolated in log2(B) along its nearest segment (16 -> 32), noted.
    b8 = rows[("ddtree-b8", 1)]
    assert b8["accept_length"] == pytest.approx(8.61 - (9.27 - 8.61)) and "interpolated" in b8["note"]


def test_report_and_plot_are_written(full):
    env, _logs, out = full
    report = (env.tmp / "report.md").read_text()
    assert out.doc["result"]["report"] == str(env.tmp / "report.md")
    assert "| DDTREE B=16 | short | 4 |" in report and "## Projected with a published acceptance table" in report
    assert "## Servers" in report and "## Fastest DFLASH per level (every x DFLASH is against it)" in report
    assert "**measured**" in report and "**projected**" in report and report.rstrip().endswith("bench: PASS")
    pytest.importorskip("matplotlib")
    png = env.tmp / "bench.png"
    assert out.doc["result"]["plot"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_human_output_and_a_diverging_variant_fails(bench_env):
    out = bench_env.run("--variants", "baseline,ddtree", "--budgets", "8", "--concurrency", "1", "--repeats", "1",
                        "--warmup", "0", as_json=False, role="DDTREE", diverge_at="3")
    assert out.code == 1, out.stdout + out.stderr
    assert "MISMATCH DDTREE B=8 c=1 repeat 0 prompt short at 3" in out.stdout
    assert "bench: FAIL: 4 outputs differ from the baseline's greedy output" in out.stdout
    assert "4/4 DIFFER" in out.stdout and "identical" in out.stdout  # the baseline row still matches itself
    assert alive(server_pids(bench_env.tmp / "logs")) == set()


def test_a_tree_that_accepts_no_more_than_the_chain_fails_the_expected_gain(bench_env):
    out = bench_env.run("--variants", "dflash,ddtree", "--budgets", "16", "--concurrency", "1", "--repeats", "1",
                        "--expect-tree-gain", "1.3", tree_gain="0")
    assert out.code == 1
    assert "ddtree-b16: accept length 2.00 is 1.00x DFLASH's 2.00, below the expected 1.3x" in out.doc["result"]["failures"]
    assert out.doc["result"]["outputs_checked"] is False  # no baseline selected: nothing to compare with


def test_a_crashing_variant_fails_and_the_others_still_run(bench_env):
    out = bench_env.run("--concurrency", "1", "--repeats", "1", "--budgets", "8", role="DFLASH", crash_at_start="1")
    assert out.code == 1
    runs = variants(out.doc)
    assert "exited with code 1 before it was ready" in runs["dflash"]["failure"]
    assert "crash at start" in runs["dflash"]["log_tail"]
    assert runs["ddtree-b8"]["failure"] is None and runs["ddtree-b8"]["levels"][0]["mismatches"] == []
    assert alive(server_pids(bench_env.tmp / "logs")) == set()


def test_sampling_stays_exact_and_a_broken_acceptance_rule_is_caught(bench_env):
    # 128 samples (half the default): the stand-in's broken rule must still be caught.
    args = ("--sampling", "--variants", "baseline,ddtree", "--budgets", "8", "--concurrency", "16", "--samples", "128")
    good = bench_env.run(*args, "--report", str(bench_env.tmp / "sampling.md"), logs=bench_env.tmp / "logs-good")
    assert good.code == 0, good.stdout + good.stderr
    report = (bench_env.tmp / "sampling.md").read_text()
    assert "| tokens: chi-square | df | p-value | verdict |" in report and "| log-probs: chi-square |" in report
    assert "DDTREE B=8: 8 tests, each fails below 0.00013; log-probs scored." in report
    check = good.doc["result"]["sampling"]
    assert (check["samples"], check["tokens"], check["alpha"], check["logprob_bins"]) == (128, 4, 0.001, 8)
    variant = check["variants"][0]
    # the JSON keys, pinned: the old ones in their order, the log-prob test's, the power's and the tree's at the end
    assert list(check) == ["prompt_id", "samples", "tokens", "seed", "alpha", "servers", "variants", "failures",
                           "logprob_bins", "distortion", "target_power"]
    assert list(variant) == ["variant", "label", "positions", "threshold", "same_as_baseline", "ok", "tests",
                             "logprob_note", "power", "tree", "tree_note"]
    assert (check["distortion"], check["target_power"]) == ("broken-rule-position-1", 0.99)
    # 128 samples: the power against the broken rule's distortion, at this run's threshold, is said
    assert variant["power"] == pytest.approx(power.power(power.BROKEN_RULE, 128, 0.001 / 8).power)
    assert 0.5 < variant["power"] < 0.7
    assert f"DDTREE B=8: power {variant['power']:.3f} against broken-rule-position-1 at 128 samples" in report
    # the stand-in's tree rounds, counted over the sampling requests (its DDTREE trees always branch; its
    # tree gain at B=8 is one token beyond the chain's per round)
    tree = variant["tree"]
    assert list(tree) == ["rounds", "request_rounds", "branched", "off_chain", "off_chain_tokens", "accepted_tokens"]
    assert tree["branched"] == tree["request_rounds"] >= 128 and tree["rounds"] >= 128 // 16
    assert 0 < tree["off_chain"] <= tree["off_chain_tokens"] <= tree["accepted_tokens"] <= 128 * 3
    assert variant["tree_note"] is None and "NOT EXERCISED" not in report
    assert f"DDTREE B=8: tree: {tree['branched']} of {tree['request_rounds']} request-rounds" in report
    assert list(variant["positions"][0]) == ["position", "test", "distinct_baseline", "distinct_variant",
                                             "logprob_test", "logprob_bins"]
    assert list(variant["positions"][0]["logprob_test"]) == ["statistic", "df", "p_value", "categories"]
    assert (variant["tests"], variant["threshold"], variant["logprob_note"]) == (8, 0.001 / 8, None)
    tests = variant["positions"]
    assert len(tests) == 4 and all(p["test"]["p_value"] >= 0.001 / 8 for p in tests)
    assert all(p["logprob_test"]["p_value"] >= 0.001 / 8 for p in tests)
    # The stand-in's distribution depends on the whole prefix, as a real model's: from position 2 on
    # the tokens spread so far that the token test pools them into one column and sees nothing ...
    assert tests[0]["test"]["df"] == 5 and tests[2]["test"]["df"] <= 1 and tests[3]["test"]["df"] == 0
    assert tests[3]["distinct_baseline"] > 60
    # ... while the log-prob test has categories at every position (6 values: log of each weight).
    assert all(p["logprob_test"]["df"] >= 3 and p["logprob_bins"] >= 4 for p in tests)
    # the baseline ran last (it scored everyone's samples), the DDTREE server first
    assert [s["name"] for s in check["servers"]] == ["ddtree-b8-sampling", "baseline-sampling"]

    broken = bench_env.run(*args, logs=bench_env.tmp / "logs-broken", broken_accept="1")
    assert broken.code == 1
    assert broken.doc["result"]["sampling"]["variants"], broken.doc["result"]["failures"]
    positions = broken.doc["result"]["sampling"]["variants"][0]["positions"]
    assert positions[0]["test"]["p_value"] > 0.01  # the prefill token is not speculative
    assert positions[0]["logprob_test"]["p_value"] > 0.01
    assert all(p["logprob_test"]["p_value"] < 0.001 / 8 for p in positions[1:])  # every speculative position caught
    assert positions[3]["test"]["p_value"] >= 0.001 / 8  # the spread tokens hide it from the token test there
    failure = broken.doc["result"]["failures"][0]
    assert failure.startswith("DDTREE B=8: ")
    assert "log-prob distribution at position 2 differs from the baseline's" in failure
    assert "log-prob distribution at position 3 differs from the baseline's" in failure
    assert "token distribution at position 3" not in failure
    log = (bench_env.tmp / "logs-broken" / "ddtree-b8-sampling.log").read_text()
    assert "--speculative-ddtree-budget 8" in log.splitlines()[0]


def test_sampling_takes_the_sample_count_of_the_power_calculation_by_default(bench_env):
    # No --samples: the fewest samples whose power against the broken rule's distortion reaches 0.99 at the
    # threshold of a scored run (8 tests at 4 tokens), and the run says the power it had.
    out = bench_env.run("--sampling", "--variants", "baseline,ddtree", "--budgets", "8", "--concurrency", "16",
                        as_json=False)
    assert out.code == 0, out.stdout + out.stderr
    expected = sampling.default_samples(4)
    assert expected == power.samples_for_power(power.BROKEN_RULE, 0.001 / 8) and 200 < expected < 300
    assert f"sampling at T=1: {expected} x 4 tokens" in out.stdout
    shown = re.search(r"DDTREE B=8: power (\d\.\d+) against broken-rule-position-1 at (\d+) samples", out.stdout)
    assert shown and int(shown[2]) == expected and float(shown[1]) >= 0.99, out.stdout


def test_sampling_says_so_when_the_tree_never_took_a_token_a_chain_would_not(bench_env):
    # A DDTREE server that accepts no more than the chain: the check passes, and says the tree was not exercised.
    args = ("--sampling", "--variants", "baseline,ddtree", "--budgets", "8", "--concurrency", "16", "--samples", "64")
    out = bench_env.run(*args, tree_gain="0")
    assert out.code == 0, out.stdout + out.stderr
    tree = out.doc["result"]["sampling"]["variants"][0]["tree"]
    assert tree["branched"] == tree["request_rounds"] > 0 and tree["off_chain"] == tree["off_chain_tokens"] == 0
    human = bench_env.run(*args, as_json=False, logs=bench_env.tmp / "logs-human", tree_gain="0")
    assert "the tree was NOT EXERCISED" in human.stdout, human.stdout


def test_sampling_without_scores_falls_back_to_the_token_test(bench_env):
    """A baseline that refuses return_logprob (HTTP 400, as a DDTREE server answers): the log-prob
    test is reported as not scored, with the reason, and the token test alone decides."""
    args = ("--sampling", "--variants", "baseline,ddtree", "--budgets", "8", "--concurrency", "16", "--samples", "64")
    out = bench_env.run(*args, role="baseline", no_logprob="1")
    assert out.code == 0, out.stdout + out.stderr
    variant = out.doc["result"]["sampling"]["variants"][0]
    note = variant["logprob_note"]
    assert note.startswith("HTTP 400") and "return_logprob is not supported" in note
    assert (variant["tests"], variant["threshold"]) == (4, 0.001 / 4)
    assert all(p["logprob_test"] is None and p["logprob_bins"] == 0 for p in variant["positions"])
    human = bench_env.run(*args, as_json=False, logs=bench_env.tmp / "logs-human", role="baseline", no_logprob="1")
    assert "log-probs not scored: HTTP 400" in human.stdout, human.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--budgets", "4"), "--budgets 4: DDTREE needs a budget >= draft block size - 1 = 7"),
    (("--budgets", "512"), "--budgets 512: above the profile's max_budget 256"),
    (("--concurrency", "1,32"), "--concurrency 32: the server runs at most 16 requests at once"),
    (("--concurrency", "8", "--", "--max-running-requests", "4"),
     "--concurrency 8: the server runs at most 4 requests at once (--max-running-requests)"),
    (("--variants", "baseline,eagle"), "the set's profile (ddtree@1) has no variant 'eagle'"),
    (("--variants", "baseline", "--budgets", "8"), "--budgets given, but no selected variant takes a budget"),
    (("--variants", "baseline,ddtree", "--expect-tree-gain", "1.3"), "--expect-tree-gain needs a chain (DFLASH)"),
    (("--sampling", "--variants", "dflash"), "--sampling compares a speculative variant with the baseline"),
    (("--sampling", "--samples", "10"), "--samples 10: at least 64 are needed"),
])
def test_bad_input_is_one_line_before_anything_starts(bench_env, args, message):
    out = bench_env.run(*args, as_json=False)
    assert out.code == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("patchkit bench: error: ") and message in lines[0], lines
    assert not (bench_env.tmp / "logs").exists()


def test_bad_concurrency_value_is_a_usage_error(bench_env):
    out = bench_env.run("--concurrency", "1,0")
    assert out.code == 2 and "every value must be a positive integer" in out.stderr


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--budgets", "64,,16", "'64,,16' has an empty item: separate the values with single commas"),
    ("--concurrency", "1,8,", "'1,8,' has an empty item"),
    ("--budgets", "abc", "'abc' is not a comma-separated list of positive integers or auto"),
])
def test_a_malformed_list_is_refused_before_any_server_starts(bench_env, option, value, message):
    out = bench_env.run(option, value, as_json=False)
    assert out.code == 2 and message in " ".join(out.stderr.split()), out.stderr
    assert not (bench_env.tmp / "logs").exists()


def test_model_without_config_and_port_in_use_fail_preflight(bench_env):
    (bench_env.model / "config.json").unlink()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", bench_env.port))
        holder.listen()
        out = bench_env.run()
    assert out.code == 2
    message = out.doc["error"]["message"]
    assert f"model: {bench_env.model / 'config.json'} not found" in message
    assert f"port {bench_env.port} is already in use" in message
    assert not (bench_env.tmp / "logs").exists()


def test_broken_acceptance_table_names_the_file(bench_env):
    table = bench_env.tmp / "acc.toml"
    table.write_text('source = "x"\n[ddtree.accept_length]\n16 = 0.5\n')
    out = bench_env.run("--acceptance", str(table))
    assert out.code == 2 and out.doc["error"]["file"] == str(table)
    assert "[ddtree.accept_length] 16 must be a number >= 1" in out.doc["error"]["message"]


def test_plot_without_matplotlib_says_so_before_anything_starts(bench_env):
    shadow = bench_env.tmp / "no-mpl"
    shadow.mkdir()
    (shadow / "matplotlib.py").write_text("raise ImportError('No module named matplotlib (test)')\n")
    out = bench_env.run("--plot", str(bench_env.tmp / "p.png"), env={"PYTHONPATH": f"{shadow}:{REPO_ROOT}"})
    assert out.code == 2
    assert "--plot needs matplotlib" in out.doc["error"]["message"] and "patchkit[plot]" in out.doc["error"]["hint"]
    assert not (bench_env.tmp / "logs").exists()


def test_ctrl_c_while_requests_hang_tears_the_server_down(bench_env):
    """The client threads are stuck in requests; Ctrl-C still reaches the main thread and the teardown."""
    import os
    import signal
    import subprocess
    import time

    process = subprocess.Popen(bench_env.argv("--variants", "baseline,ddtree", "--budgets", "8", "--concurrency", "4"),
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATCHKIT_HOME": str(bench_env.tmp / "h"),
                                    "SGLANG_STANDIN_ROLE": "DDTREE", "SGLANG_STANDIN_HANG": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=bench_env.tmp)
    log = bench_env.tmp / "logs" / "ddtree-b8.log"
    try:
        deadline = time.monotonic() + 60
        while not (log.is_file() and "request stuck" in log.read_text()):
            assert time.monotonic() < deadline and process.poll() is None, "the DDTREE server never got a request"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert "interrupted during check of the ddtree-b8 server" in stderr and "no process left" in stderr
    assert alive(server_pids(bench_env.tmp / "logs")) == set()
