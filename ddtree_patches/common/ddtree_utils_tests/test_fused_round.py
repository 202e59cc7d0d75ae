"""The fused round: draft logits -> (top-K, trees, verify inputs), target -> (tokens, walk).

On CUDA ``ddtree_draft_round`` / ``ddtree_tree_round`` / ``ddtree_verify_inputs`` /
``ddtree_verify_round`` run the fused kernels; every output must equal the torch path's (the
same module imported with SGLANG_DDTREE_TRITON=0, run on the same CUDA tensors) bit for bit,
never synchronise with the host, and replay from a CUDA graph, the mask written into a
caller-owned buffer at offsets computed on the device while ``seq_lens`` changes between
replays. On any machine: the fused API composes the v1 building blocks, the mask buffer
contract holds on the torch path, bad arguments are refused with a clear message, and
triton's interpreter runs the verify-input, walk and sampling kernels on CPU tensors.
"""

from __future__ import annotations

import random

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

# the fused round of v2/v3 (0002): v1's module builds and verifies through separate calls
pytestmark = pytest.mark.needs("ddtree_tree_round", "ddtree_verify_inputs")


@pytest.fixture(scope="module")
def torch_path(ddtree_utils):
    """The module under test with every Triton path switched off (the oracle on CUDA)."""
    with pytest.MonkeyPatch.context() as patch:
        module = load_fresh(ddtree_utils, patch, SGLANG_DDTREE_TRITON="0")
        assert not module._DDTREE_TRITON_ENABLED
        yield module


def round_case(rng: random.Random, gen: torch.Generator, regime: str, device):
    bs = rng.choice((1, 2, 4, 16, 64))
    budget = rng.choice((1, 2, 5, 16, 31, 64, 128, 255, 512, 1021))
    depth = rng.randint(1, 16)
    vocab = rng.choice((3, 50, 1000, 32000)) if bs * budget < 8192 else rng.choice((50, 1000))
    logits = draft_logits_case(regime, (bs, depth, vocab), gen).to(device)
    seq_lens = torch.randint(0, 300, (bs,), generator=gen).to(device)
    return logits, budget, seq_lens


def deep_targets(tree, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Target tokens that mostly pick a drafted child, so walks go several levels deep."""
    parents = tree.parents.cpu()
    tokens = tree.node_token_ids.cpu()
    bs, n = parents.shape
    target = torch.randint(0, max(vocab, 1), (bs, n), generator=gen)
    for b in range(bs):
        for node in range(1, n):
            parent = int(parents[b, node])
            if parent >= 0 and torch.rand((), generator=gen) < 0.6:
                target[b, parent] = tokens[b, node - 1]
    return target.to(tree.parents.device)


# ---------------------------------------------------------------- CUDA


@pytest.mark.gpu
@pytest.mark.parametrize("regime", REGIMES)
def test_draft_round_equals_torch_path(ddtree_utils, torch_path, cuda, regime):
    rng = random.Random(REGIMES.index(regime))
    gen = torch.Generator().manual_seed(REGIMES.index(regime))
    for case in range(8):
        logits, budget, seq_lens = round_case(rng, gen, regime, cuda)
        total = int(seq_lens.sum())
        where = f"{regime} case {case}: shape={tuple(logits.shape)} B={budget}"
        fast = ddtree_utils.ddtree_draft_round(logits, budget, seq_lens, seq_lens_sum=total)
        slow = torch_path.ddtree_draft_round(logits, budget, seq_lens, seq_lens_sum=total)
        assert_same(fast, slow, where)
        target = deep_targets(fast.tree, logits.shape[-1], gen)
        assert_same(
            ddtree_utils.ddtree_verify_round(fast.tree, target_tokens=target),
            torch_path.ddtree_verify_round(slow.tree, target_tokens=target),
            where + " walk",
        )


@pytest.mark.gpu
def test_tree_round_after_a_sharded_merge_equals_torch_path(ddtree_utils, torch_path, cuda):
    gen = torch.Generator().manual_seed(9)
    logits = draft_logits_case("bf16", (8, 15, 151936), gen).to(cuda)
    seq_lens = torch.randint(1, 2000, (8,), generator=gen).to(cuda)
    width = 151936 // 4
    stats = [ddtree_utils.ddtree_local_topk(logits[..., s * width:(s + 1) * width], 64, vocab_start=s * width)
             for s in range(4)]
    top = ddtree_utils.ddtree_merge_topk(*[torch.stack(p) for p in zip(*stats, strict=True)], k=64)
    fast = ddtree_utils.ddtree_tree_round(*top, 64, seq_lens, seq_lens_sum=int(seq_lens.sum()))
    slow = torch_path.ddtree_tree_round(*top, 64, seq_lens, seq_lens_sum=int(seq_lens.sum()))
    assert_same(fast, slow)
    assert_same(top, torch_path.ddtree_topk_from_logits(logits, 64))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_verify_round_from_logits_equals_torch_path(ddtree_utils, torch_path, cuda, dtype):
    gen = torch.Generator().manual_seed(3)
    for bs, budget, vocab in ((1, 16, 151936), (4, 64, 5000), (16, 8, 300), (3, 200, 64)):
        logits = draft_logits_case("bf16", (bs, 7, 1000), gen).to(cuda)
        tree = ddtree_utils.build_ddtree_tree_from_topk(*ddtree_utils.ddtree_topk_from_logits(logits, budget), budget)
        target_logits = (torch.randn(bs, budget + 1, vocab, generator=gen) * 3).to(dtype).to(cuda)
        # Plant drafted tokens as the target's favourites so walks are long.
        planted = deep_targets(tree, vocab, gen).clamp(max=vocab - 1)
        target_logits.scatter_(2, planted.unsqueeze(-1), 50.0)
        temperatures = torch.tensor([0.0, 0.6, 1.0, 1e-6] * bs, device=cuda)[:bs]
        seed = torch.tensor([1234 + bs], device=cuda)
        for temps in (None, temperatures):
            fast = ddtree_utils.ddtree_verify_round(tree, target_logits, temperatures=temps, seed=seed)
            slow = torch_path.ddtree_verify_round(tree, target_logits, temperatures=temps, seed=seed)
            assert_same(fast, slow, f"bs={bs} B={budget} V={vocab} T={temps}")
            flat = ddtree_utils.ddtree_verify_round(tree, target_logits.view(-1, vocab), temperatures=temps, seed=seed)
            assert_same(flat, fast)
        if bs > 1:
            assert bool((fast.accept_length > 0).any())


@pytest.mark.gpu
def test_triton_sampling_equals_torch_and_varies_with_the_seed(ddtree_utils, torch_path, cuda):
    gen = torch.Generator().manual_seed(4)
    logits = (torch.randn(5, 9, 151936, generator=gen) * 2).bfloat16().to(cuda)
    temperatures = torch.tensor([0.0, 0.5, 1.0, 2.0, 1e-5], device=cuda)
    draws = []
    for seed in (1, 2):
        seed = torch.tensor([seed], device=cuda)
        fast = ddtree_utils.ddtree_sample_target_tokens(logits, temperatures, seed=seed)
        assert_same(fast, torch_path.ddtree_sample_target_tokens(logits, temperatures, seed=seed))
        draws.append(fast)
    greedy = logits.float().argmax(-1)
    for row in (0, 4):  # T = 0 and T <= 1e-5 are greedy
        assert torch.equal(draws[0][row], greedy[row]) and torch.equal(draws[1][row], greedy[row])
    assert not torch.equal(draws[0][1:4], draws[1][1:4])


@pytest.mark.gpu
def test_triton_sampling_follows_tempered_softmax(ddtree_utils, cuda):
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -30.0], device=cuda).expand(2000, 8, 5).contiguous()
    for temperature in (0.5, 1.0, 2.0):
        tokens = ddtree_utils.ddtree_sample_target_tokens(
            logits, torch.full((2000,), temperature, device=cuda), generator=torch.Generator(cuda).manual_seed(7)
        )
        counts = torch.bincount(tokens.flatten().cpu(), minlength=5).double()
        expected = torch.softmax(logits[0, 0].double().cpu() / temperature, -1) * tokens.numel()
        keep = expected > 5
        chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
        dof = int(keep.sum()) - 1
        p_value = float(torch.special.gammaincc(torch.tensor(dof / 2), torch.tensor(chi2 / 2)))
        assert p_value > 1e-4, (temperature, counts.tolist(), expected.tolist())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8])
def test_mask_is_written_into_a_caller_buffer_at_device_offsets(ddtree_utils, torch_path, cuda, dtype):
    gen = torch.Generator().manual_seed(6)
    logits = draft_logits_case("integer", (5, 6, 40), gen).to(cuda)
    seq_lens = torch.tensor([3, 0, 17, 1, 9], device=cuda)
    expected = torch_path.ddtree_draft_round(logits, 24, seq_lens, seq_lens_sum=30).verify.custom_mask
    size = expected.numel()
    backing = torch.full((size + 300,), 1, dtype=torch.uint8, device=cuda)
    backing[size:] = 7  # must stay 7 past the mask
    buffer = backing[: size + 100].view(dtype)
    out = ddtree_utils.ddtree_draft_round(logits, 24, seq_lens, mask_out=buffer).verify.custom_mask
    assert out.dtype == torch.bool and out.data_ptr() == buffer.data_ptr() and out.numel() == size + 100
    assert_same(out[:size], expected)
    assert bool((backing[size:] == 7).all())
    # Too small: a truncated mask, and nothing written past the buffer.
    backing[:] = 7
    small = backing[: size // 2].view(dtype)
    ddtree_utils.ddtree_draft_round(logits, 24, seq_lens, mask_out=small)
    assert_same(small.view(torch.bool), expected[: size // 2])
    assert bool((backing[size // 2:] == 7).all())
    assert torch.equal(
        ddtree_utils.ddtree_mask_offsets(seq_lens, 25),
        torch.tensor([0, 25 * 28, 25 * 53, 25 * 95, 25 * 121, 25 * 155], device=cuda),
    )


@pytest.mark.gpu
def test_whole_round_replays_from_a_cuda_graph_as_seq_lens_change(ddtree_utils, torch_path, cuda):
    """Captured once; every replay sees new draft logits and seq_lens (a new total), and draws
    a new sampling seed (the target logits stay, so only the seed can change the samples)."""
    bs, depth, vocab, budget = 4, 15, 32000, 64
    n = budget + 1
    gen = torch.Generator().manual_seed(8)
    static_logits = draft_logits_case("bf16", (bs, depth, vocab), gen).to(cuda)
    static_seq = torch.randint(0, 500, (bs,), generator=gen).to(cuda)
    static_target = torch.randn(bs, n, vocab, generator=gen).bfloat16().to(cuda)
    temperatures = torch.tensor([0.0, 0.7, 1.0, 0.0], device=cuda)
    mask = torch.zeros(ddtree_utils.ddtree_mask_size(bs * 600, bs, n), dtype=torch.bool, device=cuda)

    def one_round():
        draft = ddtree_utils.ddtree_draft_round(static_logits, budget, static_seq, mask_out=mask)
        # The default CUDA generator: a captured graph advances it on every replay.
        accept = ddtree_utils.ddtree_verify_round(draft.tree, static_target, temperatures=temperatures)
        return draft, accept

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            one_round()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        draft, accept = one_round()
    seeds = set()
    for _ in range(3):
        static_logits.copy_(draft_logits_case("bf16", (bs, depth, vocab), gen).to(cuda))
        static_seq.copy_(torch.randint(0, 600, (bs,), generator=gen).to(cuda))
        graph.replay()
        total = int(static_seq.sum())
        expected = torch_path.ddtree_draft_round(static_logits, budget, static_seq, seq_lens_sum=total)
        assert_same(draft.tree, expected.tree)
        assert_same(draft.verify.positions, expected.verify.positions)
        assert_same(draft.verify.custom_mask[: expected.verify.custom_mask.numel()], expected.verify.custom_mask)
        greedy = torch_path.ddtree_verify_round(expected.tree, static_target)
        for row in (0, 3):  # the greedy rows do not depend on the seed
            assert torch.equal(accept.target_tokens[row], greedy.target_tokens[row])
            assert torch.equal(accept.accept_index[row], greedy.accept_index[row])
        seeds.add(tuple(accept.target_tokens[1].tolist()))
    assert len(seeds) == 3, "each replay must draw a fresh sampling seed"


@pytest.mark.gpu
def test_fused_round_never_synchronises(ddtree_utils, cuda):
    gen = torch.Generator().manual_seed(10)
    logits = draft_logits_case("bf16", (16, 15, 32000), gen).to(cuda)
    seq_lens = torch.randint(0, 300, (16,), generator=gen).to(cuda)
    total = int(seq_lens.sum())
    mask = torch.empty(ddtree_utils.ddtree_mask_size(16 * 300, 16, 129), dtype=torch.bool, device=cuda)
    target = torch.randn(16, 129, 32000, generator=gen).to(cuda)
    temperatures = torch.rand(16, generator=gen).to(cuda)
    cuda_gen = torch.Generator(cuda).manual_seed(1)

    def calls():
        draft = ddtree_utils.ddtree_draft_round(logits, 128, seq_lens, mask_out=mask)
        ddtree_utils.ddtree_draft_round(logits, 128, seq_lens, seq_lens_sum=total)
        ddtree_utils.ddtree_verify_round(draft.tree, target)
        ddtree_utils.ddtree_verify_round(draft.tree, target, temperatures=temperatures, generator=cuda_gen)
        ddtree_utils.ddtree_verify_round(draft.tree, target_tokens=target.argmax(-1))
        ddtree_utils.ddtree_retrieve_tensors(draft.tree)
        ddtree_utils.ddtree_custom_mask(draft.tree, seq_lens, out=mask)

    calls()  # warm-up: compile
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        calls()
    finally:
        torch.cuda.set_sync_debug_mode(previous)


@pytest.mark.gpu
def test_fused_paths_are_selected_on_cuda(ddtree_utils, cuda, monkeypatch):
    gen = torch.Generator().manual_seed(11)
    logits = draft_logits_case("bf16", (3, 5, 700), gen).to(cuda)
    seq_lens = torch.tensor([4, 5, 6], device=cuda)
    target = torch.randn(3, 33, 700, generator=gen).to(cuda)
    for name in ("_topk_from_logits_torch", "_build_tree_torch", "_positions_torch", "_custom_mask_torch",
                 "_retrieve_tensors_torch", "_follow_verified_torch", "_sample_target_tokens_torch"):
        monkeypatch.setattr(ddtree_utils, name, must_not_run)
    draft = ddtree_utils.ddtree_draft_round(logits, 32, seq_lens, seq_lens_sum=15)
    ddtree_utils.ddtree_verify_round(draft.tree, target, temperatures=torch.ones(3, device=cuda))
    ddtree_utils.ddtree_verify_round(draft.tree, target_tokens=target.argmax(-1))
    ddtree_utils.ddtree_sample_target_tokens(target, torch.ones(3, device=cuda))
    ddtree_utils.ddtree_retrieve_tensors(draft.tree)


@pytest.mark.gpu
def test_off_switch_selects_torch_for_every_stage_on_cuda(torch_path, cuda, monkeypatch):
    for name in ("_topk_triton", "_merge_triton", "_build_tree_triton", "_verify_inputs_triton",
                 "_walk_launch", "_sample_triton", "_argmax_partials"):
        monkeypatch.setattr(torch_path, name, must_not_run)
    gen = torch.Generator().manual_seed(12)
    logits = draft_logits_case("bf16", (2, 4, 300), gen).to(cuda)
    draft = torch_path.ddtree_draft_round(logits, 16, torch.tensor([1, 2], device=cuda), seq_lens_sum=3)
    torch_path.ddtree_verify_round(draft.tree, torch.randn(2, 17, 300, device=cuda), temperatures=torch.ones(2, device=cuda))
    stats = torch_path.ddtree_local_topk(logits, 16)
    torch_path.ddtree_merge_topk(*[t.unsqueeze(0) for t in stats], k=16)


# ---------------------------------------------------------------- any machine


def test_fused_round_composes_the_building_blocks_on_cpu(ddtree_utils):
    gen = torch.Generator().manual_seed(0)
    logits = draft_logits_case("integer", (3, 5, 20), gen)
    seq_lens = torch.tensor([2, 0, 7])
    draft = ddtree_utils.ddtree_draft_round(logits, 12, seq_lens, seq_lens_sum=9)
    top = ddtree_utils.ddtree_topk_from_logits(logits, 12)
    tree = ddtree_utils.build_ddtree_tree_from_topk(*top, 12)
    assert_same((draft.top_log_probs, draft.top_token_ids), top)
    assert_same(draft.tree, tree)
    assert_same(draft.verify.positions, ddtree_utils.ddtree_positions(tree, seq_lens))
    assert_same(draft.verify.custom_mask, ddtree_utils.ddtree_custom_mask(tree, seq_lens, 9))
    assert_same(
        (draft.verify.retrieve_index, draft.verify.retrieve_next_token, draft.verify.retrieve_next_sibling),
        ddtree_utils.ddtree_retrieve_tensors(tree),
    )
    assert ddtree_utils.ddtree_draft_round(logits, 12, seq_lens, with_mask=False).verify.custom_mask is None
    target = deep_targets(tree, 20, gen)
    accept = ddtree_utils.ddtree_verify_round(tree, target_tokens=target)
    assert_same((accept.accept_index, accept.accept_length, accept.bonus_tokens),
                ddtree_utils.ddtree_follow_verified(tree, target))
    target_logits = torch.nn.functional.one_hot(target, 20).float() * 5
    greedy = ddtree_utils.ddtree_verify_round(tree, target_logits)
    assert_same(greedy, accept)


def test_mask_buffer_contract_on_the_torch_path(ddtree_utils):
    gen = torch.Generator().manual_seed(1)
    logits = draft_logits_case("integer", (4, 3, 9), gen)
    seq_lens = torch.tensor([5, 0, 2, 11])
    tree = ddtree_utils.build_ddtree_tree_from_topk(*ddtree_utils.ddtree_topk_from_logits(logits, 9), 14)
    expected = ddtree_utils.ddtree_custom_mask(tree, seq_lens, 18)
    size = expected.numel()
    assert size == ddtree_utils.ddtree_mask_size(18, 4, 15)
    for dtype in (torch.bool, torch.uint8, torch.int8):
        buffer = torch.full((size + 50,), 1, dtype=dtype)
        out = ddtree_utils.ddtree_custom_mask(tree, seq_lens, out=buffer)
        assert out.dtype == torch.bool and out.data_ptr() == buffer.data_ptr()
        assert_same(out[:size], expected)
        assert bool(out[size:].all())  # untouched (all ones)
    offsets = ddtree_utils.ddtree_mask_offsets(seq_lens, 15)
    assert offsets.tolist() == [0, 15 * 20, 15 * 35, 15 * 52, 15 * 78] and offsets[-1] == size


def test_bad_arguments_are_refused_with_a_message(ddtree_utils):
    logits = torch.randn(2, 3, 10)
    seq_lens = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="seq_lens_sum"):
        ddtree_utils.ddtree_draft_round(logits, 8, seq_lens)
    tree = ddtree_utils.ddtree_draft_round(logits, 8, seq_lens, with_mask=False).tree
    with pytest.raises(ValueError, match="seq_lens_sum"):
        ddtree_utils.ddtree_verify_inputs(tree, seq_lens)
    with pytest.raises(ValueError, match="bool, uint8 or int8"):
        ddtree_utils.ddtree_custom_mask(tree, seq_lens, out=torch.zeros(500, dtype=torch.float32))
    with pytest.raises(ValueError, match="contiguous 1-D"):
        ddtree_utils.ddtree_custom_mask(tree, seq_lens, out=torch.zeros(10, 50, dtype=torch.bool))
    with pytest.raises(ValueError, match="exactly one"):
        ddtree_utils.ddtree_verify_round(tree)
    with pytest.raises(ValueError, match="exactly one"):
        ddtree_utils.ddtree_verify_round(tree, torch.randn(2, 9, 10), target_tokens=torch.zeros(2, 9, dtype=torch.long))


def test_sampling_seed_decides_the_samples(ddtree_utils):
    logits = torch.randn(3, 6, 50, generator=torch.Generator().manual_seed(2))
    temps = torch.tensor([0.0, 1.0, 3.0])
    a = ddtree_utils.ddtree_sample_target_tokens(logits, temps, seed=torch.tensor([5]))
    b = ddtree_utils.ddtree_sample_target_tokens(logits, temps, seed=torch.tensor([5]))
    c = ddtree_utils.ddtree_sample_target_tokens(logits, temps, seed=torch.tensor([6]))
    assert torch.equal(a, b) and not torch.equal(a[1:], c[1:])
    assert torch.equal(a[0], logits[0].argmax(-1)) and torch.equal(c[0], a[0])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(ddtree_utils.ddtree_sample_target_tokens(logits, temps, g1),
                       ddtree_utils.ddtree_sample_target_tokens(logits, temps, g2))


def test_chunked_torch_sampler_equals_one_chunk(ddtree_utils, monkeypatch):
    logits = torch.randn(2, 7, 33, generator=torch.Generator().manual_seed(4))
    temps, seed = torch.tensor([0.9, 1.7]), torch.tensor([77])
    whole = ddtree_utils.ddtree_sample_target_tokens(logits, temps, seed=seed)
    monkeypatch.setattr(ddtree_utils, "_SAMPLE_CHUNK_ELEMENTS", 40)  # one row per chunk
    assert torch.equal(ddtree_utils.ddtree_sample_target_tokens(logits, temps, seed=seed), whole)


def test_sampling_kernel_limits(ddtree_utils):
    supported = ddtree_utils._sample_supported
    x = torch.zeros(2, 3, 50)
    assert supported(x, None) and supported(x, torch.ones(2))
    assert supported(x.bfloat16(), None) and supported(x.half(), torch.ones(2))
    assert not supported(x.double(), None)  # fp64 logits keep the torch path
    assert not supported(x[0], None)  # needs [bs, N, V]
    assert not supported(x[:0], None) and not supported(torch.zeros(2, 3, 0), None)
    assert not supported(x, torch.ones(3))  # one temperature per request


def test_cpu_inputs_never_reach_the_round_kernels(ddtree_utils, monkeypatch):
    monkeypatch.setattr(ddtree_utils, "_DDTREE_TRITON_ENABLED", True)
    for name in ("_topk_triton", "_build_tree_triton", "_verify_inputs_triton", "_walk_launch",
                 "_sample_triton", "_argmax_partials"):
        monkeypatch.setattr(ddtree_utils, name, must_not_run)
    logits = torch.randn(2, 3, 40)
    draft = ddtree_utils.ddtree_draft_round(logits, 8, torch.tensor([1, 2]), seq_lens_sum=3)
    ddtree_utils.ddtree_verify_round(draft.tree, torch.randn(2, 9, 40), temperatures=torch.ones(2))


def test_round_kernels_under_triton_interpreter(ddtree_utils, monkeypatch):
    """Verify inputs (mask into a buffer, truncation), walk, arg-max / Gumbel partials on a CPU, launched
    by the public functions as on CUDA (the Triton paths taken for CPU tensors), against the torch path."""
    module = interpreted_copy(ddtree_utils, monkeypatch)
    monkeypatch.setattr(module, "_SAMPLE_TILE", 8)  # a vocabulary of 30 splits into parts, one of 5 does not
    rng, gen = random.Random(3), torch.Generator().manual_seed(3)
    for case in range(6):
        regime = REGIMES[case % len(REGIMES)]
        bs, budget, vocab = rng.choice((1, 3)), rng.choice((1, 6, 20, 40)), rng.choice((5, 30))
        logits = draft_logits_case(regime, (bs, rng.randint(1, 5), vocab), gen)
        tree = ddtree_utils._build_tree_torch(*ddtree_utils._topk_from_logits_torch(logits, vocab), budget)
        seq_lens = torch.randint(0, 40, (bs,), generator=gen)
        n, total = budget + 1, int(seq_lens.sum())
        size = ddtree_utils.ddtree_mask_size(total, bs, n)
        expected_mask = ddtree_utils._custom_mask_torch(tree, seq_lens, total, None)
        assert module._use_triton_verify_inputs(tree, seq_lens)
        # A buffer bigger than the mask: the tail stays; a smaller one: truncated, no write past it.
        backing = torch.full((size + 64,), 7, dtype=torch.int8)
        fast = module.ddtree_verify_inputs(tree, seq_lens, mask_out=backing[: size + 32])
        assert_same(fast.custom_mask[:size], expected_mask)
        assert bool((backing[size:] == 7).all())
        backing[:] = 7
        module.ddtree_custom_mask(tree, seq_lens, out=backing[: size // 3])
        assert_same(backing[: size // 3].view(torch.bool), expected_mask[: size // 3])
        assert bool((backing[size // 3:] == 7).all())
        assert_same(fast.positions, ddtree_utils._positions_torch(tree, seq_lens))
        retrieve = ddtree_utils._retrieve_tensors_torch(tree)
        assert_same((fast.retrieve_index, fast.retrieve_next_token, fast.retrieve_next_sibling), retrieve)
        assert_same(module.ddtree_retrieve_tensors(tree), retrieve)
        assert module.ddtree_verify_inputs(tree, seq_lens, with_mask=False).custom_mask is None
        target = torch.randint(0, vocab, (bs, n), generator=gen)
        for b in range(bs):  # deep walks: the target picks a drafted child
            for node in range(1, n):
                parent = int(tree.parents[b, node])
                if parent >= 0 and rng.random() < 0.7:
                    target[b, parent] = tree.node_token_ids[b, node - 1]
        assert_same(module.ddtree_follow_verified(tree, target), ddtree_utils._follow_verified_torch(tree, target))
        target_logits = torch.nn.functional.one_hot(target, vocab).float() * 4 + torch.randn(bs, n, vocab, generator=gen)
        temps = torch.tensor([0.0, 0.8, 2.0])[:bs]
        seed = torch.tensor([11 + case])
        sampled = ddtree_utils._sample_target_tokens_torch(target_logits, temps, seed)
        assert_same(module.ddtree_sample_target_tokens(target_logits, temps, seed=seed), sampled)
        strided = target_logits.transpose(1, 2).contiguous().transpose(1, 2)  # the vocabulary's stride != 1
        assert_same(module.ddtree_sample_target_tokens(strided, temps, seed=seed), sampled)
        accept = module.ddtree_verify_round(tree, target_logits, temperatures=temps, seed=seed)
        assert_same(accept.target_tokens, sampled)
        assert_same((accept.accept_index, accept.accept_length, accept.bonus_tokens),
                    ddtree_utils._follow_verified_torch(tree, sampled))
        greedy = torch.empty(bs, n, dtype=torch.int64)
        module._walk_launch(tree, greedy, module._argmax_partials(target_logits, None, None))
        assert_same(greedy, target_logits.argmax(-1))


def test_draft_round_under_triton_interpreter(ddtree_utils, monkeypatch):
    """The whole draft round on a CPU through the kernels (top-K, tree, verify inputs), as on CUDA."""
    module = interpreted_copy(ddtree_utils, monkeypatch)
    gen = torch.Generator().manual_seed(8)
    for regime, (bs, depth, vocab, budget) in (("integer", (2, 3, 40, 9)),):
        logits = draft_logits_case(regime, (bs, depth, vocab), gen)
        seq_lens = torch.randint(1, 30, (bs,), generator=gen)
        assert module._use_triton_topk(logits, budget)
        got = module.ddtree_draft_round(logits, budget, seq_lens, seq_lens_sum=int(seq_lens.sum()))
        assert_same(got, ddtree_utils.ddtree_draft_round(logits, budget, seq_lens, seq_lens_sum=int(seq_lens.sum())),
                    regime)
