"""SGLang's radix cache in smoke and bench: on by default (SGLang's own default), off on request, whatever
the set's profile lists; and the generated prompts that make it share KV (``--radix-prompts``)."""

from __future__ import annotations

import json
from itertools import pairwise

from patchkit.bench import radix_prompts
from patchkit.bench.profile import load_bench_profile
from patchkit.manifest import load
from patchkit.smoke.launch import RADIX_OFF, radix_server_args
from tests.smoke.conftest import REPO_ROOT


def test_the_radix_cache_is_on_unless_asked_off_whatever_the_profile_lists():
    listed = ("--dtype", "bfloat16", RADIX_OFF, "--random-seed", "0")
    assert radix_server_args(listed, radix_cache=True) == ("--dtype", "bfloat16", "--random-seed", "0")
    assert radix_server_args(listed, radix_cache=False) == ("--dtype", "bfloat16", "--random-seed", "0", RADIX_OFF)
    assert radix_server_args(("--dtype", "bfloat16"), radix_cache=False) == ("--dtype", "bfloat16", RADIX_OFF)
    # the default set's profiles no longer decide it
    v2 = REPO_ROOT / "ddtree_patches" / "v2"
    assert RADIX_OFF not in load_bench_profile(v2).server_args
    assert RADIX_OFF not in load(v2).smoke.server_args


def test_bench_keeps_the_radix_cache_on_by_default_and_turns_it_off_on_request(bench_env):
    args = ("--variants", "baseline,ddtree", "--budgets", "8", "--concurrency", "1", "--repeats", "1", "--warmup", "0")
    on = bench_env.run(*args, logs=bench_env.tmp / "logs-on")
    assert on.code == 0, on.stderr
    assert all(RADIX_OFF not in run["argv"] for run in on.doc["result"]["variants"])
    off = bench_env.run(*args, "--disable-radix-cache", logs=bench_env.tmp / "logs-off")
    assert off.code == 0, off.stderr
    assert all(run["argv"].count(RADIX_OFF) == 1 for run in off.doc["result"]["variants"])


def test_radix_prompts_share_a_long_prefix_and_extend_each_other():
    prompts = radix_prompts.radix_prompts(vocab_size=512)
    assert prompts == radix_prompts.radix_prompts(vocab_size=512)  # the same on every run
    shared = [p.input_ids for p in prompts if p.id.startswith("shared")]
    chain = [p.input_ids for p in prompts if p.id.startswith("chain")]
    assert len(shared) == radix_prompts.SHARED_COUNT and len(chain) == radix_prompts.CHAIN_COUNT
    prefix = radix_prompts.SHARED_PREFIX
    assert all(ids is not None and len(ids) == prefix + radix_prompts.SHARED_TAIL for ids in shared)
    assert len({ids[:prefix] for ids in shared}) == 1  # one prefix ...
    assert len({ids[prefix] for ids in shared}) > 1 and len(set(shared)) == len(shared)  # ... then their own
    for shorter, longer in pairwise(chain):
        assert longer[: len(shorter)] == shorter and len(longer) == len(shorter) + radix_prompts.CHAIN_STEP
    assert all(1 <= i < radix_prompts.ID_LIMIT for p in prompts for i in p.input_ids or ())
    small = radix_prompts.radix_prompts(vocab_size=100)
    assert all(i < 100 for p in small for i in p.input_ids or ())


def test_bench_runs_the_radix_prompts_beside_the_sets_own_and_keeps_them_in_the_logs(bench_env):
    (bench_env.model / "config.json").write_text(json.dumps({"vocab_size": 200}))
    args = ("--variants", "baseline,ddtree", "--budgets", "8", "--concurrency", "4", "--repeats", "1", "--warmup", "0",
            "--radix-prompts")
    out = bench_env.run(*args)
    assert out.code == 0, out.stderr
    written = bench_env.tmp / "logs" / radix_prompts.FILE_NAME
    result = out.doc["result"]
    sets = {s["name"]: s for s in result["prompt_sets"]}
    assert sets["radix"]["file"] == str(written) and sets["radix"]["prompts"] == 16 and sets["radix"]["generated"]
    lines = [json.loads(line) for line in written.read_text().splitlines()]
    assert [line["id"] for line in lines] == [p.id for p in radix_prompts.radix_prompts(200)]
    assert max(i for line in lines for i in line["input_ids"]) < 200
    tree = next(run for run in result["variants"] if run["kind"] == "tree")
    radix_level = next(level for level in tree["levels"] if level["prompt_set"] == "radix")
    assert radix_level["compared"] == 16 and radix_level["mismatches"] == []
    clash = bench_env.tmp / "radix.jsonl"
    clash.write_text(written.read_text())
    both = bench_env.run(*args, "--prompts", str(clash), logs=bench_env.tmp / "logs-both")
    assert both.code == 2 and "--radix-prompts adds the prompt set 'radix'" in both.stderr
