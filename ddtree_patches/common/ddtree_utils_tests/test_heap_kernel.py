"""The tree builder's Triton fast path: dispatch, off switch, and bit-identity with the torch path.

On CUDA the Triton kernel must return exactly the torch path's tensors (dtypes, shapes,
values) over many seeded random batches, replay correctly from a CUDA graph and never
synchronise with the host. The dispatch tests run on any machine: CPU tensors never reach
Triton, the module imports without triton, and SGLANG_DDTREE_TRITON=0 selects torch.
"""

from __future__ import annotations

import random
import sys

import pytest
import torch

from test_builder_vs_heap import assert_matches_heap, draft_logits
from test_tp_shard_worlds import TREE_FIELDS

from _kernel_helpers import interpreted_copy, load_fresh, must_not_run

REGIMES = ("gaussian", "spiky", "integer", "bf16", "saturated")


def assert_same_tree(actual, expected) -> None:
    for field in TREE_FIELDS:
        a, e = getattr(actual, field), getattr(expected, field)
        assert a.dtype == e.dtype, field
        assert a.shape == e.shape, field
        assert a.device == e.device, field
        assert torch.equal(a, e), field
    assert actual.depth_limit == expected.depth_limit


def small_top(ddtree_utils, device="cpu", bs=2, depth=3, vocab=20, k=8):
    logits = draft_logits("integer", (bs, depth, vocab), torch.Generator().manual_seed(0))
    return ddtree_utils.ddtree_topk_from_logits(logits.to(device), k)


# ---------------------------------------------------------------- dispatch (any machine)


def test_cpu_inputs_never_reach_triton(ddtree_utils, monkeypatch):
    monkeypatch.setattr(ddtree_utils, "_DDTREE_TRITON_ENABLED", True)
    monkeypatch.setattr(ddtree_utils, "_build_tree_triton", must_not_run)
    log_probs, token_ids = small_top(ddtree_utils)
    assert ddtree_utils._triton_tree_supported(log_probs, token_ids, 8)
    assert not ddtree_utils._use_triton_tree(log_probs, token_ids, 8)
    tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, 8)
    assert_matches_heap(tree, log_probs, token_ids, 8)


def test_kernel_limits(ddtree_utils):
    lp, ids = small_top(ddtree_utils, depth=4, k=8)
    supported = ddtree_utils._triton_tree_supported
    assert supported(lp, ids, 1) and supported(lp, ids, 1021)
    assert not supported(lp, ids, 0) and not supported(lp, ids, 1022)
    most = ddtree_utils._TRITON_TREE_MAX_DEPTH  # the kernel's depth field: 31 (5 bits) in v2/v3, 18 in v1
    deep_lp, deep_ids = small_top(ddtree_utils, depth=most + 2, k=4)
    assert not supported(deep_lp, deep_ids, 64)  # more reachable depths than the kernel holds
    assert supported(deep_lp, deep_ids, most)  # only min(L, B) depths are reachable
    assert not supported(lp, ids[:, :, :4], 8)  # shapes differ
    assert not supported(lp, ids.double(), 8)  # float token ids
    assert not supported(lp[:0], ids[:0], 8)  # empty batch


@pytest.mark.parametrize(
    "value, enabled",
    [("0", False), ("false", False), ("OFF", False), (" no ", False), ("1", True), ("", True)],
)
def test_off_switch_is_read_at_import(ddtree_utils, monkeypatch, value, enabled):
    module = load_fresh(ddtree_utils, monkeypatch, SGLANG_DDTREE_TRITON=value)
    assert module.DDTREE_TRITON_ENV == "SGLANG_DDTREE_TRITON"
    assert module._DDTREE_TRITON_ENABLED is enabled


def test_module_imports_without_triton(ddtree_utils, monkeypatch):
    # A None entry in sys.modules makes ``import triton`` raise ImportError.
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    module = load_fresh(ddtree_utils, monkeypatch)
    assert module.triton is None
    monkeypatch.setattr(module, "_build_tree_triton", must_not_run)
    log_probs, token_ids = small_top(module)
    assert not module._use_triton_tree(log_probs, token_ids, 8)
    tree = module.build_ddtree_tree_from_topk(log_probs, token_ids, 8)
    assert_matches_heap(tree, log_probs, token_ids, 8)


# ---------------------------------------------------------------- CUDA


def random_case(ddtree_utils, rng: random.Random, gen: torch.Generator, regime: str, device):
    """One random batch: (log-probs, token ids, budget), log-probs fp32 or bf16."""
    bs = rng.choice((1, 2, 3, 8, 16, 33, 64))
    budget = rng.choice((1, 2, 3, 5, 8, 16, 31, 64, 100, 128, 255, 256, 384, 512))
    most = ddtree_utils._TRITON_TREE_MAX_DEPTH
    depth = rng.randint(1, 16) if rng.random() < 0.85 or most <= 16 else rng.randint(17, most)
    vocab = rng.choice((3, 7, 16, 50, 300, 1000))
    k = min(vocab, rng.choice((budget, budget + 7, max(1, budget // 3), 1)))
    logits = draft_logits(regime, (bs, depth, vocab), gen).to(device)
    log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, k)
    if rng.random() < 0.4:
        log_probs = log_probs.bfloat16()  # sorted still; many more ties
    if rng.random() < 0.3:
        token_ids = token_ids.int()
    return log_probs, token_ids, budget


@pytest.mark.gpu
@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("seed", [0, 1])
def test_triton_equals_torch_builder(ddtree_utils, cuda, regime, seed):
    rng = random.Random(seed * 100 + REGIMES.index(regime))
    gen = torch.Generator().manual_seed(seed * 100 + REGIMES.index(regime))
    for _ in range(40):
        log_probs, token_ids, budget = random_case(ddtree_utils, rng, gen, regime, cuda)
        assert ddtree_utils._use_triton_tree(log_probs, token_ids, budget)
        fast = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, budget)
        slow = ddtree_utils._build_tree_torch(log_probs, token_ids, budget)
        assert_same_tree(fast, slow)


@pytest.mark.gpu
def test_triton_equals_reference_heap(ddtree_utils, cuda):
    rng, gen = random.Random(7), torch.Generator().manual_seed(7)
    for regime in REGIMES:
        for _ in range(4):
            log_probs, token_ids, budget = random_case(ddtree_utils, rng, gen, regime, cuda)
            log_probs, token_ids = log_probs[:4], token_ids[:4]
            tree = ddtree_utils._build_tree_triton(log_probs, token_ids, budget)
            cpu = type(tree)(**{
                name: value.cpu() if torch.is_tensor(value) else value
                for name, value in vars(tree).items()
            })
            assert_matches_heap(cpu, log_probs.float().cpu(), token_ids.long().cpu(), budget)


@pytest.mark.gpu
def test_triton_saturated_and_infinite_log_probs(ddtree_utils, cuda):
    # Exactly 0.0 top log-probs tie along the whole top-1 chain; -inf tails (vocabulary
    # padding inside the top-k) sort last. Both paths sum scores, so they agree on -inf.
    log_probs = torch.tensor([[[0.0, -1.0, -1.0], [0.0, -1.0, -2.0], [0.0, 0.0, -1.0]]])
    token_ids = torch.tensor([[[5, 6, 7], [8, 9, 10], [11, 12, 13]]])
    for budget in range(1, 14):
        fast = ddtree_utils._build_tree_triton(log_probs.to(cuda), token_ids.to(cuda), budget)
        assert_same_tree(fast, ddtree_utils._build_tree_torch(log_probs.to(cuda), token_ids.to(cuda), budget))
    gen = torch.Generator().manual_seed(3)
    for vocab, k, budget in ((40, 16, 64), (9, 9, 200), (300, 64, 128)):
        logits = draft_logits("integer", (8, 6, vocab), gen).to(cuda)
        log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, k)
        log_probs[..., k // 2:] = float("-inf")
        log_probs[0, :, 1:] = float("-inf")
        fast = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, budget)
        assert_same_tree(fast, ddtree_utils._build_tree_torch(log_probs, token_ids, budget))


@pytest.mark.gpu
def test_triton_accepts_strided_and_fp64_inputs(ddtree_utils, cuda):
    logits = draft_logits("bf16", (6, 8, 200), torch.Generator().manual_seed(4)).to(cuda)
    log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, 96)
    views = (
        (log_probs[:, :, :40], token_ids[:, :, :40]),  # non-contiguous
        (log_probs[::2], token_ids[::2]),
        (log_probs.double(), token_ids),
        (log_probs.half(), token_ids.int()),
    )
    for lp, ids in views:
        for budget in (16, 64, 96):
            assert ddtree_utils._use_triton_tree(lp, ids, budget)
            fast = ddtree_utils.build_ddtree_tree_from_topk(lp, ids, budget)
            assert_same_tree(fast, ddtree_utils._build_tree_torch(lp, ids, budget))


@pytest.mark.gpu
def test_triton_path_is_selected_on_cuda(ddtree_utils, cuda, monkeypatch):
    log_probs, token_ids = small_top(ddtree_utils, cuda, k=8)
    expected = ddtree_utils._build_tree_torch(log_probs, token_ids, 8)
    monkeypatch.setattr(ddtree_utils, "_build_tree_torch", must_not_run)
    assert_same_tree(ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, 8), expected)


@pytest.mark.gpu
def test_off_switch_selects_torch_on_cuda(ddtree_utils, cuda, monkeypatch):
    module = load_fresh(ddtree_utils, monkeypatch, SGLANG_DDTREE_TRITON="0")
    monkeypatch.setattr(module, "_build_tree_triton", must_not_run)
    log_probs, token_ids = small_top(module, cuda, k=8)
    assert not module._use_triton_tree(log_probs, token_ids, 8)
    tree = module.build_ddtree_tree_from_topk(log_probs, token_ids, 8)
    assert_same_tree(tree, ddtree_utils._build_tree_triton(log_probs, token_ids, 8))


@pytest.mark.gpu
def test_unsupported_shapes_fall_back_to_torch(ddtree_utils, cuda, monkeypatch):
    gen = torch.Generator().manual_seed(5)
    cases = []
    for shape, budget in (((2, 3, 1100), 1022), ((2, ddtree_utils._TRITON_TREE_MAX_DEPTH + 2, 30), 64), ((2, 3, 9), 0)):
        logits = draft_logits("gaussian", shape, gen).to(cuda)
        cases.append((*ddtree_utils.ddtree_topk_from_logits(logits, min(max(budget, 1), shape[-1])), budget))
    monkeypatch.setattr(ddtree_utils, "_build_tree_triton", must_not_run)
    for log_probs, token_ids, budget in cases:
        assert not ddtree_utils._use_triton_tree(log_probs, token_ids, budget)
        tree = ddtree_utils.build_ddtree_tree_from_topk(log_probs, token_ids, budget)
        assert tree.parents.shape == (2, budget + 1) and tree.parents.is_cuda


@pytest.mark.gpu
def test_triton_builder_never_synchronises(ddtree_utils, cuda):
    logits = draft_logits("bf16", (16, 15, 4099), torch.Generator().manual_seed(6)).to(cuda)
    top = ddtree_utils.ddtree_topk_from_logits(logits, 128)
    for budget in (16, 128):
        ddtree_utils.build_ddtree_tree_from_topk(*top, budget)  # warm-up: compile
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for budget in (16, 128):
            assert ddtree_utils._use_triton_tree(*top, budget)
            ddtree_utils.build_ddtree_tree_from_topk(*top, budget)
    finally:
        torch.cuda.set_sync_debug_mode(previous)


@pytest.mark.gpu
@pytest.mark.parametrize("bs, budget", [(1, 16), (16, 128), (64, 512)])
def test_triton_builder_replays_from_cuda_graph(ddtree_utils, cuda, bs, budget):
    def top_of(seed):
        logits = draft_logits("bf16", (bs, 15, 1000), torch.Generator().manual_seed(seed)).to(cuda)
        return ddtree_utils.ddtree_topk_from_logits(logits, min(budget, 1000))

    static = tuple(t.clone() for t in top_of(0))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up off the capture
            ddtree_utils.build_ddtree_tree_from_topk(*static, budget)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ddtree_utils.build_ddtree_tree_from_topk(*static, budget)
    for seed in (1, 2, 3):
        fresh = top_of(seed)
        for target, source in zip(static, fresh):
            target.copy_(source)
        graph.replay()
        assert_same_tree(captured, ddtree_utils._build_tree_torch(*fresh, budget))


# ---------------------------------------------------------------- the kernel on CPU (TRITON_INTERPRET)


def test_kernel_under_triton_interpreter(ddtree_utils, monkeypatch):
    """The heap kernel's logic on a CPU: triton's interpreter runs it on CPU tensors (small cases)."""
    module = interpreted_copy(ddtree_utils, monkeypatch, triton_on_cpu=False)
    rng, gen = random.Random(11), torch.Generator().manual_seed(11)
    for case in range(8):
        regime = REGIMES[case % len(REGIMES)]
        budget = rng.choice((1, 3, 8, 17))
        vocab = rng.choice((3, 7, 50))
        logits = draft_logits(regime, (2, rng.randint(1, 8), vocab), gen)
        log_probs, token_ids = ddtree_utils.ddtree_topk_from_logits(logits, min(vocab, budget + 2))
        if case % 3 == 1:
            log_probs = log_probs.bfloat16()
        elif case % 3 == 2:
            log_probs = log_probs.double()  # rounded to fp32 before the launch, as the torch path does
        if case % 4 == 3:
            log_probs[..., 1:] = float("-inf")
        fast = module._build_tree_triton(log_probs, token_ids, budget)
        assert_same_tree(fast, ddtree_utils._build_tree_torch(log_probs, token_ids, budget))
