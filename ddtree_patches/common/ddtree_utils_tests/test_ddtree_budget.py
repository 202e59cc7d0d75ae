"""The per-round budget policy of ``--speculative-ddtree-budget auto`` (``ddtree_budget.py``), on
its own: the widths, the acceptance models, the cost table, the choice, and the flag's parsing. Every
set whose tree carries the module runs it (v2 and v3 carry the same file; v1 has none and skips)."""

from __future__ import annotations

import itertools
import math

import pytest
from core_fixtures import speculative_module

budget_mod = speculative_module("ddtree_budget")

PAPER = {16: 8.61, 32: 9.27, 64: 9.75, 128: 10.20}

#: The policy of ddtree@2.3.0 (v3 still carries it): the round learnt per (batch size, width), probes of
#: PROBE_ROUNDS rounds at doubling gaps at every batch size.
PER_BATCH_SIZE_TABLES = pytest.mark.skipif(
    not hasattr(budget_mod, "PROBE_MAX_GAP"),
    reason="this tree's ddtree_budget prices rounds with one cost model for every batch size (RoundCostModel)")
#: The policy since: one round-cost model for every batch size, probes where it is uncertain.
COST_MODEL = pytest.mark.skipif(
    not hasattr(budget_mod, "RoundCostModel"),
    reason="this tree's ddtree_budget has no RoundCostModel: a capability this set does not carry")


def test_auto_widths_are_multiples_of_the_draft_block_up_to_the_widest():
    assert budget_mod.auto_verify_widths(16, 64) == (16, 32, 64)
    assert budget_mod.auto_verify_widths(8, 40) == (8, 16, 32)
    assert budget_mod.auto_verify_widths(16, 15) == ()


def test_the_accept_table_is_exact_at_its_points_and_log_linear_between():
    assert budget_mod.interpolate_accept(PAPER, 32) == pytest.approx(9.27)
    between = budget_mod.interpolate_accept(PAPER, 45)
    t = math.log2(45 / 32)
    assert between == pytest.approx(9.27 + t * (9.75 - 9.27))
    below = budget_mod.interpolate_accept(PAPER, 15)
    assert below < 8.61 and below == pytest.approx(8.61 - math.log2(16 / 15) * (9.27 - 8.61))
    assert budget_mod.interpolate_accept({4: 2.0, 8: 2.5}, 1) == pytest.approx(1.0)  # never below 1


def _table(per_width):
    costs = budget_mod.CostTable()
    for width, by_bs in per_width.items():
        for bs, ms in by_bs.items():
            costs.add(width, bs, ms)
    return costs


# An H200-like verify: weight-bound (flat) at one request, compute-bound (per token) at 32.
VERIFY = {16: {1: 5.40, 8: 6.5, 32: 15.4}, 32: {1: 5.45, 8: 9.0, 32: 29.0}, 64: {1: 5.50, 8: 16.0, 32: 57.0}}


def test_one_request_takes_the_widest_tree_and_a_full_batch_the_chains_width():
    policy = budget_mod.BudgetPolicy(widths=(16, 32, 64), costs=_table(VERIFY), accept_model=PAPER)
    assert policy.choose(1) == 64
    assert policy.choose(32) == 16
    assert policy.chosen == {64: 1, 16: 1}
    # A batch size between captured ones costs what its graph (the next size up) costs.
    assert policy.costs.verify_ms(32, 5) == VERIFY[32][8]
    assert policy.costs.verify_ms(16, 40) == pytest.approx(15.4 * 40 / 32)  # above every graph: scaled


@PER_BATCH_SIZE_TABLES
def test_the_rest_of_the_round_is_learned_from_the_periods_and_idle_spells_are_skipped():
    policy = budget_mod.BudgetPolicy(widths=(16, 32), costs=_table(VERIFY), accept_model=PAPER)
    clock = 100.0
    policy.round_started(clock)
    for _ in range(60):
        width = policy.choose(8)
        clock += (policy.costs.verify_ms(width, 8) + 3.0) / 1e3  # 3 ms besides the verify
        policy.round_started(clock)
    assert policy.rest_ms[8] == pytest.approx(3.0, rel=0.05)
    policy.choose(8)
    policy.round_started(clock + 5.0)  # five seconds without traffic: not a round
    assert policy.rest_ms[8] == pytest.approx(3.0, rel=0.05)


def test_the_trees_own_expectations_and_the_measured_acceptance_drive_the_choice():
    flat = _table({16: {4: 5.0}, 32: {4: 5.5}})
    policy = budget_mod.BudgetPolicy(widths=(16, 32), costs=flat)
    policy.observe_expected([2.0, 2.05])  # the wider tree adds almost nothing for this batch
    assert policy.choose(4) == 16
    policy.observe_expected([2.0, 6.0])
    for _ in range(40):
        policy.observe_expected([2.0, 6.0])
    assert policy.choose(4) == 32
    for _ in range(100):  # the draft overestimates: half of what it expects is accepted
        policy.observe_accepted(32, 0.5 * policy.expected[32])
    assert policy.calibration == pytest.approx(0.5, rel=0.05)
    policy.observe_accepted(32, 1e9)
    assert policy.calibration <= budget_mod.CALIBRATION_BOUNDS[1]


@pytest.mark.parametrize(("value", "parsed"), [("auto", "auto"), ("AUTO", "auto"), ("64", 64), (16, 16)])
def test_the_budget_flag_takes_auto_or_a_whole_number(value, parsed):
    assert budget_mod.parse_ddtree_budget(value) == parsed


@pytest.mark.parametrize("value", ["0", "-3", "sixty", "1.5", ""])
def test_any_other_budget_is_refused_naming_the_flag(value):
    with pytest.raises(ValueError, match="--speculative-ddtree-budget: expected 'auto' or a whole number >= 1"):
        budget_mod.parse_ddtree_budget(value)


def test_an_accept_model_comes_from_json_or_a_file(tmp_path):
    assert budget_mod.load_accept_model('{"16": 8.61, "64": 9.75}') == {16: 8.61, 64: 9.75}
    path = tmp_path / "table.json"
    path.write_text('{"32": 9.27}')
    assert budget_mod.load_accept_model(str(path)) == {32: 9.27}
    with pytest.raises(ValueError, match="SGLANG_DDTREE_ACCEPT_MODEL"):
        budget_mod.load_accept_model('{"16": 0.5}')


def _serve(policy, bs, rounds, round_ms, accepted=None, clock=100.0):
    """Drive the policy as the worker does: round start, choice, then the round takes ``round_ms[width]``;
    ``accepted[width]`` (drafted tokens) is observed for each round. Returns the widths chosen."""
    chosen = []
    policy.round_started(clock)
    for _ in range(rounds):
        width = policy.choose(bs)
        chosen.append(width)
        if accepted is not None:
            policy.observe_accepted(width, accepted[width])
        clock += round_ms[width] / 1e3
        policy.round_started(clock)
    return chosen


def test_a_wider_tree_whose_gain_is_within_the_margin_is_not_taken():
    flat = _table({16: {4: 5.0}, 32: {4: 5.0}})
    barely = {16: 8.0, 32: 8.0 * (1 + budget_mod.GAIN_MARGIN / 2)}
    assert budget_mod.BudgetPolicy(widths=(16, 32), costs=flat, accept_model=barely).best_width(4) == 16
    clearly = {16: 8.0, 32: 8.0 * (1 + 2 * budget_mod.GAIN_MARGIN)}
    assert budget_mod.BudgetPolicy(widths=(16, 32), costs=flat, accept_model=clearly).best_width(4) == 32


@PER_BATCH_SIZE_TABLES
def test_the_whole_round_per_width_is_learned_and_a_width_that_does_not_pay_is_dropped():
    # The verify graphs say a 64-wide tree costs what 16 costs at one request; the whole round says
    # otherwise (the draft top-K and the tree grow with the width): 6.3 ms against 3.4.
    verify = _table({16: {1: 2.5}, 32: {1: 2.6}, 64: {1: 2.7}})
    policy = budget_mod.BudgetPolicy(widths=(16, 32, 64), costs=verify, accept_model=PAPER)
    real = {16: 3.4, 32: 4.6, 64: 6.3}
    chosen = _serve(policy, 1, 400, real)
    assert chosen[0] > 16  # the table alone favours a wider tree
    assert policy.round_ms[(1, 64)] == pytest.approx(6.3, rel=0.02)
    assert policy.round_ms[(1, 16)] == pytest.approx(3.4, rel=0.02)
    # 8.61 / 3.4 beats 9.27 / 4.6 and 9.75 / 6.3: after the probes the chain's width serves.
    assert policy.best_width(1) == 16
    assert chosen[-50:].count(16) >= 47


def test_a_tree_that_accepts_no_more_than_the_chain_costs_nothing():
    # The draft believes the wider tree adds accepts; the target takes no more at 32 than at 16.
    flat = _table({16: {8: 5.0}, 32: {8: 5.5}})
    policy = budget_mod.BudgetPolicy(widths=(16, 32), costs=flat)
    for _ in range(50):
        policy.observe_expected([1.0, 3.0])
    assert policy.best_width(8) == 32  # before anything is measured at 32
    chosen = _serve(policy, 8, 3000, {16: 6.0, 32: 6.6}, accepted={16: 0.95, 32: 0.95})
    assert policy.best_width(8) == 16
    assert chosen[-1000:].count(16) >= 990  # probes only, ever rarer
    assert policy.probes < 40


@PER_BATCH_SIZE_TABLES
def test_probes_grow_rarer_and_each_runs_a_few_rounds_in_a_row():
    costs = _table({16: {2: 5.0}, 32: {2: 5.5}, 64: {2: 6.0}})
    policy = budget_mod.BudgetPolicy(widths=(16, 32, 64), costs=costs, accept_model={15: 2.0, 31: 2.0, 63: 2.0})
    chosen = _serve(policy, 2, 5000, {16: 5.0, 32: 5.5, 64: 6.0})
    runs = []
    for i, width in enumerate(chosen):
        if width != 16 and (i == 0 or chosen[i - 1] != width):
            runs.append((i, width))
    assert all(chosen[i : i + budget_mod.PROBE_ROUNDS] == [w] * budget_mod.PROBE_ROUNDS for i, w in runs)
    for probed in (32, 64):
        starts = [i for i, w in runs if w == probed]
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        assert len(starts) >= 4 and gaps[-1] > 8 * gaps[0]
    assert chosen.count(16) / len(chosen) > 0.98


def test_a_wider_width_that_accepts_no_more_is_not_taken_even_when_it_measures_cheaper():
    # Host-bound rounds: every width costs about the same and the measurement favours the widest by
    # noise; the target accepts the same at every width.
    policy = budget_mod.BudgetPolicy(widths=(8, 16, 32), costs=_table({8: {1: 3.0}, 16: {1: 3.0}, 32: {1: 3.0}}))
    for _ in range(50):
        policy.observe_expected([1.0, 1.4, 1.8])
    chosen = _serve(policy, 1, 600, {8: 3.2, 16: 3.1, 32: 2.9}, accepted={8: 0.96, 16: 0.96, 32: 0.96})
    assert policy.best_width(1) == 8
    assert chosen[-200:].count(8) >= 190


def test_an_empty_accept_table_is_refused_and_one_point_is_flat():
    with pytest.raises(ValueError, match="empty acceptance table"):
        budget_mod.interpolate_accept({}, 16)
    assert budget_mod.interpolate_accept({32: 9.5}, 8) == 9.5 == budget_mod.interpolate_accept({32: 9.5}, 512)


def test_the_cost_table_lists_its_widths_knows_none_of_an_uncaptured_one_and_describes_itself():
    costs = budget_mod.CostTable()
    costs.add(33, 4, 2.0)
    costs.add(17, 1, 1.25)
    costs.add(17, 8, 1.5)
    assert costs.widths() == (17, 33)
    assert costs.verify_ms(65, 1) is None
    assert costs.verify_ms(17, 2) == 1.5  # the next captured batch size
    assert costs.describe() == "N=17: bs1=1.25, bs8=1.50; N=33: bs4=2.00"


def test_a_policy_needs_a_width_and_guesses_log2_before_anything_is_measured():
    with pytest.raises(ValueError, match="at least one width"):
        budget_mod.BudgetPolicy(widths=(), costs=budget_mod.CostTable())
    policy = budget_mod.BudgetPolicy(widths=(16, 8, 16), costs=budget_mod.CostTable())
    assert policy.widths == (8, 16)
    assert policy.accept_length(16) == 1.0 + math.log2(16)


def test_an_accepted_count_without_an_expectation_changes_no_calibration():
    policy = budget_mod.BudgetPolicy(widths=(8,), costs=budget_mod.CostTable())
    policy.observe_accepted(8, 3.0)  # nothing expected at width 8 yet
    policy.observe_accepted(8, math.nan)
    assert policy.calibration == 1.0


@PER_BATCH_SIZE_TABLES
def test_the_rest_of_an_unseen_batch_size_is_the_nearest_learned_one():
    policy = budget_mod.BudgetPolicy(widths=(8,), costs=budget_mod.CostTable(), rest_ms={2: 0.5, 16: 4.0})
    assert policy._rest(3) == 0.5 and policy._rest(12) == 4.0 and policy._rest(16) == 4.0


@PER_BATCH_SIZE_TABLES
def test_under_tp_the_rest_is_not_learned_from_this_ranks_clock():
    costs = budget_mod.CostTable()
    costs.add(8, 1, 1.0)
    policy = budget_mod.BudgetPolicy(widths=(8,), costs=costs, learn_rest=False)
    for now in (0.0, 0.002, 0.004):
        policy.round_started(now)
        policy.choose(1)
    assert policy.rest_ms == {} and policy._last_start is None


def test_a_width_without_a_timed_graph_is_never_chosen():
    costs = budget_mod.CostTable()
    costs.add(8, 1, 1.0)
    policy = budget_mod.BudgetPolicy(widths=(8, 16), costs=costs)  # 16 was not timed
    assert set(policy.rates(1)) == {8} and policy.choose(1) == 8


def test_the_accept_model_comes_from_the_environment_only_when_set(monkeypatch):
    monkeypatch.delenv(budget_mod.ACCEPT_MODEL_ENV, raising=False)
    assert budget_mod.accept_model_from_env() is None
    monkeypatch.setenv(budget_mod.ACCEPT_MODEL_ENV, '{"16": 8.5, "64": 9.5}')
    assert budget_mod.accept_model_from_env() == {16: 8.5, 64: 9.5}


# ---------------------------------------------------------------- one round-cost model for every batch size


def _drive(policy, trace, round_ms, *, accepted=None, lag=1, clock=100.0):
    """Serve ``trace`` (a batch size per round) as the worker does: round start, choice, the round takes
    ``round_ms(bs, width)``; under the overlap scheduler (``lag=1``) the period the host sees between two
    round starts is the previous round's. ``accepted[width]`` is observed for each round. Returns the
    (bs, width, probe) of every round."""
    rounds, previous = [], None
    policy.round_started(clock)
    for bs in trace:
        width = policy.choose(bs)
        rounds.append((bs, width, policy.last_was_probe))
        if accepted is not None:
            policy.observe_accepted(width, accepted[width])
        ms = round_ms(bs, width)
        clock += (ms if lag == 0 or previous is None else previous) / 1e3
        previous = ms
        policy.round_started(clock)
    return rounds


def _linear_round(table, rest=1.0, per_request=0.12, per_token=0.0004):
    """A round that costs the table's verify plus a rest growing with the batch and the tokens verified."""
    return lambda bs, width: table.verify_ms(width, bs) + rest + per_request * bs + per_token * bs * width


GRAPHS = (1, 2, 4, 8, 16, 32)
# A verify that is flat in the width at one request and per token at 32 (an H200 at the Qwen3-8B shape).
WIDE = _table({w: dict(zip(GRAPHS, row, strict=True)) for w, row in {
    16: (5.53, 5.7, 6.0, 6.65, 8.71, 14.52), 32: (5.65, 6.0, 6.7, 8.03, 13.62, 24.40),
    64: (5.86, 6.8, 8.6, 12.28, 23.38, 44.99)}.items()})


@COST_MODEL
@pytest.mark.parametrize("lag", [0, 1], ids=["non-overlap", "overlap"])
def test_the_model_learns_the_round_from_every_batch_size_and_prices_one_it_never_saw(lag):
    # The batch size jumps every round: each period is charged to the round it measures.
    policy = budget_mod.BudgetPolicy(widths=(16, 32, 64), costs=WIDE, accept_model=PAPER, period_lag=lag)
    truth = _linear_round(WIDE)
    _drive(policy, [1, 2, 4, 8, 16, 32] * 100, truth, lag=lag)
    for bs in (3, 12, 24):  # never served: priced from the others, no probe of their own
        for width in (16, 32, 64):
            assert policy.round_ms_at(bs, width) == pytest.approx(truth(bs, width), rel=0.03), (bs, width)
    assert policy.model.observations == 600 - lag
    assert f"model from {600 - lag} periods" in policy.describe()


@COST_MODEL
def test_a_new_batch_size_is_not_probed_where_the_model_knows_the_wider_widths_lose():
    # Served at 1, 2 and 4 requests (where widths are close and probes cheap), then 32 requests arrive:
    # the verify table alone says 32 and 64 lose there by far, so they are never verified at 32.
    policy = budget_mod.BudgetPolicy(widths=(16, 32, 64), costs=WIDE, accept_model=PAPER)
    truth = _linear_round(WIDE)
    _drive(policy, [1, 2, 4] * 200, truth)
    probes_before = policy.probes
    rounds = _drive(policy, [32] * 3000, truth)
    assert {width for _, width, _ in rounds} == {16}
    assert policy.probes == probes_before


@COST_MODEL
def test_the_whole_round_per_width_is_learnt_and_a_width_the_table_favours_is_dropped_in_a_few_rounds():
    # The verify graphs say a 64-wide tree costs what 16 costs at one request; the whole round says
    # otherwise (the draft top-K and the tree grow with the width): 6.3 ms against 3.4.
    verify = _table({16: {1: 2.5}, 32: {1: 2.6}, 64: {1: 2.7}})
    policy = budget_mod.BudgetPolicy(widths=(16, 32, 64), costs=verify, accept_model=PAPER)
    real = {16: 3.4, 32: 4.6, 64: 6.3}
    rounds = _drive(policy, [1] * 400, lambda bs, width: real[width])
    chosen = [width for _, width, _ in rounds]
    assert chosen[0] == 64  # the table alone favours the widest tree
    assert policy.best_width(1) == 16 and policy.round_ms_at(1, 16) == pytest.approx(3.4, rel=0.02)
    assert chosen[-100:].count(16) >= 98
    rate = sum(budget_mod.interpolate_accept(PAPER, w - 1) for w in chosen) / sum(real[w] for w in chosen)
    assert rate >= 0.98 * budget_mod.interpolate_accept(PAPER, 15) / real[16]  # within 2% of the best fixed width


@COST_MODEL
def test_probes_are_spaced_fit_in_their_share_and_never_cost_a_slow_round():
    # Widths that are close at one request and the model uncertain: probes happen, rarely, each one
    # round, never of a width whose round the model predicts at more than PROBE_MAX_COST times the best's.
    policy = budget_mod.BudgetPolicy(widths=(16, 32, 64), costs=WIDE, accept_model=PAPER)
    truth = _linear_round(WIDE, per_token=0.002)
    rounds = _drive(policy, [1, 2, 3, 4, 6, 8] * 500, truth)
    probes = [i for i, (_, _, probe) in enumerate(rounds) if probe]
    assert probes and len(probes) == policy.probes
    assert all(b - a >= budget_mod.PROBE_SPACING for a, b in itertools.pairwise(probes))
    assert policy.probe_loss_ms <= budget_mod.PROBE_SHARE * policy.served_ms
    for i in probes:
        bs, width, _ = rounds[i]
        best = max((16, 32, 64), key=lambda w: budget_mod.interpolate_accept(PAPER, w - 1) / truth(bs, w))
        assert truth(bs, width) <= 1.5 * truth(bs, best), rounds[i]


@COST_MODEL
def test_the_periods_after_a_prefill_and_an_idle_spell_teach_the_model_nothing():
    policy = budget_mod.BudgetPolicy(widths=(16, 32), costs=WIDE, accept_model=PAPER, period_lag=0)
    truth = _linear_round(WIDE)
    _drive(policy, [8] * 200, truth, lag=0)
    learnt, seen = policy.round_ms_at(8, 16), policy.model.observations
    clock = 1000.0
    policy.interrupted()  # a prefill batch ran: the next periods are not decode rounds
    for _ in range(budget_mod.SKIP_AFTER_INTERRUPT + 1):
        policy.round_started(clock)
        policy.choose(8)
        clock += 0.5  # half a second each: would wreck the model if it learnt from them
    policy.round_started(clock + 5.0)  # five seconds without traffic: an idle spell, not a round
    assert policy.model.observations == seen and policy.round_ms_at(8, 16) == pytest.approx(learnt)


@COST_MODEL
def test_under_tp_the_choice_rests_on_the_table_alone_and_nothing_is_probed():
    policy = budget_mod.BudgetPolicy(widths=(16, 32, 64), costs=WIDE, accept_model=PAPER, learn_rest=False)
    rounds = _drive(policy, [1, 2, 4, 8, 16, 32] * 50, _linear_round(WIDE))
    assert policy.model.observations == 0 and policy.probes == 0 and policy._last_start is None
    assert {width for bs, width, _ in rounds if bs >= 8} == {16}


@COST_MODEL
def test_the_contrast_of_two_widths_is_their_difference_with_its_own_uncertainty():
    policy = budget_mod.BudgetPolicy(widths=(16, 32), costs=WIDE, accept_model=PAPER)
    _drive(policy, [1, 2] * 300, _linear_round(WIDE))
    (m16, s16), (m32, s32) = policy.model.predict(24, 16), policy.model.predict(24, 32)
    mean, std = policy.model.contrast(24, 32, 16, 0.9)
    assert mean == pytest.approx(m32 - 0.9 * m16)
    assert 0.0 < std < s32 + 0.9 * s16  # what the two rounds share cancels
    assert policy.model.contrast(24, 16, 16, 1.0) == (0.0, 0.0)
    # No verify graph of width 128: nothing to predict, nothing to learn.
    assert policy.model.contrast(24, 128, 16, 1.0) is None and policy.model.predict(24, 128) is None
    seen = policy.model.observations
    assert policy.model.observe(24, 128, 50.0) is False and policy.model.observations == seen


@COST_MODEL
def test_a_narrower_width_is_probed_when_a_wider_one_is_found_to_accept_no_more():
    # The draft expects 1.0 / 3.0 accepts at 16 / 32; the target takes 0.95 at both. The 32-wide rounds
    # show it (their own calibration), and the narrower tree may accept as much as the wider one did:
    # 16 is probed, its first round calibrates it, and it serves from then on.
    costs = _table({16: {8: 5.0}, 32: {8: 5.5}})
    policy = budget_mod.BudgetPolicy(widths=(16, 32), costs=costs)
    for _ in range(50):
        policy.observe_expected([1.0, 3.0])
    rounds = _drive(policy, [8] * 400, lambda bs, width: {16: 6.0, 32: 6.6}[width],
                    accepted={16: 0.95, 32: 0.95})
    chosen = [width for _, width, _ in rounds]
    assert chosen[0] == 32 and policy.calibrations[16] == pytest.approx(0.95)
    assert chosen[-300:].count(16) == 300 and policy.probes <= 2


@COST_MODEL
def test_the_cost_models_factor_solves_and_refuses_a_matrix_that_is_not_positive_definite():
    with pytest.raises(ValueError, match="not positive definite"):
        budget_mod._cholesky([[1.0, 2.0], [2.0, 4.0]])
    lower = budget_mod._cholesky([[4.0, 2.0], [2.0, 3.0]])
    assert lower == [[2.0, 0.0], [1.0, pytest.approx(2.0**0.5)]]
    x = budget_mod._backward(lower, budget_mod._forward(lower, [2.0, 1.0]))  # [[4, 2], [2, 3]] x = [2, 1]
    assert x == [pytest.approx(0.5), pytest.approx(0.0)]
