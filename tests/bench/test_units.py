"""Pure parts of the bench: the chi-square test, histograms from a stream, the [bench] table, the
acceptance table and its projection."""

from __future__ import annotations

import json
import math
import random

import pytest

from patchkit.bench.acceptance import load_acceptance, project
from patchkit.bench.chisquare import chi2_sf, homogeneity
from patchkit.bench.measure import histogram, repeat_stats
from patchkit.bench.profile import load_bench_profile
from patchkit.errors import BadInput
from patchkit.smoke.client import Generation
from tests.smoke.conftest import REPO_ROOT, SET_HEADER

PAPER = REPO_ROOT / "benchmarks" / "acceptance" / "ddtree-paper-qwen3-8b-math500.toml"


@pytest.mark.parametrize(("statistic", "df", "p"), [
    (3.841458820694124, 1, 0.05), (5.991464547107979, 2, 0.05), (18.307038053275146, 10, 0.05),
    (0.5, 4, 0.9735009788392561), (100.0, 3, 1.554159431389603e-21), (0.0, 3, 1.0),
])
def test_chi2_survival_function_matches_known_values(statistic, df, p):
    assert chi2_sf(statistic, df) == pytest.approx(p, rel=1e-9)


def test_homogeneity_accepts_equal_distributions_and_rejects_shifted_ones():
    rng = random.Random(0)
    weights = [35, 25, 15, 12, 8, 5]
    a = rng.choices(range(6), weights, k=256)
    b = rng.choices(range(6), weights, k=256)
    c = rng.choices(range(6), [60, 15, 9, 7, 5, 4], k=256)
    same, shifted = homogeneity(a, b), homogeneity(a, c)
    assert same.df == 5 and same.p_value > 0.05
    assert shifted.p_value < 1e-6


def test_rare_tokens_are_pooled_and_identical_samples_pass():
    a = [0] * 100 + [1] * 100 + list(range(10, 30))  # 20 tokens seen once each: pooled into one column
    test = homogeneity(a, list(a))
    assert test.categories == 3 and test.statistic == pytest.approx(0.0) and test.p_value == pytest.approx(1.0)
    assert homogeneity([7] * 64, [7] * 64).df == 0


def gen(chunks, verify=None, hist=None, start=0.0, total=1.0, ttft=0.1):
    ids = tuple(range(sum(chunks)))
    return Generation(ids, ttft, total, None if not verify else len(ids) / verify, verify, tuple(chunks), hist,
                      None, start)


def test_histogram_from_stream_events_and_from_the_server():
    stream = [gen([1, 2, 3, 1], verify=3), gen([1, 4], verify=1)]
    merged = gen([1, 5], verify=2)  # two rounds arrived as one event: cannot be told apart
    hist = histogram([*stream, merged])
    assert hist.source == "stream" and hist.counts == {1: 1, 2: 1, 3: 1, 4: 1}
    assert (hist.requests, hist.left_out) == (2, 1)
    server = histogram([gen([1, 6], verify=3, hist=(1, 0, 2))])
    assert server.source == "server" and server.counts == {1: 1, 3: 2}
    assert histogram([gen([1, 1, 1])]) is None  # baseline: no verify rounds


def test_repeat_stats_counts_tokens_over_the_batch_window():
    batch = [gen([1, 9], verify=3, start=0.0, total=2.0, ttft=0.5), gen([1, 9], verify=2, start=1.0, total=2.0)]
    stats = repeat_stats(batch)
    assert stats.output_tokens == 20 and stats.wall_s == pytest.approx(3.0)
    assert stats.aggregate_tok_s == pytest.approx(20 / 3.0) and stats.per_request_tok_s == pytest.approx(5.0)
    assert stats.verify_rounds == 5 and stats.accept_length == pytest.approx(4.0)
    assert stats.ms_per_round == pytest.approx(((2.0 - 0.5) / 3 + (2.0 - 0.1) / 2) / 2 * 1000)


def test_v1_bench_profile_and_the_fallback_of_a_set_without_one(tmp_path):
    v1 = load_bench_profile(REPO_ROOT / "ddtree_patches" / "v1")
    assert [(v.name, v.kind) for v in v1.variants] == [("baseline", "baseline"), ("dflash", "chain"), ("ddtree", "tree")]
    assert v1.budgets == (16, 64, 256) and v1.concurrency == (1, 8, 32)
    (tmp_path / "manifest.toml").write_text(SET_HEADER + '[smoke]\nprofile_args = '
                                            '["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "64"]\n')
    old = load_bench_profile(tmp_path)
    assert old.variants[1].args == ("--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "{budget}")


@pytest.mark.parametrize(("table", "message"), [
    ('[[bench.variants]]\nname = "x"\nkind = "tree"\nargs = ["--a"]\n', "a tree variant's args, and only those, name {budget}"),
    ('[[bench.variants]]\nname = "x"\nkind = "chain"\nargs = ["{budget}"]\n', "a tree variant's args, and only those"),
    ('[[bench.variants]]\nname = "x"\nkind = "eagle"\n', "kind must be one of baseline, chain, tree"),
    ('[bench]\nbudgets = [16, 0]\n', "[bench] budgets must be a non-empty list of positive integers"),
    ('[[bench.variants]]\nname = "a"\nkind = "baseline"\n[[bench.variants]]\nname = "a"\nkind = "baseline"\n',
     "names must be unique"),
])
def test_bad_bench_table_names_the_manifest(tmp_path, table, message):
    (tmp_path / "manifest.toml").write_text(SET_HEADER + table)
    with pytest.raises(BadInput, match=message.replace("[", r"\[").replace("{", r"\{")) as caught:
        load_bench_profile(tmp_path)
    assert caught.value.location.file == str(tmp_path / "manifest.toml")


def test_the_shipped_paper_table_and_its_projection():
    table = load_acceptance(PAPER)
    assert table.chain == 7.79 and table.tree == {16: 8.61, 32: 9.27, 64: 9.75, 128: 10.20, 256: 10.43,
                                                   512: 10.73, 1024: 10.98}
    assert "2604.12989" in table.source
    # Hand-measured Qwen3-8B-shape round costs give this projection: 0.73x (B=16), 0.92x (B=64).
    rows = {r.variant: r for r in project([("baseline", "baseline", None, 1, 5.11, ""),
                                           ("dflash", "chain", None, 1, 11.01, ""),
                                           ("ddtree-b16", "tree", 16, 1, 16.59, ""),
                                           ("ddtree-b64", "tree", 64, 1, 15.03, "")], table)}
    assert rows["ddtree-b16"].vs_dflash == pytest.approx(0.73, abs=0.005)
    assert rows["ddtree-b64"].vs_dflash == pytest.approx(0.92, abs=0.005)
    assert rows["dflash"].vs_baseline == pytest.approx(7.79 / 11.01 * 5.11)
    assert rows["baseline"].projected_tok_s == pytest.approx(1000 / 5.11)


def test_acceptance_table_as_json_and_its_errors(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"source": "mine", "ddtree": {"accept_length": {"64": 3.5}}}))
    assert load_acceptance(path).tree == {64: 3.5} and load_acceptance(path).chain is None
    path.write_text(json.dumps({"ddtree": {"accept_length": {"64": 3.5}}}))
    with pytest.raises(BadInput, match='needs a "source"'):
        load_acceptance(path)
    path.write_text(json.dumps({"source": "s", "ddtree": {"accept_length": {"big": 3.5}}}))
    with pytest.raises(BadInput, match="key 'big' is not a budget"):
        load_acceptance(path)


def test_logprob_bins_are_equal_frequency_and_keep_ties_together():
    from patchkit.bench.sampling import binned_homogeneity, logprob_bins

    values = [float(v) for v in range(80)]
    cuts = logprob_bins(values, 8)
    assert cuts == (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0)  # 10 values in each of 8 bins
    # Ties: a value holding half the mass is one bin, never split; the cuts merge instead.
    tied = [-1.0] * 40 + [float(-v) for v in range(2, 42)]
    cuts = logprob_bins(tied, 8)
    assert -1.0 in cuts and len(cuts) == 4  # 4 cuts below -1.0 and -1.0 itself: 5 bins
    assert sum(1 for v in tied if v >= cuts[-1]) == 40
    # Tiny and degenerate samples: no crash, no evidence.
    assert logprob_bins([], 8) == () and logprob_bins([-2.0], 8) == () and logprob_bins([-3.0] * 50, 8) == ()
    assert logprob_bins([-3.0, -1.0], 8) == (-1.0,)
    none = binned_homogeneity([], [-1.0])[0]
    assert (none.df, none.p_value) == (0, 1.0)
    constant = binned_homogeneity([-3.0] * 40, [-3.0] * 40)[0]
    assert (constant.df, constant.p_value) == (0, 1.0)
    small = binned_homogeneity([-1.0, -2.0, -3.0], [-1.5, -2.5])[0]  # expected counts < 5: pooled, df 0
    assert small.df == 0 and small.p_value == 1.0


def test_binned_logprobs_see_a_shift_toward_likely_tokens():
    from patchkit.bench.sampling import binned_homogeneity

    rng = random.Random(5)
    weights = (0.35, 0.25, 0.15, 0.12, 0.08, 0.05)
    logs = [math.log(w) for w in weights]

    def draw(keep_top: float) -> list[float]:
        return [logs[0] if rng.random() < keep_top else rng.choices(logs, weights)[0] for _ in range(200)]

    same, bins = binned_homogeneity(draw(0.0), draw(0.0))
    assert same.p_value > 0.001 and same.df >= 3 and 4 <= bins <= 6
    shifted, _ = binned_homogeneity(draw(0.0), draw(0.5))
    assert shifted.p_value < 1e-6


def test_a_failure_names_each_failed_test_and_its_position():
    from patchkit.bench.chisquare import ChiSquare
    from patchkit.bench.sampling import PositionTest, failure_line

    fine, bad = (ChiSquare(statistic=s, df=3, p_value=p, categories=4) for s, p in ((1.0, 0.8), (40.0, 1e-8)))
    positions = [PositionTest(position=0, test=bad, distinct_baseline=6, distinct_variant=6, logprob_test=fine),
                 PositionTest(position=2, test=fine, distinct_baseline=90, distinct_variant=80, logprob_test=bad),
                 PositionTest(position=3, test=fine, distinct_baseline=90, distinct_variant=80, logprob_test=None)]
    line = failure_line("DDTREE B=8", positions, 1e-4)
    assert line == ("DDTREE B=8: token distribution at position 0 differs from the baseline's (chi-square 40.0, df 3, "
                    "p = 1.00e-08 < 1.0e-04); log-prob distribution at position 2 differs from the baseline's "
                    "(chi-square 40.0, df 3, p = 1.00e-08 < 1.0e-04)")
