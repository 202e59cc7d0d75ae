"""The per-phase round timer of the DFlash-family workers (``spec_phase_timing.py``), on CPU, where its
marks are host times: what it writes, when, and that it is off unless asked for. Every set whose tree
carries the module runs it."""

from __future__ import annotations

import json
import time

import pytest
from core_fixtures import speculative_module

timing = speculative_module("spec_phase_timing")


def _round(timer, bs, **fields):
    timer.start(bs)
    time.sleep(0.002)
    timer.phase("draft")
    timer.phase("tree")
    time.sleep(0.003)
    timer.phase("verify")
    timer.finish(**fields)


def test_off_unless_the_variable_names_a_file_and_only_on_rank_zero(monkeypatch, tmp_path):
    monkeypatch.delenv(timing.PHASE_TIMING_ENV, raising=False)
    assert timing.phase_timer_from_env("DDTREE", "cpu", 0) is timing.PHASES_OFF
    monkeypatch.setenv(timing.PHASE_TIMING_ENV, str(tmp_path / "rounds.jsonl"))
    assert timing.phase_timer_from_env("DDTREE", "cpu", 1) is timing.PHASES_OFF
    on = timing.phase_timer_from_env("DDTREE", "cpu", 0)
    assert on.enabled and on.path == str(tmp_path / "rounds.jsonl")
    off = timing.PHASES_OFF  # every call is a no-op
    off.start(4), off.phase("draft"), off.finish(width=16), off.flush()


def test_one_line_per_round_with_the_phases_the_gap_and_the_fields(tmp_path):
    path = tmp_path / "rounds.jsonl"
    timer = timing.RoundPhaseTimer("DDTREE", str(path), "cpu")
    _round(timer, 2, width=17, budget=16, draft_graph=True)
    _round(timer, 3, width=33, budget=32, draft_graph=False)
    assert not path.exists()  # read back when a later round starts, written at most every FLUSH_S
    time.sleep(timing.FLUSH_S + 0.05)
    timer.start(3)  # after an idle spell: everything read back so far is written at once
    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert (first["bs"], first["width"], first["budget"], first["draft_graph"]) == (2, 17, 16, True)
    assert (second["bs"], second["width"]) == (3, 33) and first["algorithm"] == "DDTREE"
    for record in (first, second):
        gpu = record["gpu"]
        parts = sum(gpu[p] for p in timing.PHASES)
        assert parts == pytest.approx(gpu["round"], abs=0.01)
        assert gpu["draft"] >= 1.5 and gpu["verify"] >= 2.5  # the sleeps above, in ms
    assert "gap" not in first["gpu"] and second["gpu"]["gap"] >= 0  # the gap needs a previous round
    assert second["t"] > first["t"]


def test_a_backlog_drops_the_oldest_rounds_and_counts_them(tmp_path):
    timer = timing.RoundPhaseTimer("DFLASH", str(tmp_path / "r.jsonl"), "cpu")
    timer._ready = lambda round_: False  # the device never catches up
    for _ in range(timing.MAX_PENDING + 5):
        _round(timer, 1)
    assert timer.dropped == 5 and len(timer._pending) == timing.MAX_PENDING


def test_a_phase_or_finish_outside_a_round_and_a_flush_of_nothing_write_nothing(tmp_path):
    path = tmp_path / "rounds.jsonl"
    timer = timing.RoundPhaseTimer("DDTREE", str(path), "cpu")
    timer.phase("draft")  # no round started: ignored
    timer.finish(width=9)
    timer.flush()
    assert not path.exists() and timer.rounds == 0 and not timer._pending


def test_a_device_tensor_field_is_copied_at_the_round_and_written_as_a_list(tmp_path):
    # DDTREE's tree counts stay on the device: the timer copies them before the round's end mark (so the
    # read-back needs no sync) and writes the copy, not what the tensor holds by then.
    if not hasattr(timing.RoundPhaseTimer, "_staged"):
        pytest.skip("this tree's timer writes host values only (no device fields)")
    import torch

    path = tmp_path / "rounds.jsonl"
    timer = timing.RoundPhaseTimer("DDTREE", str(path), "cpu")
    counts = torch.tensor([3, 1, 2, 5])
    _round(timer, 4, width=16, tree=counts)
    counts.zero_()  # the next round reuses the buffer
    timer.start(1)
    timer.flush()
    (record,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["tree"] == [3, 1, 2, 5] and record["width"] == 16
