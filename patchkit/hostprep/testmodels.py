"""``patchkit testmodels``: a tiny seeded random Qwen3 target and a matching DFlash draft, written in
SGLang 0.5.12's formats (``config.json`` + ``model.safetensors``), for tokenizer-free smoke runs
(``--skip-tokenizer-init``, input ids in, output ids out).

How the weights are arranged (so that greedy outputs are not constant and the drafter is often, but
not always, right). The hidden state is split into subspaces:

* ``A`` (token identity): each token's embedding is a random unit vector there, plus a "real token"
  flag; the mask token has only a "mask" flag.
* ``B`` (next-token vote): the LM head reads only ``B``; row ``k`` is a random unit vector ``e_k``.

Target (Qwen3, ``TARGET_LAYERS`` layers): layer 0's MLP is a lookup table that reads the token
identity in ``A`` and writes ``e_{f(t)}`` into ``B``, where ``f`` is one random cycle through the
ordinary tokens, so greedy output walks that cycle and never settles. Layers 1..n-1 have random
attention (queries and keys over ``A``) whose output is written into ``B`` with scale ``noise``: a
context-dependent push that sometimes makes the target choose another token than ``f(t)``.

Draft (DFlash, one layer): its attention lets every mask position of the block attend to the bonus
token (query = "mask" flag, key = "real" flag, both in the lowest-frequency rotary pair so position
barely matters; context features are projected to zero so context keys score 0) and copies its identity
into ``A``; its MLP is the same lookup table, so position 1 of the block predicts ``f(bonus)``: right
whenever the target follows ``f``, wrong where the context push wins. Deeper positions repeat that
guess, so acceptance is mostly 1 or 2 tokens. The draft's final norm weight (1 / ``draft_temperature``)
keeps its distribution peaked but not one-hot.

Measured with a plain-torch reference forward (tests/hostprep/testmodels/reference.py), seed 0, defaults: greedy
outputs follow ``f`` about 80% of the time (the draft's first guess is right there) and the rest jump
elsewhere (the walk leaves the tree); no output is constant.

``--heads N`` (default 4; a multiple of the 2 KV heads) widens both models' attention for tensor
parallelism: SGLang splits attention heads over the ranks, so tp 8 needs 8. The draft's copy attention
writes out only the first query head of each KV group, so its extra heads change nothing; the target's
noise heads are all random, and their sum pushes harder
the more heads there are, so ``noise`` is scaled by sqrt(4 / N), which keeps the share of walks that
leave the cycle about where 4 heads have it (measured with the reference forward: 8 heads with the
unscaled noise made one of the test prompts fall into a 4-token loop).

``--profile tree`` writes a pair where a tree verifies more than a chain (the default pair's draft
repeats one guess at every depth, so DDTREE and DFLASH accept about the same there). The ordinary
tokens are grouped in 170 classes of 3 members (token ``3k + m``); the LM head's row of a token is its
class vector (subspace ``B_CLASS``) plus its member's unit vector (subspace ``B_MEMBER``):

* target: layer 0's lookup MLP writes, for current token ``t = 3c + m``, a strong vote for its own class
  ``c``, a weaker one for the next class ``F(c)`` (``F`` one random cycle through the classes) and a vote
  for member ``next_c(m)`` (a random 3-cycle per class). Layers 1..3 are sharp random attention
  (q/k norm weight ``TREE_SHARPNESS``) over the token identities, written into both B subspaces: a
  context-dependent push that often picks another member and now and then leaves the class. So the
  target walks inside a class for a while, in an order the draft does not know, then moves on.
* draft: the same copy attention as the default draft, then a lookup that writes the bonus token's
  class (and, weaker, ``F(c)``) plus a FIXED member preference (member 0, then 1, then 2), at every
  depth. Its top 3 at each depth are the class's three members; its top 1 is right about one time in
  three. A chain (DFLASH) stops at the first wrong top-1; a tree of B nodes holds all 3 members at the
  first depths, so it follows the target as long as the walk stays in the class.

Measured with the reference forward and the v1 set's tree builder on the shipped token-id prompts
(seed 0, 64 new tokens, tests/hostprep/testmodels/test_tree_profile.py checks a shorter run): mean
accept length 1.40 for the chain, 2.22 / 2.46 / 3.04 / 3.48 for trees of B = 7 / 16 / 64 / 256; outputs
hold 13 to 43 distinct tokens per 64.
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit.errors import BadInput
from patchkit.results import CommandResult

VOCAB = 512
HIDDEN = 256
HEADS = 4  # default; --heads picks another multiple of KV_HEADS
KV_HEADS = 2
HEAD_DIM = 64
INTERMEDIATE = 512
TARGET_LAYERS = 4
DRAFT_LAYERS = 1
BLOCK_SIZE = 8
ROPE_THETA = 1_000_000.0
RMS_EPS = 1e-6
MASK_TOKEN = VOCAB - 1
EOS_TOKEN = VOCAB - 2
ORDINARY = VOCAB - 2  # tokens 0..509 are ordinary; 510 is EOS, 511 the DFlash mask
A_DIMS = range(0, 96)
B_DIMS = range(96, 224)
REAL_FLAG, MASK_FLAG = 224, 225
#: The lowest-frequency rotary pair of a head (neox style pairs d and d + HEAD_DIM / 2).
SLOW_ROPE_DIM = HEAD_DIM // 2 - 1
CAPTURE_LAYER = 1  # target layer whose output the draft's context features would read


#: ``--profile`` names: ``default`` (the pair above) and ``tree`` (tree-friendly, see the docstring).
PROFILES = ("default", "tree")


@dataclass(frozen=True)
class TestModelsResult(CommandResult):
    target: Path
    draft: Path
    seed: int
    vocab_size: int
    block_size: int
    mask_token_id: int
    profile: str = "default"
    shape: dict | None = None  # --shape: the real shape's fields; None for the tiny arranged models
    device: str | None = None  # --shape: where the weights were drawn
    bytes_written: int | None = None
    seconds: float | None = None


def _torch():
    try:
        import torch
    except ImportError as error:  # pragma: no cover - torch is in the test extra
        raise BadInput("patchkit testmodels needs torch", hint="pip install torch") from error
    return torch


def _unit_rows(torch, gen, rows: int, dims: int):
    matrix = torch.randn(rows, dims, generator=gen)
    return matrix / matrix.norm(dim=1, keepdim=True)


def _cycle(torch, gen) -> list[int]:
    """f as one random cycle through the ordinary tokens: f(order[i]) = order[i + 1]."""
    order = torch.randperm(ORDINARY, generator=gen).tolist()
    f = [0] * VOCAB
    for i, token in enumerate(order):
        f[token] = order[(i + 1) % ORDINARY]
    f[EOS_TOKEN], f[MASK_TOKEN] = order[0], order[0]
    return f


@dataclass
class _Shared:
    """Tensors both models use: embeddings, LM-head votes, the lookup table."""

    embed: object
    lm_head: object
    identity: object  # [VOCAB, |A|] unit rows
    f: list[int]


def _shared(torch, gen) -> _Shared:
    identity = _unit_rows(torch, gen, VOCAB, len(A_DIMS))
    votes = _unit_rows(torch, gen, VOCAB, len(B_DIMS))
    embed = torch.zeros(VOCAB, HIDDEN)
    embed[:, A_DIMS.start:A_DIMS.stop] = identity
    embed[:, REAL_FLAG] = 1.0
    embed[MASK_TOKEN] = 0.0
    embed[MASK_TOKEN, MASK_FLAG] = 1.0
    lm_head = torch.zeros(VOCAB, HIDDEN)
    lm_head[:, B_DIMS.start:B_DIMS.stop] = votes
    lm_head[MASK_TOKEN] = 0.0
    lm_head[EOS_TOKEN] = 0.0  # never chosen, so runs without ignore_eos are not cut short
    return _Shared(embed, lm_head, identity, _cycle(torch, gen))


#: Gate value of the matching row of a lookup table: large, so SiLU(g) * g ~ g * g dwarfs the rest.
DETECT = 40.0


def _lookup_mlp(torch, shared: _Shared, a_norm: float, out_scale: float) -> dict[str, object]:
    """gate/up detect token t's identity in A; down writes ``out_scale * e_{f(t)}`` into B.

    ``a_norm`` is the length of the A part after the layer norm, so the matching row gates at DETECT.
    """
    gate = torch.zeros(INTERMEDIATE, HIDDEN)
    gate[:ORDINARY, A_DIMS.start:A_DIMS.stop] = shared.identity[:ORDINARY] * (DETECT / a_norm)
    down = torch.zeros(HIDDEN, INTERMEDIATE)
    targets = torch.tensor(shared.f[:ORDINARY])
    votes = shared.lm_head[targets][:, B_DIMS.start:B_DIMS.stop].T
    down[B_DIMS.start:B_DIMS.stop, :ORDINARY] = votes * (out_scale / DETECT**2)
    return {"mlp.gate_proj.weight": gate, "mlp.up_proj.weight": gate.clone(), "mlp.down_proj.weight": down}


def _norms(torch) -> dict[str, object]:
    return {
        "input_layernorm.weight": torch.ones(HIDDEN),
        "post_attention_layernorm.weight": torch.ones(HIDDEN),
        "self_attn.q_norm.weight": torch.ones(HEAD_DIM),
        "self_attn.k_norm.weight": torch.ones(HEAD_DIM),
    }


def _zero_attention(torch, heads: int) -> dict[str, object]:
    return {
        "self_attn.q_proj.weight": torch.zeros(heads * HEAD_DIM, HIDDEN),
        "self_attn.k_proj.weight": torch.zeros(KV_HEADS * HEAD_DIM, HIDDEN),
        "self_attn.v_proj.weight": torch.zeros(KV_HEADS * HEAD_DIM, HIDDEN),
        "self_attn.o_proj.weight": torch.zeros(HIDDEN, heads * HEAD_DIM),
    }


def _zero_mlp(torch) -> dict[str, object]:
    return {
        "mlp.gate_proj.weight": torch.zeros(INTERMEDIATE, HIDDEN),
        "mlp.up_proj.weight": torch.zeros(INTERMEDIATE, HIDDEN),
        "mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE),
    }


def _noise_attention(torch, gen, noise: float, heads: int) -> dict[str, object]:
    """Random context mixing over A, written into B: the context-dependent push."""
    a = slice(A_DIMS.start, A_DIMS.stop)
    q = torch.zeros(heads * HEAD_DIM, HIDDEN)
    k = torch.zeros(KV_HEADS * HEAD_DIM, HIDDEN)
    v = torch.zeros(KV_HEADS * HEAD_DIM, HIDDEN)
    q[:, a] = torch.randn(heads * HEAD_DIM, len(A_DIMS), generator=gen)
    k[:, a] = torch.randn(KV_HEADS * HEAD_DIM, len(A_DIMS), generator=gen)
    v[:, a] = torch.randn(KV_HEADS * HEAD_DIM, len(A_DIMS), generator=gen) / math.sqrt(len(A_DIMS))
    o = torch.zeros(HIDDEN, heads * HEAD_DIM)
    o[B_DIMS.start:B_DIMS.stop] = torch.randn(len(B_DIMS), heads * HEAD_DIM, generator=gen) * noise / math.sqrt(heads * HEAD_DIM)
    return {"self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k, "self_attn.v_proj.weight": v,
            "self_attn.o_proj.weight": o}


def target_weights(torch, gen, shared: _Shared, noise: float, heads: int = HEADS) -> dict[str, object]:
    weights = {"model.embed_tokens.weight": shared.embed, "model.norm.weight": torch.ones(HIDDEN),
               "lm_head.weight": shared.lm_head}
    for layer in range(TARGET_LAYERS):
        parts = {**_norms(torch)}
        if layer == 0:
            parts.update(_zero_attention(torch, heads))
            # Input: A (unit) + real flag (1), so the norm scales A to sqrt(HIDDEN / 2).
            parts.update(_lookup_mlp(torch, shared, a_norm=math.sqrt(HIDDEN / 2), out_scale=1.0))
        else:
            parts.update(_noise_attention(torch, gen, noise, heads))
            parts.update(_zero_mlp(torch))
        weights.update({f"model.layers.{layer}.{name}": tensor for name, tensor in parts.items()})
    return weights


COPY_GAIN = 4.0
#: Size of the draft's vote in B relative to the copied identity in A, so B dominates its final norm.
DRAFT_VOTE = 100.0


def _copy_attention(torch, heads: int) -> dict[str, object]:
    """Mask positions attend to the bonus token and copy its identity (A) into A."""
    q = torch.zeros(heads * HEAD_DIM, HIDDEN)
    k = torch.zeros(KV_HEADS * HEAD_DIM, HIDDEN)
    for head in range(heads):
        q[head * HEAD_DIM + SLOW_ROPE_DIM, MASK_FLAG] = 1.0
    for head in range(KV_HEADS):
        k[head * HEAD_DIM + SLOW_ROPE_DIM, REAL_FLAG] = 1.0
    v = torch.zeros(KV_HEADS * HEAD_DIM, HIDDEN)
    o = torch.zeros(HIDDEN, heads * HEAD_DIM)
    for i, dim in enumerate(A_DIMS):  # kv head 0 carries A[0:64], kv head 1 carries A[64:96]
        kv_head, slot = divmod(i, HEAD_DIM)
        v[kv_head * HEAD_DIM + slot, dim] = 1.0
        q_head = kv_head * (heads // KV_HEADS)  # the first query head that reads this kv head
        o[dim, q_head * HEAD_DIM + slot] = COPY_GAIN
    q_norm = torch.ones(HEAD_DIM)
    q_norm[SLOW_ROPE_DIM] = 4.0  # sharp attention: score 8 * 4 * 4 / 8 * 8 = 128 on the bonus token
    return {"self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k, "self_attn.v_proj.weight": v,
            "self_attn.o_proj.weight": o, "self_attn.q_norm.weight": q_norm,
            "self_attn.k_norm.weight": q_norm.clone()}


def draft_weights(torch, shared: _Shared, temperature: float, heads: int = HEADS) -> dict[str, object]:
    # After the copy, A holds the bonus identity at COPY_GAIN * sqrt(HIDDEN / 2) next to the mask flag (1):
    # the norm leaves A at almost full length, sqrt(HIDDEN).
    lookup = _lookup_mlp(torch, shared, a_norm=math.sqrt(HIDDEN), out_scale=DRAFT_VOTE)
    layer = {**_norms(torch), **_copy_attention(torch, heads), **lookup}
    weights = {f"layers.0.{name}": tensor for name, tensor in layer.items()}
    weights["norm.weight"] = torch.full((HIDDEN,), 1.0 / temperature)
    weights["fc.weight"] = torch.zeros(HIDDEN, HIDDEN)  # context features carry nothing the draft uses
    weights["hidden_norm.weight"] = torch.ones(HIDDEN)
    return weights


def _common_config(heads: int) -> dict:
    return {
        "model_type": "qwen3", "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
        "num_attention_heads": heads, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "max_position_embeddings": 4096, "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA, "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": EOS_TOKEN,
        "eos_token_id": EOS_TOKEN, "use_sliding_window": False, "sliding_window": None,
        "initializer_range": 0.02, "use_cache": True,
    }


def target_config(heads: int = HEADS) -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], **_common_config(heads), "num_hidden_layers": TARGET_LAYERS,
            "max_window_layers": TARGET_LAYERS}


def draft_config(heads: int = HEADS) -> dict:
    return {"architectures": ["DFlashDraftModel"], **_common_config(heads), "num_hidden_layers": DRAFT_LAYERS,
            "num_target_layers": TARGET_LAYERS, "block_size": BLOCK_SIZE,
            "dflash_config": {"mask_token_id": MASK_TOKEN, "target_layer_ids": [CAPTURE_LAYER]}}


def _raw_bytes(tensor: Any) -> bytes:
    """A contiguous CPU tensor's bytes, read in place: no numpy, which torch does not require (a torch
    installed without it fails ``Tensor.numpy()`` with "Numpy is not available")."""
    if sys.byteorder != "little":  # safetensors stores little-endian
        raise BadInput("patchkit testmodels writes little-endian safetensors and needs a little-endian host")
    return ctypes.string_at(tensor.data_ptr(), tensor.numel() * tensor.element_size())


def write_safetensors(path: Path, tensors: dict[str, object]) -> None:
    """Write the safetensors format (8-byte header length, JSON header, raw little-endian bf16 data)."""
    torch = _torch()
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = _raw_bytes(tensors[name].to(torch.bfloat16).contiguous())
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for blob in blobs:
            handle.write(blob)


def _write_configs_only(directory: Path, config: dict, bos_eos: int = EOS_TOKEN) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (directory / "generation_config.json").write_text(
        json.dumps({"bos_token_id": bos_eos, "eos_token_id": bos_eos, "do_sample": False}, indent=2) + "\n")


def _write_model(directory: Path, config: dict, weights: dict[str, object]) -> None:
    _write_configs_only(directory, config)
    write_safetensors(directory / "model.safetensors", weights)


def check_heads(heads: int) -> None:
    if heads < KV_HEADS or heads % KV_HEADS:
        raise BadInput(f"--heads {heads}: attention heads must be a positive multiple of the {KV_HEADS} KV heads",
                       hint=f"for tensor parallel size N pass a multiple of both N and {KV_HEADS}, e.g. --heads 8 for tp 8")


def build_weights(seed: int, noise: float = 0.5, draft_temperature: float = 1.5, heads: int = HEADS):
    """The target and draft weight dicts (float32) and the lookup function f, from one seed."""
    check_heads(heads)
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    shared = _shared(torch, gen)
    # More random heads push harder in sum; sqrt(HEADS / heads) keeps the push about as strong as 4 heads'.
    target = target_weights(torch, gen, shared, noise * math.sqrt(HEADS / heads), heads)
    return target, draft_weights(torch, shared, draft_temperature, heads), shared.f


# ---------------------------------------------------------------- the tree-friendly profile

TREE_MEMBERS = 3
TREE_CLASSES = ORDINARY // TREE_MEMBERS  # 170 classes of 3 ordinary tokens
B_CLASS = range(96, 216)
B_MEMBER = range(216, 216 + TREE_MEMBERS)
#: Target lookup votes (raw, before the final norm): own class, next class, the member it walks to.
TREE_CLASS_VOTE, TREE_NEXT_CLASS_VOTE, TREE_MEMBER_VOTE = 4.0, 2.4, 2.0
#: Scale of the context push into the class and member subspaces, and the q/k norm weight of the
#: noise layers: sharp attention picks few context tokens, so the push changes from step to step
#: instead of settling into a loop (with weight 1 the walks fell into 3-token loops for good).
TREE_CLASS_NOISE, TREE_MEMBER_NOISE, TREE_SHARPNESS = 5.0, 2.0, 2.5
#: Draft: its vote for the next class relative to its own, and its fixed member preference (raw units
#: of the draft's B; about 0.3 and 0.15 nats after its final norm, so the top 3 stay close).
TREE_DRAFT_NEXT_CLASS = 0.25
TREE_DRAFT_MEMBER_BIAS = (0.3 / 14.0, 0.15 / 14.0, 0.0)


@dataclass
class _TreeShared:
    embed: object
    lm_head: object
    identity: object
    class_votes: object  # [TREE_CLASSES, |B_CLASS|] unit rows
    next_class: list[int]  # F
    next_member: dict[int, int]  # token -> the member the target walks to


def _tree_shared(torch, gen) -> _TreeShared:
    identity = _unit_rows(torch, gen, VOCAB, len(A_DIMS))
    class_votes = _unit_rows(torch, gen, TREE_CLASSES, len(B_CLASS))
    order = torch.randperm(TREE_CLASSES, generator=gen).tolist()
    next_class = [0] * TREE_CLASSES
    for i, c in enumerate(order):
        next_class[c] = order[(i + 1) % TREE_CLASSES]
    next_member = {}
    for c in range(TREE_CLASSES):
        cycle = torch.randperm(TREE_MEMBERS, generator=gen).tolist()
        for i, m in enumerate(cycle):
            next_member[TREE_MEMBERS * c + m] = cycle[(i + 1) % TREE_MEMBERS]
    embed = torch.zeros(VOCAB, HIDDEN)
    embed[:, A_DIMS.start:A_DIMS.stop] = identity
    embed[:, REAL_FLAG] = 1.0
    embed[MASK_TOKEN] = 0.0
    embed[MASK_TOKEN, MASK_FLAG] = 1.0
    lm_head = torch.zeros(VOCAB, HIDDEN)  # EOS and mask rows stay zero: never chosen
    for token in range(ORDINARY):
        k, m = divmod(token, TREE_MEMBERS)
        lm_head[token, B_CLASS.start:B_CLASS.stop] = class_votes[k]
        lm_head[token, B_MEMBER.start + m] = 1.0
    return _TreeShared(embed, lm_head, identity, class_votes, next_class, next_member)


def _tree_lookup_mlp(torch, shared: _TreeShared, a_norm: float, votes) -> dict[str, object]:
    """Like :func:`_lookup_mlp`, but row t writes ``votes[t]`` (raw units, [ORDINARY, HIDDEN]) into the stream."""
    gate = torch.zeros(INTERMEDIATE, HIDDEN)
    gate[:ORDINARY, A_DIMS.start:A_DIMS.stop] = shared.identity[:ORDINARY] * (DETECT / a_norm)
    down = torch.zeros(HIDDEN, INTERMEDIATE)
    down[:, :ORDINARY] = votes.T / DETECT**2
    return {"mlp.gate_proj.weight": gate, "mlp.up_proj.weight": gate.clone(), "mlp.down_proj.weight": down}


def _tree_votes(torch, shared: _TreeShared, own: float, next_class: float, members) -> object:
    """[ORDINARY, HIDDEN]: row t votes ``own`` for t's class, ``next_class`` for F(class) and ``members``
    ([ORDINARY, TREE_MEMBERS]) in the member subspace."""
    classes = torch.arange(ORDINARY) // TREE_MEMBERS
    votes = torch.zeros(ORDINARY, HIDDEN)
    votes[:, B_CLASS.start:B_CLASS.stop] = (own * shared.class_votes[classes]
                                            + next_class * shared.class_votes[torch.tensor(shared.next_class)[classes]])
    votes[:, B_MEMBER.start:B_MEMBER.stop] = members
    return votes


def _tree_target_votes(torch, shared: _TreeShared):
    members = torch.zeros(ORDINARY, TREE_MEMBERS)
    members[torch.arange(ORDINARY), torch.tensor([shared.next_member[t] for t in range(ORDINARY)])] = TREE_MEMBER_VOTE
    return _tree_votes(torch, shared, TREE_CLASS_VOTE, TREE_NEXT_CLASS_VOTE, members)


def _tree_draft_votes(torch, shared: _TreeShared):
    members = torch.tensor(TREE_DRAFT_MEMBER_BIAS).expand(ORDINARY, TREE_MEMBERS)
    return _tree_votes(torch, shared, 1.0, TREE_DRAFT_NEXT_CLASS, members) * DRAFT_VOTE


def _tree_noise_attention(torch, gen, heads: int) -> dict[str, object]:
    """The default noise attention's q/k/v, written into the class and member subspaces, made sharp."""
    parts = _noise_attention(torch, gen, 1.0, heads)
    width = heads * HEAD_DIM
    scale = math.sqrt(HEADS / heads) / math.sqrt(width)  # as the default: more heads, same total push
    o = torch.zeros(HIDDEN, width)
    o[B_CLASS.start:B_CLASS.stop] = torch.randn(len(B_CLASS), width, generator=gen) * TREE_CLASS_NOISE * scale
    o[B_MEMBER.start:B_MEMBER.stop] = torch.randn(len(B_MEMBER), width, generator=gen) * TREE_MEMBER_NOISE * scale
    parts["self_attn.o_proj.weight"] = o
    parts["self_attn.q_norm.weight"] = torch.full((HEAD_DIM,), TREE_SHARPNESS)
    parts["self_attn.k_norm.weight"] = torch.full((HEAD_DIM,), TREE_SHARPNESS)
    return parts


def build_tree_weights(seed: int, heads: int = HEADS):
    """The tree profile's target and draft weight dicts (float32), from one seed."""
    check_heads(heads)
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    shared = _tree_shared(torch, gen)
    target = {"model.embed_tokens.weight": shared.embed, "model.norm.weight": torch.ones(HIDDEN),
              "lm_head.weight": shared.lm_head}
    for layer in range(TARGET_LAYERS):
        parts = {**_norms(torch)}
        if layer == 0:
            parts.update(_zero_attention(torch, heads))
            parts.update(_tree_lookup_mlp(torch, shared, math.sqrt(HIDDEN / 2), _tree_target_votes(torch, shared)))
        else:
            parts.update(_tree_noise_attention(torch, gen, heads))
            parts.update(_zero_mlp(torch))
        target.update({f"model.layers.{layer}.{name}": tensor for name, tensor in parts.items()})
    lookup = _tree_lookup_mlp(torch, shared, math.sqrt(HIDDEN), _tree_draft_votes(torch, shared))
    layer = {**_norms(torch), **_copy_attention(torch, heads), **lookup}
    draft = {f"layers.0.{name}": tensor for name, tensor in layer.items()}
    draft["norm.weight"] = torch.ones(HIDDEN)
    draft["fc.weight"] = torch.zeros(HIDDEN, HIDDEN)
    draft["hidden_norm.weight"] = torch.ones(HIDDEN)
    return target, draft


def write_test_models(out: Path, seed: int = 0, noise: float = 0.5, draft_temperature: float = 1.5,
                      heads: int = HEADS, profile: str = "default") -> TestModelsResult:
    """Write ``out/target`` and ``out/draft``; refuses to overwrite non-empty directories."""
    check_heads(heads)
    if profile not in PROFILES:
        raise BadInput(f"--profile {profile}: unknown test-model profile", hint=f"use one of {', '.join(PROFILES)}")
    target_dir, draft_dir = out / "target", out / "draft"
    for directory in (target_dir, draft_dir):
        if directory.exists() and any(directory.iterdir()):
            raise BadInput(f"{directory} exists and is not empty", hint="choose another --out")
    if profile == "tree":
        target, draft = build_tree_weights(seed, heads)
    else:
        target, draft, _f = build_weights(seed, noise, draft_temperature, heads)
    _write_model(target_dir, target_config(heads), target)
    _write_model(draft_dir, draft_config(heads), draft)
    return TestModelsResult("testmodels", True, target_dir, draft_dir, seed, VOCAB, BLOCK_SIZE, MASK_TOKEN, profile)

