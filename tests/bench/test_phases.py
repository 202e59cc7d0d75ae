"""``patchkit bench --phases`` and the DFLASH a ratio is taken against.

The CLI test runs the stand-in servers, which write one line per decode round into the file named by
``SGLANG_SPEC_PHASE_TIMING`` as the v2 set's servers do; the unit tests pin the level windows, bad
lines, and the choice of the faster DFLASH variant per level (measured and projected).
"""

from __future__ import annotations

import json

import pytest

from patchkit.bench import phases
from patchkit.bench.acceptance import load_acceptance, project
from patchkit.bench.measure import RepeatStats
from patchkit.bench.results import LevelRun, Spread, VariantRun
from patchkit.bench.run import fastest_chains, with_ratios
from patchkit.errors import BadInput, location
from patchkit.smoke.server import Teardown
from tests.smoke.conftest import REPO_ROOT

PAPER = REPO_ROOT / "benchmarks" / "acceptance" / "ddtree-paper-qwen3-8b-math500.toml"


def test_phases_per_level_in_the_report_and_json(bench_env):
    report = bench_env.tmp / "report.md"
    out = bench_env.run("--phases", "--variants", "baseline,dflash,ddtree", "--budgets", "8", "--concurrency", "1,4",
                        "--repeats", "1", "--warmup", "0", "--max-new-tokens", "12", "--report", str(report),
                        timeout=180)
    assert out.code == 0, out.stderr + out.stdout[-2000:]
    result = out.doc["result"]
    assert result["phases"] is True
    runs = {v["name"]: v for v in result["variants"]}
    assert all(level["phases"] is None for level in runs["baseline"]["levels"])
    for name in ("dflash", "ddtree-b8"):
        assert (bench_env.tmp / "logs" / f"{name}-phases.jsonl").is_file()
        for level in runs[name]["levels"]:
            timed = level["phases"]
            assert timed["rounds"] > 0
            assert 1 <= timed["mean_bs"] <= level["concurrency"]
            gpu = timed["gpu_ms"]
            parts = gpu["draft"] + gpu["tree"] + gpu["verify"] + gpu["commit"]
            assert parts == pytest.approx(gpu["round"], rel=1e-3)
    tree = runs["ddtree-b8"]["levels"][0]["phases"]
    chain = runs["dflash"]["levels"][0]["phases"]
    assert tree["gpu_ms"]["tree"] > 0 and chain["gpu_ms"]["tree"] == 0
    assert tree["widths"] == {"9": tree["rounds"]} and tree["budgets"] == {"8": tree["rounds"]}
    # The level at concurrency 4 batched requests together; the one at 1 never did.
    assert runs["ddtree-b8"]["levels"][1]["phases"]["mean_bs"] > 1.0
    assert runs["ddtree-b8"]["levels"][0]["phases"]["mean_bs"] == 1.0
    # p50 and p99 of every phase beside the means, and the batch sizes the server ran (its round records)
    four = runs["ddtree-b8"]["levels"][1]["phases"]
    assert set(four["gpu_p50_ms"]) == set(four["gpu_p99_ms"]) == {"draft", "tree", "verify", "commit", "gap", "round"}
    assert four["gpu_p50_ms"]["round"] == four["round_p50_ms"] and four["gpu_p99_ms"]["round"] == four["round_p99_ms"]
    assert four["gpu_p50_ms"]["verify"] <= four["gpu_p99_ms"]["verify"]
    assert sum(four["batch_sizes"].values()) == four["rounds"] and set(map(int, four["batch_sizes"])) <= {1, 2, 3, 4}
    alone = runs["ddtree-b8"]["levels"][0]["phases"]
    assert alone["batch_sizes"] == {"1": alone["rounds"]}
    text = report.read_text()
    assert "## Where a round's time goes (--phases)" in text
    assert "| DDTREE B=8 | short | 4 |" in text and "p50 / p99 of each phase (device ms):" in text
    p50, p99 = four["gpu_p50_ms"]["verify"], four["gpu_p99_ms"]["verify"]
    assert f"| {p50:.2f} / {p99:.2f} |" in text


def _record(t, bs=1, draft=1.0):
    return {"t": t, "bs": bs, "gpu": {"draft": draft, "round": draft}, "host": {"round": 0.5}, "width": 9,
            "draft_graph": True, "verify_graph": bs < 3}


def test_rounds_are_kept_by_their_level_window_and_torn_lines_counted(tmp_path):
    path = tmp_path / "rounds.jsonl"
    lines = [json.dumps(_record(10.0, draft=9.0)), json.dumps(_record(11.0, bs=2, draft=2.0)),
             json.dumps(_record(11.5, bs=4, draft=4.0)), json.dumps(_record(20.0, draft=7.0)), '{"t": 21, "bs']
    path.write_text("\n".join(lines) + "\n")
    timed = phases.per_level(path, [phases.Window(concurrency=4, start=11.0, end=12.0),
                                    phases.Window(concurrency=1, start=30.0, end=31.0)])
    four = timed[("", 4)]
    assert four is not None and four.rounds == 2 and four.mean_bs == 3.0
    assert four.gpu_ms["draft"] == 3.0 and four.gpu_ms["tree"] == 0.0
    assert four.verify_graph_share == 0.5 and four.widths == {9: 2} and four.dropped_lines == 1
    assert timed[("", 1)] is None


def test_a_line_that_is_not_a_round_names_the_file_and_line(tmp_path):
    path = tmp_path / "rounds.jsonl"
    path.write_text(json.dumps(_record(1.0)) + "\n" + json.dumps({"t": 2.0, "bs": "four"}) + "\n")
    with pytest.raises(BadInput) as caught:
        phases.read_records(path)
    assert caught.value.location == location(path, 2)


def _level(concurrency, tok_s):
    repeat = RepeatStats(requests=1, output_tokens=10, wall_s=1.0, aggregate_tok_s=tok_s, per_request_tok_s=tok_s,
                         ttft_ms=1.0, ms_per_round=1.0, verify_rounds=2, accept_length=5.0)
    speed = Spread(mean=tok_s, min=tok_s, max=tok_s)
    return LevelRun(concurrency=concurrency, requests=1, repeats=(repeat,), per_request_tok_s=speed,
                    aggregate_tok_s=speed, ttft_ms=None, ms_per_round=None, accept_length=None, histogram=None)


def _run(name, kind, speeds):
    return VariantRun(name=name, label=name, kind=kind, budget=None, argv=(), log=REPO_ROOT / "x.log", ready_s=None,
                      teardown=Teardown(sigterm_sent=True, sigkill_sent=False, seconds=0.0, exit_code=0,
                                        leftover_pids=()),
                      levels=tuple(_level(c, s) for c, s in speeds.items()))


def test_ratios_are_against_the_faster_dflash_at_each_level():
    runs = [_run("dflash", "chain", {1: 100.0, 8: 300.0}), _run("dflash-sync", "chain", {1: 120.0, 8: 200.0}),
            _run("ddtree-b16", "tree", {1: 132.0, 8: 330.0})]
    assert {c: run.name for (_, c), (run, _) in fastest_chains(runs).items()} == {1: "dflash-sync", 8: "dflash"}
    tree = with_ratios(runs)[2]
    one, eight = tree.levels
    assert (one.dflash_reference, eight.dflash_reference) == ("dflash-sync", "dflash")
    assert one.vs_dflash.mean == pytest.approx(1.1) and eight.vs_dflash.mean == pytest.approx(1.1)


def test_the_projection_takes_the_faster_dflash_per_level_too():
    table = load_acceptance(PAPER)
    rows = project([("dflash", "chain", None, 1, 6.0, ""), ("dflash-sync", "chain", None, 1, 8.0, ""),
                    ("dflash", "chain", None, 8, 9.0, ""), ("dflash-sync", "chain", None, 8, 7.0, ""),
                    ("ddtree-b16", "tree", 16, 1, 6.0, ""), ("ddtree-b16", "tree", 16, 8, 7.0, "")], table)
    tree = {r.concurrency: r for r in rows if r.variant == "ddtree-b16"}
    assert (tree[1].dflash_reference, tree[8].dflash_reference) == ("dflash", "dflash-sync")
    assert tree[1].vs_dflash == pytest.approx(8.61 / 7.79)
    assert tree[8].vs_dflash == pytest.approx(8.61 / 7.79)


def test_an_auto_tree_is_timed_fed_the_table_and_projected_from_its_choices(bench_env):
    # auto without --phases: its rounds are still timed (each line carries the round's budget);
    # with --acceptance the server gets the table as its acceptance model and the projection
    # weighs the table's accept length of every budget it chose.
    out = bench_env.run("--variants", "dflash,ddtree", "--budgets", "8,auto", "--concurrency", "1,4",
                        "--repeats", "1", "--warmup", "0", "--max-new-tokens", "12", "--acceptance", str(PAPER),
                        timeout=180)
    assert out.code == 0, out.stderr + out.stdout[-2000:]
    runs = {v["name"]: v for v in out.doc["result"]["variants"]}
    assert set(runs) == {"dflash", "ddtree-b8", "ddtree-auto"}
    auto = runs["ddtree-auto"]
    assert auto["label"] == "DDTREE auto" and auto["budget"] == "auto"
    assert "--speculative-ddtree-budget auto" in (bench_env.tmp / "logs" / "ddtree-auto.log").read_text()
    assert "standin: accept model" in (bench_env.tmp / "logs" / "ddtree-auto.log").read_text()
    assert all(level["phases"] is None for level in runs["ddtree-b8"]["levels"])  # a fixed budget: not timed
    one, four = auto["levels"]
    assert one["phases"]["budgets"] == {"63": one["phases"]["rounds"]}  # alone: the widest tree
    assert set(four["phases"]["budgets"]) <= {"63", "31"} and "31" in four["phases"]["budgets"]
    rows = {(r["variant"], r["concurrency"]): r for r in out.doc["result"]["projection"]["rows"]}
    table = load_acceptance(PAPER)
    assert rows[("ddtree-auto", 1)]["accept_length"] == pytest.approx(table.accept_length("tree", 63))
    assert rows[("ddtree-auto", 1)]["note"] == "auto chose B=63: 100%"
    assert rows[("ddtree-b8", 1)]["note"].startswith("B=8 interpolated")


def test_a_budget_that_is_neither_a_number_nor_auto_is_a_usage_error(bench_env):
    out = bench_env.run("--budgets", "16,sixty", as_json=False)
    assert out.code == 2 and "--budgets" in out.stderr and "sixty" in out.stderr


def test_the_round_median_and_99th_percentile_are_reported_beside_the_mean():
    rounds = [{**_record(float(t)), "gpu": {"round": ms}} for t, ms in enumerate([2.0] * 98 + [3.0, 40.0])]
    stats = phases.summarize(rounds)
    assert stats is not None
    assert stats.round_p50_ms == 2.0 and stats.round_p99_ms == 3.0  # one stall in 100 rounds is past the p99
    assert stats.gpu_ms["round"] == pytest.approx((98 * 2.0 + 3.0 + 40.0) / 100)
    stalled = phases.summarize([*rounds[:90], *({**r, "gpu": {"round": 40.0}} for r in rounds[90:])])
    assert stalled is not None and stalled.round_p99_ms == 40.0
