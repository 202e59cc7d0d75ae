"""``patchkit testmodels --shape``: random bf16 weights at a real shape, in the tiny models' formats,
streamed tensor by tensor, refused before anything is written when the disk has no room."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from patchkit.errors import BadInput  # noqa: E402
from patchkit.hostprep import shapemodels as sm  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).parent))
from test_testmodels import read_safetensors  # noqa: E402

SMALL = ["--layers", "5", "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--head-dim", "32",
         "--intermediate", "256", "--vocab", "300", "--block-size", "8"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "patchkit", "testmodels", *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})


def test_named_shapes_have_the_real_parameter_counts():
    def params(tensors):
        return sum(sm._numel(shape) for _name, shape in tensors)

    assert params(sm.target_tensors(sm.SHAPES["qwen3-8b"])) == pytest.approx(8.19e9, rel=0.01)
    # The model cards: Qwen3-8B 8.2B (6.95B without embeddings), Qwen3-1.7B 1.7B (1.4B; embeddings tied).
    assert params(sm.target_tensors(sm.SHAPES["qwen3-1.7b"])) == pytest.approx(1.72e9, rel=0.01)
    assert sm.target_layer_ids(36, 2) == [1, 33] and sm.target_layer_ids(36, 1) == [18]


def test_a_small_custom_shape_is_written_in_the_sglang_formats(tmp_path):
    done = cli("--out", str(tmp_path / "m"), "--shape", "qwen3-8b", *SMALL, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["result"]
    assert doc["profile"] == "shape:qwen3-8b" and doc["device"] in ("cpu", "cuda")
    assert "writing 0.00 GB" in done.stderr or "writing 0.01 GB" in done.stderr  # the size is said first
    target = json.loads((tmp_path / "m" / "target" / "config.json").read_text())
    assert (target["num_hidden_layers"], target["hidden_size"], target["num_attention_heads"],
            target["num_key_value_heads"], target["head_dim"], target["vocab_size"]) == (5, 128, 4, 2, 32, 300)
    draft = json.loads((tmp_path / "m" / "draft" / "config.json").read_text())
    assert draft["architectures"] == ["DFlashDraftModel"] and draft["block_size"] == 8
    assert draft["dflash_config"] == {"mask_token_id": 299, "target_layer_ids": [1, 2]}
    weights = read_safetensors(tmp_path / "m" / "target" / "model.safetensors")
    assert set(weights) == {name for name, _ in sm.target_tensors(sm.resolve_shape("qwen3-8b", _overrides()))}
    assert weights["model.layers.4.self_attn.q_proj.weight"].shape == (128, 128)
    assert weights["model.layers.0.self_attn.k_proj.weight"].shape == (64, 128)
    assert torch.all(weights["model.norm.weight"] == 1)
    assert weights["model.embed_tokens.weight"].float().std().item() == pytest.approx(sm.INIT_STD, rel=0.05)
    drafted = read_safetensors(tmp_path / "m" / "draft" / "model.safetensors")
    assert drafted["fc.weight"].shape == (128, 2 * 128) and "layers.1.mlp.down_proj.weight" in drafted
    assert doc["bytes_written"] == sum((tmp_path / "m" / r / "model.safetensors").stat().st_size for r in ("target", "draft"))


def _overrides():
    return dict(layers=5, hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate=256, vocab=300, draft_layers=None,
                block_size=8)


def test_weights_are_seeded(tmp_path):
    shape = sm.resolve_shape("qwen3-1.7b", _overrides())
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        sm.write_shape_models(tmp_path / name, shape, seed, device="cpu")
    data = {n: (tmp_path / n / "target" / "model.safetensors").read_bytes() for n in "abc"}
    assert data["a"] == data["b"] != data["c"]


def test_no_room_is_refused_before_anything_is_written(tmp_path):
    done = cli("--out", str(tmp_path / "big"), "--shape", "qwen3-8b", "--intermediate", "10000000")
    assert done.returncode == 2
    assert "the models need" in done.stderr and "GB free; nothing written" in done.stderr
    assert not (tmp_path / "big").exists()


def test_room_check_counts_both_files(tmp_path, monkeypatch):
    shape = sm.resolve_shape("qwen3-8b", _overrides())
    total = sm.file_size(sm.target_tensors(shape)) + sm.file_size(sm.draft_tensors(shape))
    monkeypatch.setattr(sm, "_free_bytes", lambda _path: total + sm.DISK_MARGIN_BYTES - 1)
    with pytest.raises(BadInput, match="nothing written"):
        sm.write_shape_models(tmp_path / "m", shape, 0, device="cpu")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--shape", "llama-70b"], "--shape llama-70b: unknown shape"),
    (["--shape", "qwen3-8b", "--heads", "30"], "--heads 30 is not a multiple of --kv-heads 8"),
    (["--layers", "4", "--hidden", "64"], "a custom shape needs --heads --kv-heads --intermediate --vocab"),
    (["--shape", "qwen3-8b", "--layers", "3"], "a 2-layer draft needs a target of at least 4 layers"),
])
def test_bad_shapes_are_one_line_errors(tmp_path, args, message):
    done = cli("--out", str(tmp_path / "m"), *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "m").exists()
