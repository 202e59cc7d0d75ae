"""The tiny test models: formats SGLang reads, seeded determinism, and what the weights make them do."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from patchkit.hostprep import testmodels as tm  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
import reference as ref  # noqa: E402


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    header.pop("__metadata__", None)
    base = 8 + length
    tensors = {}
    for name, spec in header.items():
        assert spec["dtype"] == "BF16"
        start, end = spec["data_offsets"]
        data = torch.frombuffer(bytearray(raw[base + start:base + end]), dtype=torch.bfloat16)
        tensors[name] = data.view(spec["shape"])
    return tensors


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    done = subprocess.run([sys.executable, "-m", "patchkit", "testmodels", "--out", str(out), "--seed", "3",
                           "--json"], capture_output=True, text=True, env={"PYTHONPATH": str(REPO_ROOT),
                                                                            "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return out, json.loads(done.stdout)


def test_cli_reports_the_directories(written):
    out, doc = written
    assert doc["ok"] and doc["result"]["target"] == str(out / "target")
    assert doc["result"]["mask_token_id"] == tm.MASK_TOKEN


def test_target_is_a_qwen3_checkpoint(written):
    out, _ = written
    config = json.loads((out / "target" / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    weights = read_safetensors(out / "target" / "model.safetensors")
    assert weights["model.embed_tokens.weight"].shape == (config["vocab_size"], config["hidden_size"])
    heads, kv, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    for i in range(config["num_hidden_layers"]):
        assert weights[f"model.layers.{i}.self_attn.q_proj.weight"].shape == (heads * head_dim, config["hidden_size"])
        assert weights[f"model.layers.{i}.self_attn.k_proj.weight"].shape == (kv * head_dim, config["hidden_size"])
        assert weights[f"model.layers.{i}.self_attn.q_norm.weight"].shape == (head_dim,)
        assert weights[f"model.layers.{i}.mlp.down_proj.weight"].shape == (config["hidden_size"], config["intermediate_size"])
    assert "lm_head.weight" in weights and "model.norm.weight" in weights


def test_draft_is_in_sglang_dflash_format(written):
    out, _ = written
    config = json.loads((out / "draft" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"]
    dflash = config["dflash_config"]
    # --skip-tokenizer-init needs an explicit mask token id inside the target vocabulary.
    assert 0 <= dflash["mask_token_id"] < config["vocab_size"]
    # SGLang captures "before layer k + 1", so a capture layer must not be the last one.
    assert all(0 <= k < tm.TARGET_LAYERS - 1 for k in dflash["target_layer_ids"])
    weights = read_safetensors(out / "draft" / "model.safetensors")
    features = len(dflash["target_layer_ids"])
    assert weights["fc.weight"].shape == (config["hidden_size"], features * config["hidden_size"])
    assert {"norm.weight", "hidden_norm.weight", "layers.0.self_attn.q_proj.weight"} <= set(weights)
    assert not any(name.startswith(("embed_tokens", "lm_head")) for name in weights)


def test_files_round_trip_and_are_seeded(written, tmp_path):
    out, _ = written
    target, _draft, _f = tm.build_weights(3)
    stored = read_safetensors(out / "target" / "model.safetensors")
    assert torch.equal(stored["model.layers.1.self_attn.o_proj.weight"],
                       target["model.layers.1.self_attn.o_proj.weight"].to(torch.bfloat16))
    tm.write_test_models(tmp_path / "again", seed=3)
    assert (tmp_path / "again" / "target" / "model.safetensors").read_bytes() == \
        (out / "target" / "model.safetensors").read_bytes()
    tm.write_test_models(tmp_path / "other", seed=4)
    assert (tmp_path / "other" / "target" / "model.safetensors").read_bytes() != \
        (out / "target" / "model.safetensors").read_bytes()


def test_refuses_to_overwrite(written):
    out, _ = written
    done = subprocess.run([sys.executable, "-m", "patchkit", "testmodels", "--out", str(out)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "exists and is not empty" in done.stderr


def test_heads_option_widens_both_models_and_refuses_a_bad_count(tmp_path):
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    cli = [sys.executable, "-m", "patchkit", "testmodels", "--json"]
    done = subprocess.run([*cli, "--out", str(tmp_path / "m8"), "--heads", "8"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    for role, prefix in (("target", "model.layers.1."), ("draft", "layers.0.")):
        config = json.loads((tmp_path / "m8" / role / "config.json").read_text())
        assert (config["num_attention_heads"], config["num_key_value_heads"]) == (8, tm.KV_HEADS)
        weights = read_safetensors(tmp_path / "m8" / role / "model.safetensors")
        assert weights[f"{prefix}self_attn.q_proj.weight"].shape == (8 * tm.HEAD_DIM, tm.HIDDEN)
        assert weights[f"{prefix}self_attn.o_proj.weight"].shape == (tm.HIDDEN, 8 * tm.HEAD_DIM)
    bad = subprocess.run([*cli, "--out", str(tmp_path / "m3"), "--heads", "3"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "--heads 3: attention heads must be a positive multiple" in bad.stdout + bad.stderr
    assert not (tmp_path / "m3").exists()


@pytest.mark.parametrize("heads", [4, 8])
def test_greedy_walks_vary_and_the_draft_is_often_but_not_always_right(heads):
    target, draft, f = tm.build_weights(0, heads=heads)
    assert target["model.layers.1.self_attn.q_proj.weight"].shape[0] == heads * tm.HEAD_DIM
    right = wrong = 0
    for prompt in ([195], [15, 86, 225, 90, 253, 77, 24, 186], [7, 8, 9] * 4):
        out = ref.greedy(target, prompt, 10)
        assert len(set(out)) >= 6, f"output too repetitive: {out}"
        seq = list(prompt) + out
        for i in range(len(prompt), len(seq)):
            guess = int(ref.draft_block_logits(target, draft, i - 1, seq[i - 1])[0].argmax())
            assert guess == f[seq[i - 1]], "the draft's first guess is the lookup f(bonus)"
            right += guess == seq[i]
            wrong += guess != seq[i]
    assert right > wrong > 0, (right, wrong)


def test_target_matches_hf_transformers_qwen3(written):
    """Where transformers is installed (the GPU host has it): the written target is a valid Qwen3 whose
    logits equal the reference forward's, so the weight arrangement means what the docstring says."""
    transformers = pytest.importorskip("transformers")
    out, _ = written
    model = transformers.AutoModelForCausalLM.from_pretrained(out / "target", torch_dtype=torch.float32).eval()
    target, _draft, _f = tm.build_weights(3)
    rounded = {name: tensor.to(torch.bfloat16).float() for name, tensor in target.items()}
    ids = [15, 86, 225, 90, 253, 77, 24, 186]
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0]
    assert torch.allclose(theirs, ref.target_logits(rounded, ids), atol=1e-4)
