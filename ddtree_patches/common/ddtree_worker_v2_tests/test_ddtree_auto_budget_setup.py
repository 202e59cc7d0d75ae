"""``--speculative-ddtree-budget auto``'s set-up and per-round bookkeeping in DDTreeWorkerV2, on CPU.

What runs is the tree's own ``_init_budget_policy`` (the widths' runners, the timed cost table, the
policy, the statistics slots; the fallback when a width could not be timed), ``_verify_width_runner``
(the swap of the target's graph runner and attention backend for one round), the statistics read-back's
early returns, ``_time_graph_replays`` without graphs, and the test-only broken acceptance rule. Only
what needs a GPU is stood in for: the capture of a verify graph (``_capture_verify_width``) and the
replay timing of the captured graphs (``_time_graph_replays``, replaced by a table of milliseconds).
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import torch

worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")
from sglang.srt.speculative import ddtree_utils  # noqa: E402

budget_mod = pytest.importorskip("sglang.srt.speculative.ddtree_budget")

Worker = worker_mod.DDTreeWorkerV2


def _worker(widths=(4, 8, 16)):
    """A DDTreeWorkerV2 of ``widths`` whose target runner captured the widest verify graph."""
    worker = MagicMock()
    worker.auto_widths = widths
    worker.verify_width = widths[-1]
    worker.device = "cpu"
    worker.ps.tp_rank = 0
    worker._target_tp_rank = 0
    worker.model_runner.decode_cuda_graph_runner = SimpleNamespace(name=f"graphs of N={widths[-1]}")
    worker.model_runner.attn_backend = SimpleNamespace(name=f"backend of N={widths[-1]}")
    worker._capture_verify_width.side_effect = lambda widest, width: (
        SimpleNamespace(name=f"graphs of N={width}", width=width), SimpleNamespace(name=f"backend of N={width}"))
    worker._auto_fallback.side_effect = lambda why: Worker._auto_fallback(worker, why)
    return worker


def _timed(ms_by_width):
    def time_graph_replays(runner):
        width = getattr(runner, "width", None) or max(ms_by_width)
        return [(bs, ms) for bs, ms in ms_by_width.get(width, {}).items()]
    return time_graph_replays


def test_auto_captures_every_width_times_it_and_builds_the_policy(monkeypatch):
    monkeypatch.setattr(worker_mod, "_time_graph_replays", _timed({4: {1: 1.0, 8: 2.0}, 8: {1: 1.5, 8: 3.0},
                                                                    16: {1: 2.5, 8: 6.0}}))
    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: SimpleNamespace(world_size=1))
    monkeypatch.delenv("SGLANG_DDTREE_ACCEPT_MODEL", raising=False)
    worker = _worker()
    Worker._init_budget_policy(worker)
    assert sorted(worker._width_runners) == [4, 8, 16]
    assert [c.args[1] for c in worker._capture_verify_width.call_args_list] == [4, 8]  # 16: the target's own
    policy = worker._policy
    assert policy.widths == (4, 8, 16) and policy.learn_rest and policy.accept_model is None
    assert policy.costs.verify_ms(8, 8) == 3.0 and policy.costs.describe().startswith("N=4: bs1=1.00")
    assert len(worker._stats_slots) == worker_mod.STATS_LAG + 1
    assert all(slot.device.shape == (4,) for slot in worker._stats_slots)


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "non-overlap"])
def test_auto_times_each_period_as_the_round_the_scheduler_waited_for(monkeypatch, overlap):
    monkeypatch.setattr(worker_mod, "_time_graph_replays", _timed({4: {1: 1.0}, 8: {1: 1.5}, 16: {1: 2.5}}))
    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: SimpleNamespace(world_size=1))
    worker = _worker()
    worker.server_args.disable_overlap_schedule = not overlap
    Worker._init_budget_policy(worker)
    if not hasattr(worker._policy, "period_lag"):
        pytest.skip("this tree's auto policy times every period as the last round")
    assert worker._policy.period_lag == (1 if overlap else 0)


def test_auto_falls_back_to_the_chain_when_a_width_could_not_be_timed(monkeypatch):
    monkeypatch.setattr(worker_mod, "_time_graph_replays", _timed({4: {1: 1.0}, 16: {1: 2.5}}))  # 8: nothing
    worker = _worker()
    Worker._init_budget_policy(worker)
    assert worker._policy is None and worker._fixed_width == 4


def test_a_round_runs_on_its_widths_runner_and_the_widest_is_restored(monkeypatch):
    worker = _worker()
    runner = worker.model_runner
    widest = (runner.decode_cuda_graph_runner, runner.attn_backend)
    narrow = (SimpleNamespace(name="graphs of N=8"), SimpleNamespace(name="backend of N=8"))
    worker._width_runners = {16: widest, 8: narrow}
    with Worker._verify_width_runner(worker, 16):
        assert (runner.decode_cuda_graph_runner, runner.attn_backend) == widest
    with pytest.raises(RuntimeError), Worker._verify_width_runner(worker, 8):
        assert (runner.decode_cuda_graph_runner, runner.attn_backend) == narrow
        raise RuntimeError("the verify failed")
    assert (runner.decode_cuda_graph_runner, runner.attn_backend) == widest


def test_the_statistics_of_a_tree_without_scores_or_of_an_empty_slot_are_skipped():
    worker = _worker()
    worker._stats_slots = [worker_mod._StatsSlot.allocate(4, "cpu") for _ in range(worker_mod.STATS_LAG + 1)]
    worker._stats_round = 0
    Worker._queue_budget_stats(worker, SimpleNamespace(node_scores=None))
    assert all(slot.width is None and not slot.device.any() for slot in worker._stats_slots)
    worker._policy = MagicMock()
    worker._stats_round = worker_mod.STATS_LAG  # the slot STATS_LAG rounds back was never filled
    Worker._read_budget_stats(worker)
    worker._policy.observe_expected.assert_not_called()


def test_graph_replays_are_timed_only_where_there_are_graphs():
    assert worker_mod._time_graph_replays(SimpleNamespace(backend=SimpleNamespace(_graphs={}))) == []
    assert worker_mod._time_graph_replays(object()) == []


def test_the_test_only_broken_rule_swaps_some_targets_for_a_drafted_child():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 32)
    log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, 6)
    tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, 6)
    tokens = torch.full((2, 7), -1, dtype=torch.int64)
    broken = worker_mod._broken_acceptance(tree, tokens)
    drafted = set(tree.node_token_ids.flatten().tolist())
    changed = broken[broken != -1]
    assert changed.numel() > 0 and set(changed.tolist()) <= drafted


class _OtherRanksMax:
    """``torch.distributed.all_reduce`` with MAX over rank 0 (this process) and another rank whose table
    holds ``other`` (in the keys' order the call receives): what the ranks' device group computes."""

    def __init__(self, other):
        self.other, self.calls = torch.tensor(other, dtype=torch.float32), []

    def __call__(self, values, op=None, group=None):
        self.calls.append((op, group))
        values.copy_(torch.maximum(values, self.other))


def test_the_tp_ranks_agree_on_the_slowest_ranks_cost_of_every_entry(monkeypatch):
    costs = budget_mod.CostTable()
    for width, bs, ms in ((8, 4, 2.0), (4, 1, 1.0), (8, 1, 1.5), (4, 8, 3.0)):
        costs.add(width, bs, ms)
    # The other rank's times, in the order (width, bs) of costs.widths() x sorted batch sizes.
    keys = [(w, bs) for w in costs.widths() for bs in sorted(costs.ms[w])]
    theirs = {(4, 1): 1.25, (4, 8): 2.0, (8, 1): 1.75, (8, 4): 1.0}
    reduce = _OtherRanksMax([theirs[key] for key in keys])
    monkeypatch.setattr(torch.distributed, "all_reduce", reduce)
    group = SimpleNamespace(device_group="the TP ranks' device group")
    agreed = worker_mod._agreed_costs(costs, group, "cpu")
    assert reduce.calls == [(torch.distributed.ReduceOp.MAX, "the TP ranks' device group")]
    assert {(w, bs): agreed.verify_ms(w, bs) for w, bs in keys} == {(4, 1): 1.25, (4, 8): 3.0, (8, 1): 1.75,
                                                                    (8, 4): 2.0}


def test_with_tp_ranks_auto_plans_on_the_agreed_table_and_stops_learning_alone(monkeypatch):
    monkeypatch.setattr(worker_mod, "_time_graph_replays", _timed({4: {1: 1.0}, 8: {1: 1.5}, 16: {1: 2.5}}))
    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: SimpleNamespace(world_size=2))
    agreed = []

    def agree(costs, tp_group, device):
        agreed.append(costs.describe())
        slower = budget_mod.CostTable()
        for width in costs.widths():
            for bs, ms in costs.ms[width].items():
                slower.add(width, bs, 2 * ms)
        return slower

    monkeypatch.setattr(worker_mod, "_agreed_costs", agree)
    worker = _worker()
    Worker._init_budget_policy(worker)
    assert len(agreed) == 1
    assert worker._policy.costs.verify_ms(8, 1) == 3.0 and not worker._policy.learn_rest
