"""Several prompt sets in one server (``--prompts short,FILE``, ``--long-prompts N``) and the changing
load (``--changing-load``: requests that arrive and finish at different times)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter

import pytest

from patchkit.bench import load, measure, phases
from patchkit.bench.prompt_sets import LONG_PROMPT_COUNT, long_set, named_files
from patchkit.bench.results import LevelRun
from patchkit.bench.run import LevelData, compare_level, reference_outputs
from patchkit.smoke.client import Generation
from patchkit.smoke.prompts import Prompt, load_prompts
from tests.bench.conftest import server_pids
from tests.smoke.conftest import PROMPTS, alive


def test_prompt_sets_by_name_and_the_generated_long_set(tmp_path):
    default = tmp_path / "set" / "prompts.jsonl"
    extra = tmp_path / "ids.jsonl"
    extra.write_text('{"id": "x", "input_ids": [3, 4]}\n')
    assert named_files(None, default) == [("short", default)]
    assert named_files(extra, default) == [("ids", extra)]  # an existing file, as before: one set
    assert named_files(type(extra)(f"short,{extra}"), default) == [("short", default), ("ids", extra)]
    long = long_set(100, tmp_path / "logs", vocab_size=50)
    assert long.name == "long-100" and long.file == tmp_path / "logs" / "long-100.jsonl" and long.generated
    assert len(long.prompts) == LONG_PROMPT_COUNT and long.mean_tokens == 100
    assert all(len(p.input_ids) == 100 and max(p.input_ids) < 50 and min(p.input_ids) >= 1 for p in long.prompts)
    assert long_set(100, tmp_path, vocab_size=50).prompts == long.prompts  # the same for every run
    long.write()
    assert load_prompts(long.file) == long.prompts  # what ran can be run again with --prompts short,FILE


def test_two_prompt_sets_are_measured_by_the_same_servers(bench_env):
    ids = bench_env.tmp / "mine.jsonl"
    ids.write_text('{"id": "m1", "input_ids": [9, 8, 7]}\n{"id": "m2", "input_ids": [6, 5]}\n')
    report = bench_env.tmp / "report.md"
    out = bench_env.run("--variants", "baseline,dflash", "--prompts", f"short,{ids}", "--long-prompts", "48",
                        "--concurrency", "1,2", "--repeats", "1", "--warmup", "0", "--max-new-tokens", "8",
                        "--report", str(report), timeout=180)
    assert out.code == 0, out.stderr + out.stdout[-2000:]
    result = out.doc["result"]
    sets = {s["name"]: s for s in result["prompt_sets"]}
    assert list(sets) == ["short", "mine", "long-48"]
    assert (sets["short"]["prompts"], sets["short"]["skipped"]) == (len(PROMPTS), [])
    assert sets["long-48"]["mean_tokens"] == 48 and sets["long-48"]["generated"] is True
    long_file = bench_env.tmp / "logs" / "long-48.jsonl"
    assert sets["long-48"]["file"] == str(long_file) and len(load_prompts(long_file)) == LONG_PROMPT_COUNT
    for run in result["variants"]:
        log = (bench_env.tmp / "logs" / f"{run['name']}.log").read_text()
        assert log.count("standin: main pid") == 1  # one server start for all three sets
        keys = [(level["prompt_set"], level["concurrency"]) for level in run["levels"]]
        assert keys == [(s, c) for s in ("short", "mine", "long-48") for c in (1, 2)]
        for level in run["levels"]:
            assert level["compared"] == level["requests"] and level["mismatches"] == []
            assert level["vs_baseline"] is not None and level["vs_dflash"] is not None
    # the stand-in saw the long prompts: its greedy tokens are a function of the prompt's ids
    dflash = {lv["prompt_set"]: lv for lv in next(r for r in result["variants"] if r["name"] == "dflash")["levels"]}
    assert dflash["long-48"]["requests"] == LONG_PROMPT_COUNT and dflash["mine"]["requests"] == 2
    # ratios and the fastest DFLASH per (prompt set, level); the baseline's ratios are against its own level
    assert sorted((f["prompt_set"], f["concurrency"]) for f in result["fastest_dflash"]) == sorted(
        (s, c) for s in ("short", "mine", "long-48") for c in (1, 2))
    baseline = {(lv["prompt_set"], lv["concurrency"]): lv for lv in result["variants"][0]["levels"]}
    for level in next(r for r in result["variants"] if r["name"] == "dflash")["levels"]:
        base = baseline[(level["prompt_set"], level["concurrency"])]
        assert level["vs_baseline"]["mean"] == pytest.approx(
            level["aggregate_tok_s"]["mean"] / base["aggregate_tok_s"]["mean"])
    text = report.read_text()
    assert "| DFLASH | long-48 | 2 |" in text and "- prompt set long-48: 8 prompts (generated, " in text
    assert alive(server_pids(bench_env.tmp / "logs")) == set()


@pytest.mark.parametrize(("args", "config", "message"), [
    (("--long-prompts", "100"), {"max_position_embeddings": 96},
     "prompt set long-100: a prompt of 100 tokens plus 12 new tokens does not fit the server's context of 96"),
    (("--long-prompts", "100", "--", "--context-length", "64"), {},
     "does not fit the server's context of 64 (--context-length)"),
    (("--prompts", "short,short"), {}, "two prompt sets are named 'short'"),
    (("--prompts", "short,missing.jsonl"), {}, "prompt file not found: missing.jsonl"),
    (("--load-requests", "8"), {}, "--load-requests is for --changing-load"),
])
def test_prompt_set_and_load_options_are_checked_before_anything_starts(bench_env, args, config, message):
    model_config = bench_env.model / "config.json"
    model_config.write_text(json.dumps({**json.loads(model_config.read_text()), **config}))
    out = bench_env.run(*args, as_json=False)
    assert out.code == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (bench_env.tmp / "logs").exists()


# ---------------------------------------------------------------- changing load


def test_the_schedule_is_a_function_of_the_seed_and_the_level():
    prompts = [Prompt("a", input_ids=(1,)), Prompt("b", input_ids=(2,))]
    plan = load.LoadPlan(seed=7)
    first = load.schedule(prompts, 8, 40, plan)
    assert first == load.schedule(prompts, 8, 40, plan)
    assert len(first.jobs) == 4 * 8 and len(first.targets) == len(first.jobs) + 1
    assert [j.prompt.id for j in first.jobs[:4]] == ["a", "b", "a", "b"]
    lengths = [j.max_new_tokens for j in first.jobs]
    assert min(lengths) >= 10 and max(lengths) <= 40 and len(set(lengths)) > 5
    assert set(first.targets) <= set(range(1, 9)) and len(set(first.targets)) > 3
    assert load.schedule(prompts, 8, 40, load.LoadPlan(seed=8)) != first
    assert len(load.schedule(prompts, 8, 40, load.LoadPlan(seed=7, requests=5)).jobs) == 5


def test_the_client_keeps_the_target_in_flight_and_redraws_it_at_every_finish():
    jobs = tuple(measure.Job(index=i, prompt=Prompt("p", input_ids=(1,)), max_new_tokens=1 + i % 3) for i in range(12))
    plan = load.Schedule(jobs=jobs, targets=(3, 1, 1, 4, 2, 2, 4, 4, 1, 3, 3, 3, 3))
    lock = threading.Lock()
    running: list[int] = []
    seen: list[tuple[int, int]] = []  # (job, requests in flight when it started)

    def work(job: measure.Job) -> int:
        with lock:
            running.append(job.index)
            seen.append((job.index, len(running)))
        time.sleep(0.02 * (job.max_new_tokens or 1))
        with lock:
            running.remove(job.index)
        return job.index

    results, trace = load.run_schedule(plan, work)
    assert results == list(range(12))  # in the jobs' order
    assert max(n for _, n in seen) <= 4 and trace[-1][1] == 0
    assert [n for _, n in trace[:3]] == [1, 2, 3]  # the first target, 3: three arrive at once
    assert trace[3][1] == 2  # the first finish; the next target is 1: nobody arrives until one is left
    counts = [n for _, n in trace]
    assert 4 in counts and 1 in counts
    shares = load.in_flight_shares([trace])
    assert sum(shares.values()) == pytest.approx(1.0) and set(shares) <= {1, 2, 3, 4}


def test_in_flight_shares_are_weighted_by_time():
    trace = [(0.0, 1), (1.0, 2), (4.0, 1), (5.0, 0)]
    assert load.in_flight_shares([trace]) == {1: pytest.approx(0.4), 2: pytest.approx(0.6)}


def _gen(ids):
    return Generation(tuple(ids), 0.0, 1.0, None, None)


def test_outputs_of_different_lengths_compare_on_the_length_each_request_asked_for():
    prompt = Prompt("p", input_ids=(1,))
    ref_jobs = [measure.Job(index=0, prompt=prompt, max_new_tokens=6), measure.Job(index=1, prompt=prompt,
                                                                                   max_new_tokens=3)]
    window = phases.Window(concurrency=2, start=0.0, end=1.0, prompt_set="short")
    reference = reference_outputs({("short", 2): LevelData(jobs=ref_jobs, batches=[[_gen(range(6)), _gen(range(3))]],
                                                           window=window)})
    assert reference == {("short", "p"): tuple(range(6))}  # the longest output of the prompt
    jobs = [measure.Job(index=i, prompt=prompt, max_new_tokens=n) for i, n in enumerate((4, 6, 8, 2))]
    outputs = [_gen(range(4)), _gen([0, 1, 2, 9, 4, 5]), _gen(range(8)), _gen([0])]
    level = LevelRun(concurrency=2, requests=4, repeats=(), per_request_tok_s=None, aggregate_tok_s=None, ttft_ms=None,
                     ms_per_round=None, accept_length=None, histogram=None, prompt_set="short")
    compared = compare_level(level, LevelData(jobs=jobs, batches=[outputs], window=window), reference)
    assert compared.compared == 4
    # a changed token at 3; a request cut short (1 token where it asked for 2); 8 tokens judged on the 6 known
    assert [(m.request, m.first_mismatch) for m in compared.mismatches] == [(1, 3), (3, 1)]


def _hand_counts(log_text: str) -> Counter[int]:
    return Counter(int(t) for t in re.findall(r"request rid=\d+ tokens=(\d+) ", log_text))


def test_a_changing_load_run(bench_env):
    report = bench_env.tmp / "report.md"
    out = bench_env.run("--changing-load", "--variants", "baseline,dflash,ddtree", "--budgets", "8,auto",
                        "--concurrency", "4", "--repeats", "1", "--warmup", "0", "--max-new-tokens", "16", "--seed",
                        "3", "--load-requests", "24", "--report", str(report), timeout=240,
                        spec_round_ms="15", round_ms="10")
    assert out.code == 0, out.stderr + out.stdout[-2000:]
    result = out.doc["result"]
    assert result["changing_load"] is True
    runs = {v["name"]: v for v in result["variants"]}
    usable = [Prompt(p["id"], input_ids=tuple(p["input_ids"])) for p in PROMPTS if "input_ids" in p]
    schedule = load.schedule(usable, 4, 16, load.LoadPlan(seed=3, requests=24))
    asked = Counter(job.max_new_tokens for job in schedule.jobs)
    for name, run in runs.items():
        (level,) = run["levels"]
        changing = level["load"]
        assert (changing["requests"], changing["seed"]) == (24, 3)
        assert (changing["tokens_min"], changing["tokens_max"]) == (min(asked), max(asked))
        assert level["compared"] == 24 and level["mismatches"] == []  # greedy outputs, each on its own length
        # every server got the same requests: the lengths in its own log are the schedule's (and a timed
        # server's one short request at the end that flushes its round records)
        probe = Counter({phases.PROBE_TOKENS: 1}) if name != "baseline" else Counter()
        assert _hand_counts((bench_env.tmp / "logs" / f"{name}.log").read_text()) == asked + probe
        shares = changing["in_flight"]
        assert sum(shares.values()) == pytest.approx(1.0) and len(shares) >= 3
        assert set(map(int, shares)) <= {1, 2, 3, 4} and 1 <= changing["mean_in_flight"] <= 4
        assert changing["request_round_p50_ms"] <= changing["request_round_p99_ms"]
        assert level["aggregate_tok_s"]["mean"] == pytest.approx(level["repeats"][0]["output_tokens"]
                                                                / level["repeats"][0]["wall_s"])
        if name == "baseline":
            assert level["phases"] is None  # a baseline has no speculative rounds to time
            continue
        timed = level["phases"]  # timed without --phases: a changing load always times the rounds
        assert timed["rounds"] > 0 and len(timed["batch_sizes"]) >= 3  # the server's batch kept changing
        assert timed["round_p50_ms"] <= timed["round_p99_ms"]
    auto = runs["ddtree-auto"]["levels"][0]["phases"]["budgets"]
    assert {"63", "31"} <= set(auto)  # the stand-in's auto picks by batch size: both alone and batched
    text = report.read_text()
    assert "## Changing load" in text and "| DDTREE auto | short | 4 | 24 |" in text
    assert "- load: changing (requests arrive and finish at different times;" in text
    assert alive(server_pids(bench_env.tmp / "logs")) == set()
