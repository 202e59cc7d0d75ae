"""``patchkit testmodels --shape NAME``: random bf16 weights at a real model's shape, target and DFlash
draft in the same formats as the tiny test models (``config.json`` + ``model.safetensors``).

Acceptance on random weights means nothing; what a round costs does (measure ms per round at
the real shape, then project with a published acceptance table, ``patchkit bench --acceptance``).

Written fast: each tensor is drawn on the GPU when torch sees one (else on the CPU), moved to the host
and appended to the file at once, so memory holds one tensor at a time; the safetensors header is
known up front from the shapes. The total size is computed and checked against the free disk space
before anything is written.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from patchkit.errors import BadInput
from patchkit.hostprep.testmodels import TestModelsResult, _torch, _write_configs_only

BF16_BYTES = 2
#: Weights ~ N(0, INIT_STD), as HF's initializer_range for Qwen3; norms are ones.
INIT_STD = 0.02
#: Room left free on the disk beyond the files themselves.
DISK_MARGIN_BYTES = 256 * 2**20


@dataclass(frozen=True, kw_only=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    draft_layers: int = 2
    block_size: int = 16
    tie_word_embeddings: bool = False
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960


SHAPES = {
    # Qwen3-8B's config.json; the draft: 2 DFlash layers, block 16.
    "qwen3-8b": Shape(layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=12288, vocab=151936),
    "qwen3-1.7b": Shape(layers=28, hidden=2048, heads=16, kv_heads=8, head_dim=128, intermediate=6144, vocab=151936,
                        tie_word_embeddings=True),
}
#: Every field a custom shape must give is overwritten; the rest are these defaults.
CUSTOM_BASE = Shape(layers=0, hidden=0, heads=1, kv_heads=1, head_dim=0, intermediate=0, vocab=0)
#: testmodels options that override a named shape's fields.
OVERRIDES = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "draft_layers", "block_size")


def resolve_shape(name: str | None, overrides: dict[str, int | None]) -> Shape:
    given = {k: v for k, v in overrides.items() if v is not None}
    if name is None:
        missing = [k for k in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab") if k not in given]
        if missing:
            raise BadInput(f"a custom shape needs --{' --'.join(m.replace('_', '-') for m in missing)}",
                           hint=f"or start from --shape {' / '.join(SHAPES)} and override fields")
        given.setdefault("head_dim", given["hidden"] // given["heads"])
        shape = replace(CUSTOM_BASE, **given)  # type: ignore[arg-type]  # the keys are int fields of Shape
    elif name not in SHAPES:
        raise BadInput(f"--shape {name}: unknown shape", hint=f"use one of {', '.join(SHAPES)}, or give every field")
    else:
        shape = replace(SHAPES[name], **given)  # type: ignore[arg-type]  # the keys are int fields of Shape
    check_shape(shape)
    return shape


def check_shape(shape: Shape) -> None:
    for field in OVERRIDES:
        if getattr(shape, field) < 1:
            raise BadInput(f"--{field.replace('_', '-')} must be positive, got {getattr(shape, field)}")
    if shape.heads % shape.kv_heads:
        raise BadInput(f"--heads {shape.heads} is not a multiple of --kv-heads {shape.kv_heads}")
    if shape.block_size < 2:
        raise BadInput(f"--block-size {shape.block_size}: a DFlash block holds the root and at least one draft token")
    if shape.layers < 4 and shape.draft_layers > 1:
        raise BadInput(f"--layers {shape.layers}: DFlash picks its context layers between 1 and layers - 3, so a "
                       f"{shape.draft_layers}-layer draft needs a target of at least 4 layers")


def target_layer_ids(layers: int, draft_layers: int) -> list[int]:
    """SGLang's ``build_target_layer_ids``: evenly spaced from layer 1 to layers - 3 (one layer: the middle)."""
    if draft_layers == 1:
        return [layers // 2]
    start, end = 1, layers - 3
    return [round(start + i * (end - start) / (draft_layers - 1)) for i in range(draft_layers)]


def _layer_tensors(prefix: str, s: Shape) -> list[tuple[str, tuple[int, ...]]]:
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    return [
        (f"{prefix}input_layernorm.weight", (s.hidden,)), (f"{prefix}post_attention_layernorm.weight", (s.hidden,)),
        (f"{prefix}self_attn.q_proj.weight", (q, s.hidden)), (f"{prefix}self_attn.k_proj.weight", (kv, s.hidden)),
        (f"{prefix}self_attn.v_proj.weight", (kv, s.hidden)), (f"{prefix}self_attn.o_proj.weight", (s.hidden, q)),
        (f"{prefix}self_attn.q_norm.weight", (s.head_dim,)), (f"{prefix}self_attn.k_norm.weight", (s.head_dim,)),
        (f"{prefix}mlp.gate_proj.weight", (s.intermediate, s.hidden)),
        (f"{prefix}mlp.up_proj.weight", (s.intermediate, s.hidden)),
        (f"{prefix}mlp.down_proj.weight", (s.hidden, s.intermediate)),
    ]


def target_tensors(s: Shape) -> list[tuple[str, tuple[int, ...]]]:
    tensors = [("model.embed_tokens.weight", (s.vocab, s.hidden)), ("model.norm.weight", (s.hidden,))]
    if not s.tie_word_embeddings:
        tensors.append(("lm_head.weight", (s.vocab, s.hidden)))
    for layer in range(s.layers):
        tensors += _layer_tensors(f"model.layers.{layer}.", s)
    return tensors


def draft_tensors(s: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """The DFlash draft: its layers, fc over the captured target layers, two norms (embeddings and LM
    head are the target's)."""
    features = len(target_layer_ids(s.layers, s.draft_layers))
    tensors = [("fc.weight", (s.hidden, features * s.hidden)), ("hidden_norm.weight", (s.hidden,)),
               ("norm.weight", (s.hidden,))]
    for layer in range(s.draft_layers):
        tensors += _layer_tensors(f"layers.{layer}.", s)
    return tensors


def _common_config(s: Shape) -> dict[str, Any]:
    return {
        "model_type": "qwen3", "vocab_size": s.vocab, "hidden_size": s.hidden, "intermediate_size": s.intermediate,
        "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim,
        "hidden_act": "silu", "max_position_embeddings": s.max_position_embeddings, "rms_norm_eps": 1e-6,
        "rope_theta": s.rope_theta, "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": s.tie_word_embeddings, "torch_dtype": "bfloat16", "bos_token_id": s.vocab - 2,
        "eos_token_id": s.vocab - 2, "use_sliding_window": False, "sliding_window": None,
        "initializer_range": INIT_STD, "use_cache": True,
    }


def target_config(s: Shape) -> dict[str, Any]:
    return {"architectures": ["Qwen3ForCausalLM"], **_common_config(s), "num_hidden_layers": s.layers,
            "max_window_layers": s.layers}


def draft_config(s: Shape) -> dict[str, Any]:
    return {"architectures": ["DFlashDraftModel"], **_common_config(s), "num_hidden_layers": s.draft_layers,
            "num_target_layers": s.layers, "block_size": s.block_size, "tie_word_embeddings": False,
            "dflash_config": {"mask_token_id": s.vocab - 1,
                              "target_layer_ids": target_layer_ids(s.layers, s.draft_layers)}}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _header(tensors: list[tuple[str, tuple[int, ...]]]) -> bytes:
    header, offset = {}, 0
    for name, shape in sorted(tensors):
        size = _numel(shape) * BF16_BYTES
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    return encoded + b" " * (-len(encoded) % 8)


def file_size(tensors: list[tuple[str, tuple[int, ...]]]) -> int:
    return 8 + len(_header(tensors)) + sum(_numel(shape) for _n, shape in tensors) * BF16_BYTES


Progress = Callable[[int, int, str], None]  # (bytes done, bytes total, what is being written)


@dataclass(frozen=True, kw_only=True)
class ShapeWrite:
    shape: dict[str, Any]
    device: str
    bytes: int
    seconds: float


def _free_bytes(path: Path) -> int:
    probe = path
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_room(out: Path, total: int) -> None:
    free = _free_bytes(out)
    if free < total + DISK_MARGIN_BYTES:
        raise BadInput(f"the models need {total / 1e9:.2f} GB but {out} has {free / 1e9:.2f} GB free; nothing written",
                       hint="free some space or choose another --out")


def _stream(torch: Any, path: Path, tensors: list[tuple[str, tuple[int, ...]]], generator: Any, device: str,
            progress: Progress, done: int, total: int) -> int:
    header = _header(tensors)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)))
        handle.write(header)
        for name, shape in sorted(tensors):
            if name.endswith("norm.weight"):
                tensor = torch.ones(shape, dtype=torch.bfloat16, device=device)
            else:
                tensor = torch.empty(shape, dtype=torch.bfloat16, device=device).normal_(0.0, INIT_STD,
                                                                                        generator=generator)
            host = tensor.cpu().contiguous()
            size = host.numel() * host.element_size()
            # The tensor's bytes in place (no numpy, no copy); the file is little-endian like the host, checked
            # once in write_shape_models.
            handle.write(memoryview((ctypes.c_char * size).from_address(host.data_ptr())))
            done += size
            progress(done, total, f"{path.parent.name}/{path.name}: {name}")
    return done


def write_shape_models(out: Path, shape: Shape, seed: int, device: str | None = None,
                       progress: Progress | None = None, announce: Callable[[str], None] | None = None) -> ShapeWrite:
    """Write ``out/target`` and ``out/draft`` at ``shape``; checks the room first, streams tensor by tensor."""
    torch: Any = _torch()  # type: ignore[no-untyped-call]  # testmodels.py is not strict yet
    if sys.byteorder != "little":  # safetensors stores little-endian
        raise BadInput("patchkit testmodels writes little-endian safetensors and needs a little-endian host")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    target, draft = target_tensors(shape), draft_tensors(shape)
    sizes = {"target": file_size(target), "draft": file_size(draft)}
    total = sum(sizes.values())
    check_room(out, total)
    if announce:
        announce(f"writing {total / 1e9:.2f} GB ({sizes['target'] / 1e9:.2f} GB target, {sizes['draft'] / 1e9:.2f} GB "
                 f"draft) of random bf16 weights to {out}, drawn on {device}")
    progress = progress or (lambda _done, _total, _what: None)
    generator = torch.Generator(device=device).manual_seed(seed)
    begun, done = time.monotonic(), 0
    for role, tensors, config in (("target", target, target_config(shape)), ("draft", draft, draft_config(shape))):
        directory = out / role
        _write_configs_only(directory, config, bos_eos=shape.vocab - 2)
        done = _stream(torch, directory / "model.safetensors", tensors, generator, device, progress, done, total)
    return ShapeWrite(shape=asdict(shape), device=device, bytes=total, seconds=time.monotonic() - begun)


def write_shaped(out: Path, seed: int, shape_name: str | None, overrides: dict[str, int | None],
                 progress: Progress | None = None,
                 announce: Callable[[str], None] | None = None) -> TestModelsResult:
    """``--shape`` / explicit shape options: random bf16 weights at that shape (see shapemodels.py)."""
    shape = resolve_shape(shape_name, overrides)
    target_dir, draft_dir = out / "target", out / "draft"
    for directory in (target_dir, draft_dir):
        if directory.exists() and any(directory.iterdir()):
            raise BadInput(f"{directory} exists and is not empty", hint="choose another --out")
    written = write_shape_models(out, shape, seed, progress=progress, announce=announce)
    return TestModelsResult("testmodels", True, target_dir, draft_dir, seed, shape.vocab, shape.block_size,
                            shape.vocab - 1, f"shape:{shape_name or 'custom'}", written.shape, written.device,
                            written.bytes, written.seconds)
