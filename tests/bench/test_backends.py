"""Attention backends as variants (``dflash-fa3``, ``--backends``), the fastest DFLASH every ratio is
against, and each server's start-up time and start limit (``--start-timeout``).

The CLI tests run the stand-in, whose rounds take 0.5x (fa3), 0.75x (flashinfer) and 1x (triton) of
its round time, so the fastest backend is known; ``SGLANG_STANDIN_BACKEND_START_DELAY`` makes one
backend's server start slowly, logging its CUDA graph captures meanwhile, as flashinfer did on the H100.
"""

from __future__ import annotations

import time

import pytest

from patchkit.bench.profile import (
    BACKEND_SUPPORT,
    Choice,
    Variant,
    VariantSpec,
    attention_backend,
    expand,
    load_bench_profile,
    without_attention_flags,
)
from patchkit.bench.run import across_backends, fastest_table, selected_variants, with_ratios
from patchkit.errors import BadInput
from tests.bench.conftest import MANIFEST, kernels_host, server_pids
from tests.smoke.conftest import alive

#: The test set's profile with v2's habit: the shared server arguments name the triton backend.
TRITON_MANIFEST = MANIFEST.replace('server_args = ["--dtype", "bfloat16", "--random-seed", "0"]',
                                   'server_args = ["--dtype", "bfloat16", "--random-seed", "0", '
                                   '"--attention-backend", "triton"]') + """
[[bench.variants]]
name = "dflash-sync"
kind = "chain"
args = ["--speculative-algorithm", "DFLASH", "--disable-overlap-schedule"]
"""
#: Speculative rounds long enough that the backends' 0.5 / 0.75 / 1 shares decide the order on a busy machine.
ROUNDS = {"spec_round_ms": "40", "round_ms": "20", "prefill_ms": "5"}


@pytest.fixture
def triton_env(bench_env):
    (bench_env.set_dir / "manifest.toml").write_text(TRITON_MANIFEST)
    return bench_env


def _profile(tmp_path, extra: str = ""):
    (tmp_path / "manifest.toml").write_text(TRITON_MANIFEST + extra)
    return load_bench_profile(tmp_path)


def test_a_variant_on_a_backend_is_named_NAME_BACKEND_and_checked_against_the_table(tmp_path):
    profile = _profile(tmp_path)
    assert profile.backends == BACKEND_SUPPORT
    choices = selected_variants(profile, ("dflash-fa3", "dflash-sync", "dflash-sync-flashinfer", "ddtree-triton",
                                          "baseline-default"))
    assert [(c.spec.name, c.backend) for c in choices] == [
        ("dflash", "fa3"), ("dflash-sync", None), ("dflash-sync", "flashinfer"), ("ddtree", "triton"),
        ("baseline", "default")]
    with pytest.raises(BadInput, match=r"--variants ddtree-flashinfer: ddtree \(DDTREE\) does not run on flashinfer "
                                       r"\(it runs on fa3, triton\)"):
        selected_variants(profile, ("ddtree-flashinfer",))
    with pytest.raises(BadInput, match="has no variant 'dflash-cuda'") as caught:
        selected_variants(profile, ("dflash-cuda",))
    assert "NAME-BACKEND" in (caught.value.hint or "")


def test_the_set_can_say_which_backends_a_kind_runs_on(tmp_path):
    profile = _profile(tmp_path, '\n[bench.backends]\ntree = ["triton"]\nchain = ["triton", "torch_native"]\n')
    assert profile.backends["tree"] == ("triton",) and profile.backends["baseline"] == BACKEND_SUPPORT["baseline"]
    assert [c.name for c in selected_variants(profile, ("dflash-torch_native",))] == ["dflash-torch_native"]
    with pytest.raises(BadInput, match=r"ddtree-fa3: ddtree \(DDTREE\) does not run on fa3 \(it runs on triton\)"):
        selected_variants(profile, ("ddtree-fa3",))
    for bad in ('tree = "triton"', 'eagle = ["triton"]', 'tree = ["tri-ton"]'):
        with pytest.raises(BadInput) as caught:
            _profile(tmp_path, f"\n[bench.backends]\n{bad}\n")
        assert caught.value.location.file == str(tmp_path / "manifest.toml")


def test_backends_expand_the_selection_and_say_what_they_left_out(tmp_path):
    profile = _profile(tmp_path)
    picked = selected_variants(profile, ("dflash", "ddtree", "dflash-sync-triton"))
    choices, notes = across_backends(profile, picked, ("fa3", "flashinfer", "triton"))
    assert [c.name for c in choices] == ["dflash-fa3", "dflash-flashinfer", "dflash-triton", "ddtree-fa3",
                                         "ddtree-triton", "dflash-sync-triton"]
    assert notes == ("ddtree: not run on flashinfer (DDTREE runs on fa3, triton; [bench.backends])",)
    names = [v.name for v in expand(choices, (8, "auto"))]
    assert names[3:7] == ["ddtree-fa3-b8", "ddtree-fa3-auto", "ddtree-triton-b8", "ddtree-triton-auto"]
    with pytest.raises(BadInput, match="--backends cuda: not a backend of the set's table"):
        across_backends(profile, picked, ("cuda",))
    with pytest.raises(BadInput, match="--backends flashinfer: no selected variant runs on any of them"):
        across_backends(profile, selected_variants(profile, ("ddtree",)), ("flashinfer",))


def test_one_backend_on_the_command_line_and_default_means_none():
    shared = ("--dtype", "bfloat16", "--attention-backend", "triton", "--prefill-attention-backend=fa3",
              "--decode-attention-backend", "flashinfer", "--page-size", "1")
    assert without_attention_flags(shared) == ("--dtype", "bfloat16", "--page-size", "1")
    assert attention_backend(shared) == "triton" and attention_backend(("--x",)) == "default"
    assert attention_backend(("--attention-backend", "triton", "--attention-backend=fa3")) == "fa3"
    profile_spec = VariantSpec(name="ddtree", kind="tree", args=("--speculative-ddtree-budget", "{budget}"))
    on_fa3 = Variant(spec=profile_spec, budget=16, backend="fa3")
    assert (on_fa3.name, on_fa3.label) == ("ddtree-fa3-b16", "DDTREE fa3 B=16")
    assert on_fa3.args() == ("--speculative-ddtree-budget", "16", "--attention-backend", "fa3")
    assert on_fa3.shared_args(shared) == ("--dtype", "bfloat16", "--page-size", "1")
    default = Variant(spec=profile_spec, budget="auto", backend="default")
    assert default.args() == ("--speculative-ddtree-budget", "auto") and default.name == "ddtree-default-auto"
    plain = Variant(spec=profile_spec, budget=16)
    assert plain.shared_args(shared) == shared and plain.name == "ddtree-b16"
    assert Choice(spec=profile_spec, backend="fa3").name == "ddtree-fa3"


def test_backends_in_one_run_ratios_against_the_fastest_dflash(triton_env):
    report = triton_env.tmp / "report.md"
    out = triton_env.run("--variants", "dflash,ddtree,dflash-sync-fa3", "--backends", "flashinfer,triton",
                         "--budgets", "8", "--concurrency", "1,4", "--repeats", "1", "--warmup", "0",
                         "--max-new-tokens", "12", "--report", str(report), timeout=240,
                         env=kernels_host(triton_env.tmp), **ROUNDS)
    assert out.code == 0, out.stderr + out.stdout[-2000:]
    result = out.doc["result"]
    runs = {v["name"]: v for v in result["variants"]}
    assert list(runs) == ["dflash-flashinfer", "dflash-triton", "ddtree-triton-b8", "dflash-sync-fa3"]
    assert result["notes"] == ["ddtree: not run on flashinfer (DDTREE runs on fa3, triton; [bench.backends])"]
    for name, backend in (("dflash-flashinfer", "flashinfer"), ("dflash-triton", "triton"),
                          ("ddtree-triton-b8", "triton"), ("dflash-sync-fa3", "fa3")):
        argv = runs[name]["argv"]
        assert argv.count("--attention-backend") == 1 and argv[argv.index("--attention-backend") + 1] == backend
        assert runs[name]["backend"] == backend
        assert f"standin: attention backend {backend}" in (triton_env.tmp / "logs" / f"{name}.log").read_text()
    assert runs["dflash-sync-fa3"]["overlap"] is False and runs["dflash-triton"]["overlap"] is True
    # fa3's rounds take half of triton's: the overlap-off DFLASH on fa3 is the fastest at every level,
    # named in the result and the report, and every ratio of the level is taken against it.
    fastest = {(f["prompt_set"], f["concurrency"]): f for f in result["fastest_dflash"]}
    assert set(fastest) == {("short", 1), ("short", 4)}
    for f in fastest.values():
        assert (f["variant"], f["backend"], f["overlap"]) == ("dflash-sync-fa3", "fa3", False)
    reference = {level["concurrency"]: level for level in runs["dflash-sync-fa3"]["levels"]}
    for run in runs.values():
        for level in run["levels"]:
            assert level["dflash_reference"] == "dflash-sync-fa3"
            ratio = level["aggregate_tok_s"]["mean"] / reference[level["concurrency"]]["aggregate_tok_s"]["mean"]
            assert level["vs_dflash"]["mean"] == pytest.approx(ratio)
    slow = {level["concurrency"]: level["vs_dflash"]["mean"] for level in runs["dflash-triton"]["levels"]}
    assert all(r < 0.8 for r in slow.values()), slow  # triton at 1x vs fa3 at 0.5x of the round
    text = report.read_text()
    assert "| dflash-sync fa3 | fa3 | off |" in text  # the servers table
    assert "| short | 4 | dflash-sync fa3 | fa3 | off |" in text  # the fastest DFLASH table
    assert "- note: ddtree: not run on flashinfer" in text
    assert alive(server_pids(triton_env.tmp / "logs")) == set()


def test_a_slow_backend_is_reported_not_started_and_the_run_goes_on(triton_env):
    began = time.monotonic()
    out = triton_env.run("--variants", "dflash-flashinfer,dflash-fa3", "--concurrency", "1", "--repeats", "1",
                         "--warmup", "0", "--start-timeout", "4", "--report", str(triton_env.tmp / "r.md"),
                         env=kernels_host(triton_env.tmp), backend_start_delay="flashinfer=60", start_delay="1",
                         timeout=120)
    assert time.monotonic() - began < 50  # the slow server did not hold the run for its 61 s
    assert out.code == 0, out.stderr + out.stdout[-2000:]
    result = out.doc["result"]
    slow, fast = result["variants"]
    assert slow["name"] == "dflash-flashinfer" and slow["levels"] == [] and slow["ready_s"] is None
    assert slow["not_started"].startswith("did not start within 4 s; last log line: Capturing prefill CUDA graphs: ")
    assert slow["start_limit_s"] == 4 and slow["teardown"]["leftover_pids"] == []
    assert result["not_started"] == [f"DFLASH flashinfer: {slow['not_started']}"] and result["failures"] == []
    assert result["start_timeout_s"] == 4
    assert fast["failure"] is None and 1.0 <= fast["ready_s"] < 4 and len(fast["levels"]) == 1  # its start-up, timed
    assert result["fastest_dflash"][0]["variant"] == "dflash-fa3"
    report = (triton_env.tmp / "r.md").read_text()
    assert "did not start within 4 s; last log line: Capturing prefill CUDA graphs" in report
    human = triton_env.run("--variants", "dflash-flashinfer", "--concurrency", "1", "--start-timeout", "2",
                           as_json=False, logs=triton_env.tmp / "logs-human", env=kernels_host(triton_env.tmp),
                           backend_start_delay="flashinfer=60")
    assert human.code == 1  # no server started at all: nothing was measured
    assert "DFLASH flashinfer server not started: did not start within 2 s" in human.stdout
    assert "no server started within --start-timeout 2 s" in human.stdout
    assert alive(server_pids(triton_env.tmp / "logs") | server_pids(triton_env.tmp / "logs-human")) == set()


@pytest.mark.parametrize(("args", "message"), [
    (("--variants", "ddtree-flashinfer"), "--variants ddtree-flashinfer: ddtree (DDTREE) does not run on flashinfer"),
    (("--backends", "cuda"), "--backends cuda: not a backend of the set's table"),
    (("--variants", "dflash-fa3", "--", "--attention-backend", "triton"),
     "--attention-backend after -- would override the backend of every variant that names its own"),
    (("--start-timeout", "5", "--timeout", "9"), "--start-timeout and --timeout both limit a server's start"),
])
def test_backend_and_start_options_are_checked_before_anything_starts(triton_env, args, message):
    out = triton_env.run(*args, as_json=False)
    assert out.code == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (triton_env.tmp / "logs").exists()


def test_ratios_name_the_fastest_dflash_and_the_fastest_baseline_per_level():
    from tests.bench.test_phases import _run

    runs = [_run("baseline-fa3", "baseline", {1: 200.0, 8: 500.0}),
            _run("baseline-triton", "baseline", {1: 250.0, 8: 400.0}),
            _run("dflash-fa3", "chain", {1: 300.0, 8: 800.0}), _run("dflash-flashinfer", "chain", {1: 330.0, 8: 700.0}),
            _run("ddtree-triton-b8", "tree", {1: 363.0, 8: 560.0})]
    fastest = {f.concurrency: f for f in fastest_table(runs)}
    assert (fastest[1].variant, fastest[8].variant) == ("dflash-flashinfer", "dflash-fa3")
    tree = with_ratios(runs)[4]
    one, eight = tree.levels
    assert (one.dflash_reference, one.baseline_reference) == ("dflash-flashinfer", "baseline-triton")
    assert (eight.dflash_reference, eight.baseline_reference) == ("dflash-fa3", "baseline-fa3")
    assert one.vs_dflash.mean == pytest.approx(1.1) and eight.vs_dflash.mean == pytest.approx(0.7)
    assert one.vs_baseline.mean == pytest.approx(363 / 250) and eight.vs_baseline.mean == pytest.approx(560 / 500)


def test_a_variant_whose_backend_cannot_load_is_left_out_with_the_reason_and_the_rest_runs(triton_env):
    # No flashinfer in the servers' interpreter: preflight refuses that server, bench leaves its variant out.
    out = triton_env.run("--variants", "dflash-flashinfer,dflash-triton", "--concurrency", "1", "--repeats", "1",
                         "--warmup", "0", "--max-new-tokens", "12", timeout=120, **ROUNDS)
    assert out.code == 0, out.stderr + out.stdout[-2000:]
    result = out.doc["result"]
    assert [v["name"] for v in result["variants"]] == ["dflash-triton"]
    [note] = [n for n in result["notes"] if n.startswith("dflash-flashinfer: not run: ")]
    assert "would run the flashinfer attention backend, whose kernels cannot load" in note
    assert "No module named 'flashinfer'" in note


def test_when_no_variant_can_load_its_backend_nothing_starts(triton_env):
    out = triton_env.run("--variants", "dflash-flashinfer", "--concurrency", "1", timeout=60)
    assert out.code == 2 and out.doc["error"]["hint"] == "nothing was started"
    assert "attention backends:" in out.doc["error"]["message"] and "flashinfer" in out.doc["error"]["message"]
