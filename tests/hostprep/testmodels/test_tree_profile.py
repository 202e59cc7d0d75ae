"""``patchkit testmodels --profile tree``: a tree verifies more than a chain, checked on CPU with the
reference forward and the v1 set's tree builder; the default models stay byte-identical."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from patchkit.hostprep import testmodels as tm  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import acceptance  # noqa: E402
import reference as ref  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[3]
#: sha256 of the default seed-0 files as the H200 runs used them (written before the tree profile existed).
DEFAULT_SHA256 = {
    ("target", "config.json"): "76ab76ce1b0d6cecf036446c43aec456caa80ab73c5408d919dc8f506ddd2983",
    ("target", "model.safetensors"): "98dfb6915eabc20d1284145eb3b71f142f9c25536f6079a201fd69f85881d1d5",
    ("draft", "config.json"): "68964ce03740b3859152ed53739576c5ee6a89b2fcc0ab5ffb29b606648e505a",
    ("draft", "model.safetensors"): "f9ec1e4743ca2e58003466f1b14fa342fbca96dd15010fb38b06eddf5e6abfc1",
}
#: The gain the bench asserts on these models (patchkit bench --expect-tree-gain), with room to spare.
MIN_GAIN = 1.3
PROMPTS = [[195], [15, 86, 225, 90, 253, 77, 24, 186], [11, 12, 13, 14, 15], [7, 8, 9] * 4]


@pytest.fixture(scope="module")
def walks(tmp_path_factory):
    torch.set_num_threads(1)  # the tiny forwards are launch-bound; threads only contend on 2 cores
    utils = acceptance.load_ddtree_utils(tmp_path_factory.mktemp("ddtree_utils"))
    target, draft = tm.build_tree_weights(0)
    return [acceptance.walk(utils, target, draft, p, 32, [16, 64]) for p in PROMPTS]


def test_default_models_are_byte_identical(tmp_path):
    tm.write_test_models(tmp_path, seed=0)
    for (role, name), digest in DEFAULT_SHA256.items():
        assert hashlib.sha256((tmp_path / role / name).read_bytes()).hexdigest() == digest, (role, name)


def test_tree_beats_the_chain_by_the_stated_margin(walks):
    chain = acceptance.mean_accept(walks, "chain")
    b16, b64 = acceptance.mean_accept(walks, "B=16"), acceptance.mean_accept(walks, "B=64")
    assert 1.1 < chain < 1.8, chain  # the chain verifies few tokens ...
    assert b16 >= MIN_GAIN * chain, (chain, b16)  # ... a tree of 16 nodes clearly more ...
    assert b64 > b16, (b16, b64)  # ... and a bigger tree more still
    for w in walks:  # on every prompt, not only on average
        assert acceptance.mean_accept([w], "B=16") > acceptance.mean_accept([w], "chain"), w.rounds


def test_outputs_vary_and_leave_the_class(walks):
    assert all(len(set(w.output)) >= 3 for w in walks), [w.output for w in walks]  # never a constant
    leaving = [w for w in walks if len({t // tm.TREE_MEMBERS for t in w.output}) >= 3]
    assert len(leaving) >= 3, [w.output for w in walks]  # most walks move on through several classes


def test_the_target_token_is_in_the_drafts_top_3_while_its_top_1_is_often_wrong():
    torch.set_num_threads(1)
    target, draft = tm.build_tree_weights(0)
    target = {k: v.to(torch.bfloat16).float() for k, v in target.items()}
    draft = {k: v.to(torch.bfloat16).float() for k, v in draft.items()}
    top1 = top3 = total = 0
    for prompt in PROMPTS[:2]:
        seq = list(prompt) + ref.greedy(target, prompt, 24)
        for j in range(len(prompt), len(seq) - 1):
            logits = ref.draft_block_logits(target, draft, j, seq[j])[0]  # depth 1
            best = logits.topk(3).indices.tolist()
            assert {t // tm.TREE_MEMBERS for t in best} == {seq[j] // tm.TREE_MEMBERS}, "top 3 = the bonus's class"
            total += 1
            top1 += best[0] == seq[j + 1]
            top3 += seq[j + 1] in best
    assert top1 < 0.6 * total, (top1, total)
    assert top3 >= 0.6 * total and top3 > top1 * 1.5, (top1, top3, total)


def test_cli_writes_the_tree_profile(tmp_path):
    done = subprocess.run([sys.executable, "-m", "patchkit", "testmodels", "--out", str(tmp_path / "m"), "--profile",
                           "tree", "--json"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["profile"] == "tree"
    assert json.loads((tmp_path / "m" / "draft" / "config.json").read_text())["architectures"] == ["DFlashDraftModel"]
    default = tmp_path / "d"
    tm.write_test_models(default, seed=0)
    assert (tmp_path / "m" / "target" / "model.safetensors").read_bytes() != \
        (default / "target" / "model.safetensors").read_bytes()
    bad = subprocess.run([sys.executable, "-m", "patchkit", "testmodels", "--out", str(tmp_path / "x"), "--profile",
                          "wide"], capture_output=True, text=True, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and "wide" in bad.stderr
