"""The fused top-K kernels: bit-identical to the torch path, vocab-parallel merge, dispatch.

On CUDA, ``ddtree_topk_from_logits`` / ``ddtree_local_topk`` / ``ddtree_merge_topk`` run the
streaming part kernel and the merge kernels; they must return the torch path's tensors (dtype,
shape, values bit for bit, ties to the smaller token id, 0.0 / -0.0 / -inf) over many seeded
batches. The one quantity that may differ is the local fp64 ``shard_sumexp``: both paths sum
fp64 terms, in different orders, so it agrees to a few ulp and the fp32 log-probs formed from it
agree exactly. On any machine: CPU tensors never reach Triton, the off switch and missing
triton select torch, and triton's interpreter runs the kernels on CPU tensors.
"""

from __future__ import annotations

import random
import sys

import pytest
import torch
from _kernel_helpers import (
    REGIMES,
    assert_same,
    draft_logits_case,
    interpreted_copy,
    load_fresh,
    must_not_run,
)

# the fused top-K kernels of v2/v3 (0002)
pytestmark = pytest.mark.needs("_topk_triton", "_merge_triton")

FULL_VOCAB = 151936
KS = (1, 2, 7, 16, 31, 64, 100, 128, 255, 512, 1000, 1024)


def random_shape(rng: random.Random):
    """(bs, L, V, k): mostly small, sometimes a full Qwen3 vocabulary."""
    vocab = rng.choice((1, 5, 64, 300, 1000, 4099, 32000, 32000, FULL_VOCAB))
    bs = rng.choice((1, 2, 3, 8, 16)) if vocab < FULL_VOCAB else rng.choice((1, 2))
    depth = rng.randint(1, 16)
    k = rng.choice(KS)
    return bs, depth, vocab, k


def assert_local_same(fast, slow, where):
    """Local top-K: values, ids and the max exact; the fp64 sum of exps to a few ulp."""
    assert_same(fast[:3], slow[:3], where)
    assert fast[3].dtype == slow[3].dtype == torch.float64 and fast[3].shape == slow[3].shape, where
    torch.testing.assert_close(fast[3], slow[3], rtol=1e-13, atol=0, msg=where)


def stacked_shards(module, logits: torch.Tensor, k: int, shards: int, permute=None):
    """Split like a TP vocab-parallel head (equal padded shards), local top-K each, stack."""
    vocab = logits.shape[-1]
    width = -(-vocab // shards)
    stats = []
    for s in range(shards):
        start = s * width
        shard = logits[..., start:start + width]
        valid = shard.shape[-1]
        shard = torch.nn.functional.pad(shard, (0, width - valid), value=1e4)  # padding must be ignored
        stats.append(module.ddtree_local_topk(shard, k, vocab_start=start, num_valid=valid))
    if permute is not None:
        stats = [stats[i] for i in permute]
    return [torch.stack(parts) for parts in zip(*stats, strict=True)]


# ---------------------------------------------------------------- CUDA


@pytest.mark.gpu
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_triton_topk_equals_torch(ddtree_utils, cuda, regime, seed):
    rng = random.Random(1000 * seed + REGIMES.index(regime))
    gen = torch.Generator().manual_seed(1000 * seed + REGIMES.index(regime))
    for case in range(14):
        bs, depth, vocab, k = random_shape(rng)
        logits = draft_logits_case(regime, (bs, depth, vocab), gen).to(cuda)
        where = f"{regime} case {case}: bs={bs} L={depth} V={vocab} k={k} {logits.dtype}"
        assert ddtree_utils._use_triton_topk(logits, k), where
        fast = ddtree_utils.ddtree_topk_from_logits(logits, k)
        assert_same(fast, ddtree_utils._topk_from_logits_torch(logits, k), where)


@pytest.mark.gpu
@pytest.mark.parametrize("regime", ("bf16", "integer", "neg_inf", "zeros", "fp16"))
def test_triton_local_topk_equals_torch(ddtree_utils, cuda, regime):
    rng, gen = random.Random(7), torch.Generator().manual_seed(7)
    for case in range(16):
        bs, depth, vocab, k = random_shape(rng)
        logits = draft_logits_case(regime, (bs, depth, vocab), gen).to(cuda)
        start = rng.choice((0, 1, 77777))
        valid = rng.choice((None, vocab, max(0, vocab - 3), vocab // 2, 0))
        where = f"{regime} case {case}: V={vocab} k={k} start={start} valid={valid}"
        fast = ddtree_utils.ddtree_local_topk(logits, k, vocab_start=start, num_valid=valid)
        slow = ddtree_utils._local_topk_torch(logits, k, start, valid)
        assert_local_same(fast, slow, where)


@pytest.mark.gpu
@pytest.mark.parametrize("shards", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("regime", ("bf16", "integer", "gaussian"))
def test_triton_shard_merge_equals_torch(ddtree_utils, cuda, shards, regime):
    gen = torch.Generator().manual_seed(shards)
    for vocab, k in ((3001, 64), (1000, 128), (FULL_VOCAB, 512), (97, 40)):
        logits = draft_logits_case(regime, (2, 5, vocab), gen).to(cuda)
        order = torch.randperm(shards, generator=gen).tolist()  # gather order must not matter
        for permute in (None, order):
            stacked = stacked_shards(ddtree_utils, logits, k, shards, permute)
            assert ddtree_utils._use_triton_merge(*stacked, k)
            fast = ddtree_utils.ddtree_merge_topk(*stacked, k=k)
            assert_same(fast, ddtree_utils._merge_topk_torch(*stacked, k=k), f"V={vocab} k={k} {permute}")


@pytest.mark.gpu
@pytest.mark.parametrize("regime", ("bf16", "gaussian", "integer", "saturated"))
def test_triton_results_do_not_depend_on_the_shard_count(ddtree_utils, cuda, regime):
    gen = torch.Generator().manual_seed(11)
    logits = draft_logits_case(regime, (4, 15, FULL_VOCAB), gen).to(cuda)
    single = ddtree_utils.ddtree_topk_from_logits(logits, 128)
    for shards in (2, 3, 4, 8):
        merged = ddtree_utils.ddtree_merge_topk(*stacked_shards(ddtree_utils, logits, 128, shards), k=128)
        assert_same(merged, single, f"{shards} shards")


@pytest.mark.gpu
def test_triton_topk_takes_strided_inputs(ddtree_utils, cuda):
    gen = torch.Generator().manual_seed(5)
    base = draft_logits_case("bf16", (6, 9, 5000), gen).to(cuda)
    views = (
        base[::2],  # batch stride
        base[:, 1::2],  # depth stride
        base[..., 100:4100],  # offset rows
        base.transpose(1, 2).contiguous().transpose(1, 2),  # vocabulary stride != 1
        base.float(),
        base.half(),
    )
    for view in views:
        for k in (16, 300):
            assert_same(
                ddtree_utils.ddtree_topk_from_logits(view, k),
                ddtree_utils._topk_from_logits_torch(view, k),
                f"{tuple(view.stride())} {view.dtype} k={k}",
            )


@pytest.mark.gpu
def test_triton_topk_is_selected_on_cuda(ddtree_utils, cuda, monkeypatch):
    logits = draft_logits_case("bf16", (2, 3, 700), torch.Generator().manual_seed(1)).to(cuda)
    expected = ddtree_utils._topk_from_logits_torch(logits, 64)
    local = ddtree_utils._local_topk_torch(logits, 64, 0, None)
    monkeypatch.setattr(ddtree_utils, "_topk_from_logits_torch", must_not_run)
    monkeypatch.setattr(ddtree_utils, "_local_topk_torch", must_not_run)
    monkeypatch.setattr(ddtree_utils, "_merge_topk_torch", must_not_run)
    assert_same(ddtree_utils.ddtree_topk_from_logits(logits, 64), expected)
    assert_local_same(ddtree_utils.ddtree_local_topk(logits, 64), local, "local")
    stacked = [t.unsqueeze(0) for t in local]
    assert_same(ddtree_utils.ddtree_merge_topk(*stacked, k=64), expected)


@pytest.mark.gpu
def test_unsupported_topk_falls_back_to_torch_on_cuda(ddtree_utils, cuda, monkeypatch):
    gen = torch.Generator().manual_seed(2)
    cases = (
        (torch.randn(2, 3, 3000, generator=gen), 1025),  # k over the kernel's 1024
        (torch.randn(2, 3, 300, generator=gen).double(), 16),  # fp64 logits keep fp64 selection
        (torch.randint(-3, 3, (2, 3, 300), generator=gen), 16),  # integer logits
    )
    expected = [ddtree_utils._topk_from_logits_torch(x.to(cuda), k) for x, k in cases]
    monkeypatch.setattr(ddtree_utils, "_topk_triton", must_not_run)
    for (logits, k), want in zip(cases, expected, strict=True):
        assert not ddtree_utils._use_triton_topk(logits.to(cuda), k)
        assert_same(ddtree_utils.ddtree_topk_from_logits(logits.to(cuda), k), want)


@pytest.mark.gpu
def test_off_switch_selects_torch_topk_on_cuda(ddtree_utils, cuda, monkeypatch):
    module = load_fresh(ddtree_utils, monkeypatch, SGLANG_DDTREE_TRITON="off")
    monkeypatch.setattr(module, "_topk_triton", must_not_run)
    monkeypatch.setattr(module, "_merge_triton", must_not_run)
    logits = draft_logits_case("bf16", (2, 3, 700), torch.Generator().manual_seed(3)).to(cuda)
    assert_same(module.ddtree_topk_from_logits(logits, 32), ddtree_utils.ddtree_topk_from_logits(logits, 32))


@pytest.mark.gpu
def test_triton_topk_never_synchronises_and_replays_from_a_graph(ddtree_utils, cuda):
    gen = torch.Generator().manual_seed(4)
    static = draft_logits_case("bf16", (16, 15, FULL_VOCAB), gen).to(cuda)
    stats = ddtree_utils.ddtree_local_topk(static[..., :80000], 128, vocab_start=0, num_valid=79000)
    for _ in range(2):  # warm-up: compile
        ddtree_utils.ddtree_topk_from_logits(static, 128)
        ddtree_utils.ddtree_merge_topk(*[t.unsqueeze(0) for t in stats], k=128)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        ddtree_utils.ddtree_topk_from_logits(static, 128)
        ddtree_utils.ddtree_local_topk(static[..., :80000], 128, vocab_start=0, num_valid=79000)
        ddtree_utils.ddtree_merge_topk(*[t.unsqueeze(0) for t in stats], k=128)
    finally:
        torch.cuda.set_sync_debug_mode(previous)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        ddtree_utils.ddtree_topk_from_logits(static, 128)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ddtree_utils.ddtree_topk_from_logits(static, 128)
    for _ in range(3):
        static.copy_(draft_logits_case("bf16", tuple(static.shape), gen).to(cuda))
        graph.replay()
        assert_same(captured, ddtree_utils._topk_from_logits_torch(static, 128))


# ---------------------------------------------------------------- any machine


def test_cpu_inputs_never_reach_the_topk_kernels(ddtree_utils, monkeypatch):
    monkeypatch.setattr(ddtree_utils, "_DDTREE_TRITON_ENABLED", True)
    monkeypatch.setattr(ddtree_utils, "_topk_triton", must_not_run)
    monkeypatch.setattr(ddtree_utils, "_merge_triton", must_not_run)
    logits = draft_logits_case("bf16", (2, 3, 300), torch.Generator().manual_seed(0))
    assert ddtree_utils._topk_supported(logits, 16)
    assert not ddtree_utils._use_triton_topk(logits, 16)
    local = ddtree_utils.ddtree_local_topk(logits, 16)
    merged = ddtree_utils.ddtree_merge_topk(*[t.unsqueeze(0) for t in local], k=16)
    assert_same(merged, ddtree_utils.ddtree_topk_from_logits(logits, 16))


def test_topk_kernel_limits(ddtree_utils):
    supported = ddtree_utils._topk_supported
    x = torch.zeros(2, 3, 2000)
    assert supported(x, 1) and supported(x, 1024)
    assert not supported(x, 1025) and not supported(x, 0)
    assert supported(torch.zeros(2, 3, 10), 5000)  # k is capped by the vocabulary
    assert not supported(x.double(), 16) and not supported(x.long(), 16)
    assert not supported(torch.zeros(6, 2000), 16)  # needs [bs, L, V]
    assert not supported(torch.zeros(0, 3, 10), 4)
    assert not supported(x, 16, vocab_start=2**31 - 100)  # ids must stay below 2**31
    merge = ddtree_utils._merge_supported
    vals, ids = torch.zeros(4, 2, 3, 64), torch.zeros(4, 2, 3, 64, dtype=torch.int64)
    stats = torch.zeros(4, 2, 3, dtype=torch.float64)
    assert merge(vals, ids, stats, stats, 64) and merge(vals, ids, stats, stats, 1000)
    assert not merge(vals, ids.float(), stats, stats, 64)
    assert not merge(vals[0], ids[0], stats, stats, 64)  # needs [tp, bs, L, k']
    assert not merge(vals, ids[..., :8], stats, stats, 64)
    assert not merge(vals, ids, stats[:, :, :2], stats, 64)
    assert not merge(torch.zeros(32, 2, 3, 1024), torch.zeros(32, 2, 3, 1024, dtype=torch.int64),
                     torch.zeros(32, 2, 3), torch.zeros(32, 2, 3), 64)  # 32 x 1024 candidates


def test_module_without_triton_uses_torch_topk(ddtree_utils, monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    module = load_fresh(ddtree_utils, monkeypatch)
    assert module.triton is None
    logits = draft_logits_case("integer", (2, 3, 50), torch.Generator().manual_seed(1))
    assert not module._use_triton_topk(logits, 8)
    assert_same(module.ddtree_topk_from_logits(logits, 8), ddtree_utils.ddtree_topk_from_logits(logits, 8))


@pytest.fixture
def interpreted(ddtree_utils, monkeypatch):
    """The module with its kernels run by Triton's interpreter and its Triton paths taken for CPU tensors;
    small tiles: rows of several tiles, and k + tile < 2 tiles, so the buffer is cut back."""
    module = interpreted_copy(ddtree_utils, monkeypatch)
    monkeypatch.setattr(module, "_TOPK_TILE", 128)
    return module


def test_topk_kernels_under_triton_interpreter(ddtree_utils, interpreted):
    """The kernels' logic on a CPU, launched by the public functions as on CUDA: chunk + merge (log-probs
    and local stats) and the shard merge, against the torch path. (Each call of a jit helper costs the
    interpreter milliseconds: shapes stay small.)"""
    module = interpreted
    rng, gen = random.Random(5), torch.Generator().manual_seed(5)
    for case in range(6):
        regime = REGIMES[case % len(REGIMES)]
        bs, depth = rng.choice((1, 2)), rng.randint(1, 2)
        vocab = rng.choice((7, 150, 333, 520))
        k = rng.choice((1, 3, 16, 64))
        logits = draft_logits_case(regime, (bs, depth, vocab), gen)
        where = f"{regime} V={vocab} k={k}"
        assert module._use_triton_topk(logits, k), where
        assert_same(module.ddtree_topk_from_logits(logits, k), ddtree_utils._topk_from_logits_torch(logits, k), where)
        start, valid = rng.choice((0, 9)), rng.choice((None, vocab, vocab // 2))
        fast = module.ddtree_local_topk(logits, k, vocab_start=start, num_valid=valid)
        assert_local_same(fast, ddtree_utils._local_topk_torch(logits, k, start, valid), where + " local")
        if vocab >= 40:
            order = list(range(rng.choice((2, 3))))
            rng.shuffle(order)  # the gather order must not matter
            stacked = stacked_shards(ddtree_utils, logits, k, len(order), order)
            assert module._use_triton_merge(*stacked, k), where
            assert_same(module.ddtree_merge_topk(*stacked, k=k), ddtree_utils._merge_topk_torch(*stacked, k),
                        where + " merge")


def test_strided_logits_reach_the_kernels_contiguous_under_triton_interpreter(ddtree_utils, interpreted):
    """A vocabulary stride != 1 is copied before the launch (the kernels read rows of stride 1)."""
    base = draft_logits_case("gaussian", (2, 2, 200), torch.Generator().manual_seed(6))
    view = base.transpose(1, 2).contiguous().transpose(1, 2)
    assert view.stride(-1) != 1
    assert_same(interpreted.ddtree_topk_from_logits(view, 5), ddtree_utils._topk_from_logits_torch(base, 5))
