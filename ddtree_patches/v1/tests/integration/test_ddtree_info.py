"""CPU tests for DDTreeVerifyInput: slot accounting, KV keep along the accepted
path, req_to_token rewrite, hidden-state gather and per-node target sampling.

Needs an importable sglang tree (python/ on sys.path) with its CPU
dependencies. The Triton kernel that writes req_to_token is replaced by an
equivalent torch loop, since Triton kernels cannot launch on the CPU.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

ddtree_info = pytest.importorskip("sglang.srt.speculative.ddtree_info")
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.speculative.ddtree_utils import (  # noqa: E402
    build_ddtree_tree_from_topk,
    ddtree_topk_from_logits,
)

DDTreeVerifyInput = ddtree_info.DDTreeVerifyInput
compute_ddtree_commit_slots = ddtree_info.compute_ddtree_commit_slots


def _assign_req_to_token_torch(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, bs
):
    """Reference of spec_utils.assign_req_to_token_pool (a Triton kernel)."""
    offset = 0
    for i in range(bs):
        start, end = int(start_offset[i]), int(end_offset[i])
        length = end - start
        req_to_token[int(req_pool_indices[i]), start:end] = out_cache_loc[
            offset : offset + length
        ].to(req_to_token.dtype)
        offset += length


@pytest.fixture(autouse=True)
def _torch_req_to_token(monkeypatch):
    monkeypatch.setattr(
        ddtree_info, "assign_req_to_token_pool_func", _assign_req_to_token_torch
    )


class _FakeReq:
    """The Req fields DDTree verify reads and writes."""

    def __init__(self, max_new_tokens: int):
        self.output_ids = [7]
        self.origin_input_ids = [1, 2, 3]
        self.max_new_tokens = max_new_tokens
        self.grammar = None
        self.spec_verify_ct = 0
        self.spec_num_correct_drafts = 0
        self.kv_committed_len = 0
        self.kv_allocated_len = 0
        self._finished = False

    def check_finished(self):
        if len(self.output_ids) >= self.max_new_tokens:
            self._finished = True

    def finished(self):
        return self._finished


class _ChunkCache:
    def __init__(self, allocator):
        self.token_to_kv_pool_allocator = allocator

    def is_chunk_cache(self):
        return True


def _random_tree(bs, num_depths, vocab, budget, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(bs, num_depths, vocab, generator=gen) * 3
    log_probs, ids = ddtree_topk_from_logits(logits, min(budget, vocab))
    return build_ddtree_tree_from_topk(log_probs, ids, budget)


def _reference_walk(tree, target_tokens, b):
    """The reference follow_verified_tree on one request, with child maps."""
    parents = tree.parents[b].tolist()
    tokens = [None] + tree.node_token_ids[b].tolist()
    child_maps = [dict() for _ in parents]
    for node in range(1, len(parents)):
        if parents[node] >= 0:
            child_maps[parents[node]][tokens[node]] = node
    path, cur = [0], 0
    nxt = int(target_tokens[b, 0])
    while nxt in child_maps[cur]:
        cur = child_maps[cur][nxt]
        path.append(cur)
        nxt = int(target_tokens[b, cur])
    return path, nxt


def _make_batch(bs, seq_lens, allocator, max_new_tokens):
    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int64)
    req_to_token = torch.zeros((bs + 2, 512), dtype=torch.int32)
    req_pool_indices = torch.arange(1, bs + 1, dtype=torch.int64)
    # Prefix slots are already allocated and mapped.
    for i, n in enumerate(seq_lens):
        req_to_token[i + 1, :n] = allocator.alloc(n).to(torch.int32)
    return SimpleNamespace(
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        batch_size=lambda: bs,
        reqs=[_FakeReq(m) for m in max_new_tokens],
        sampling_info=None,
        tree_cache=_ChunkCache(allocator),
        token_to_kv_pool_allocator=allocator,
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens_t.clone(),
        seq_lens_cpu=seq_lens_t.clone(),
        seq_lens_sum=int(sum(seq_lens)),
        device="cpu",
        input_ids=None,
        out_cache_loc=None,
    )


def _greedy_logits_for(target_tokens, vocab):
    """Logits whose argmax at every node is the given target token."""
    flat = target_tokens.reshape(-1)
    logits = torch.randn(flat.numel(), vocab)
    logits[torch.arange(flat.numel()), flat] = 100.0
    return logits


@pytest.mark.parametrize("seed", range(6))
def test_verify_keeps_accepted_path(seed):
    rng = random.Random(seed)
    bs, num_depths, vocab, budget = 3, 5, 6, 12
    n = budget + 1
    tree = _random_tree(bs, num_depths, vocab, budget, seed)
    seq_lens = [rng.randint(1, 9) for _ in range(bs)]
    allocator = TokenToKVPoolAllocator(
        size=4096, dtype=torch.int64, device="cpu", kvcache=None, need_sort=False
    )
    # The last request finishes after its first committed token.
    batch = _make_batch(bs, seq_lens, allocator, max_new_tokens=[1000, 1000, 2])
    root_tokens = torch.tensor([rng.randrange(vocab) for _ in range(bs)])

    verify_input = DDTreeVerifyInput.from_tree(
        tree=tree, root_tokens=root_tokens, seq_lens=batch.seq_lens
    )
    free_before = allocator.available_size()
    verify_input.prepare_for_verify(batch, page_size=1)
    assert allocator.available_size() == free_before - bs * n
    out_cache_loc = batch.out_cache_loc.clone()
    assert verify_input.custom_mask.numel() == n * sum(seq_lens) + bs * n * n

    # Steer the target along a drafted path most of the time.
    target = torch.tensor([[rng.randrange(vocab) for _ in range(n)] for _ in range(bs)])
    for b in range(bs):
        for node in range(1, n):
            parent = int(tree.parents[b, node])
            if parent >= 0 and rng.random() < 0.7:
                target[b, parent] = tree.node_token_ids[b, node - 1]
    hidden = torch.arange(bs * n, dtype=torch.float32).unsqueeze(1).repeat(1, 4)
    logits_output = SimpleNamespace(
        next_token_logits=_greedy_logits_for(target, vocab), hidden_states=hidden
    )
    old_seq_lens = list(seq_lens)
    new_bonus, commit_lens, next_hidden, num_correct = verify_input.verify(
        batch=batch, logits_output=logits_output, page_size=1
    )

    kept_slots = []
    for b in range(bs):
        path, bonus = _reference_walk(tree, target, b)
        req = batch.reqs[b]
        proposed = [int(verify_input.draft_token.view(bs, n)[b, i]) for i in path[1:]]
        proposed.append(bonus)
        expected_commit = len(proposed) if b < 2 else 1
        assert req.output_ids == [7] + proposed[:expected_commit]
        assert int(commit_lens[b]) == expected_commit
        assert num_correct[b] == expected_commit - 1
        assert int(new_bonus[b]) == req.output_ids[-1]
        committed_nodes = path[:expected_commit]
        slots = [int(out_cache_loc[b * n + i]) for i in committed_nodes]
        kept_slots += slots
        # req_to_token now maps the committed positions to the accepted nodes.
        start = old_seq_lens[b]
        mapped = batch.req_to_token_pool.req_to_token[b + 1, start : start + len(slots)]
        assert mapped.tolist() == slots
        assert int(batch.seq_lens[b]) == start + expected_commit
        assert req.kv_committed_len == expected_commit

    assert batch.out_cache_loc.tolist() == kept_slots
    assert next_hidden[:, 0].tolist() == [
        float(b * n + i)
        for b in range(bs)
        for i in _reference_walk(tree, target, b)[0][: int(commit_lens[b])]
    ]
    # Every other verify slot went back to the allocator, exactly once.
    assert allocator.available_size() == free_before - len(kept_slots)
    free_pages = allocator.free_pages.tolist()
    assert len(free_pages) == len(set(free_pages))
    assert not set(kept_slots) & set(free_pages)
    assert batch.seq_lens_sum == sum(old_seq_lens) + len(kept_slots)
    assert batch.seq_lens_cpu.tolist() == batch.seq_lens.tolist()


def test_commit_slots_order_and_complement():
    accept_index = torch.tensor([[0, 2, 5, -1], [0, -1, -1, -1], [0, 1, 3, 4]])
    commit_lens = torch.tensor([3, 1, 2])
    kept, freed = compute_ddtree_commit_slots(
        accept_index=accept_index,
        commit_lens=commit_lens,
        draft_token_num=6,
        num_kept=6,
    )
    assert kept.tolist() == [0, 2, 5, 6, 12, 13]
    assert sorted(kept.tolist() + freed.tolist()) == list(range(18))
    assert freed.tolist() == sorted(freed.tolist())


def test_prepare_for_verify_rejects_paged_kv():
    with pytest.raises(ValueError, match="page_size == 1"):
        ddtree_info.check_ddtree_page_size(16)


def _sampling_info(temperatures, top_ks, top_ps, min_ps=None):
    bs = len(temperatures)
    min_ps = min_ps or [0.0] * bs
    return SimpleNamespace(
        is_all_greedy=all(k <= 1 for k in top_ks),
        temperatures=torch.tensor(temperatures).view(-1, 1),
        top_ks=torch.tensor(top_ks, dtype=torch.int32),
        top_ps=torch.tensor(top_ps),
        min_ps=torch.tensor(min_ps),
        need_top_p_sampling=any(p != 1.0 for p in top_ps),
        need_top_k_sampling=any(k != 1 << 30 for k in top_ks),
        need_min_p_sampling=any(p > 0 for p in min_ps),
        sampling_seed=None,
    )


def test_per_node_sampling_honours_request_params():
    torch.manual_seed(0)
    bs, n, vocab = 2, 5, 50
    logits = torch.randn(bs * n, vocab)
    # Request 0 is greedy inside a sampled batch (top_k=1); request 1 may only
    # pick among its per-node top-3.
    info = _sampling_info([1.0, 0.7], [1, 3], [1.0, 1.0])
    for _ in range(20):
        tokens = ddtree_info.sample_ddtree_target_tokens(
            logits=logits.clone(), sampling_info=info, positions=None, draft_token_num=n
        ).view(bs, n)
        assert tokens[0].tolist() == logits[:n].argmax(-1).tolist()
        top3 = logits[n:].topk(3, dim=-1).indices
        assert all(int(tokens[1, i]) in top3[i].tolist() for i in range(n))


def test_per_node_sampling_matches_distribution():
    torch.manual_seed(1)
    n, vocab, draws = 3, 4, 6000
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * n)
    info = _sampling_info([0.5], [1 << 30], [1.0])
    counts = torch.zeros(n, vocab)
    for _ in range(draws // 100):
        batch_logits = logits.repeat(100, 1)
        info_rep = _sampling_info([0.5] * 100, [1 << 30] * 100, [1.0] * 100)
        tokens = ddtree_info.sample_ddtree_target_tokens(
            logits=batch_logits,
            sampling_info=info_rep,
            positions=None,
            draft_token_num=n,
        ).view(100, n)
        for i in range(n):
            counts[i] += torch.bincount(tokens[:, i], minlength=vocab)
    expected = torch.softmax(logits[0] / 0.5, dim=-1)
    for i in range(n):
        freq = counts[i] / counts[i].sum()
        assert torch.allclose(freq, expected, atol=0.03), (freq, expected)
    del info


def test_path_steps_map_to_tree_nodes():
    # Hybrid targets cache one recurrent state per verify node: the state
    # after path step j lives at node accept_index[b, j], not at entry j.
    accept_index = torch.tensor([[0, 3, 7, -1], [0, -1, -1, -1], [0, 1, 2, 9]])
    last_step = torch.tensor([2, 0, 3])
    assert ddtree_info.ddtree_path_steps_to_nodes(accept_index, last_step).tolist() == [
        7,
        0,
        9,
    ]
    tracked = torch.tensor([1, -1, 2])
    assert ddtree_info.ddtree_path_steps_to_nodes(accept_index, tracked).tolist() == [
        3,
        -1,
        2,
    ]


def test_verify_records_accept_index_for_state_commit():
    bs, num_depths, vocab, budget = 2, 4, 5, 8
    n = budget + 1
    tree = _random_tree(bs, num_depths, vocab, budget, seed=11)
    allocator = TokenToKVPoolAllocator(
        size=1024, dtype=torch.int64, device="cpu", kvcache=None, need_sort=False
    )
    batch = _make_batch(bs, [3, 5], allocator, max_new_tokens=[100, 100])
    verify_input = DDTreeVerifyInput.from_tree(
        tree=tree, root_tokens=torch.tensor([1, 2]), seq_lens=batch.seq_lens
    )
    verify_input.prepare_for_verify(batch, page_size=1)
    # The target agrees with every node's first child.
    target = torch.zeros((bs, n), dtype=torch.int64)
    for b in range(bs):
        for node in range(n - 1, 0, -1):
            parent = int(tree.parents[b, node])
            if parent >= 0:
                target[b, parent] = tree.node_token_ids[b, node - 1]
    logits_output = SimpleNamespace(
        next_token_logits=_greedy_logits_for(target, vocab),
        hidden_states=torch.zeros(bs * n, 2),
    )
    _, commit_lens, _, _ = verify_input.verify(
        batch=batch, logits_output=logits_output, page_size=1
    )
    for b in range(bs):
        path, _ = _reference_walk(tree, target, b)
        assert verify_input.accept_index[b, : len(path)].tolist() == path
        last = ddtree_info.ddtree_path_steps_to_nodes(
            verify_input.accept_index, commit_lens.to(torch.int64) - 1
        )
        assert int(last[b]) == path[-1]


# ---------------------------------------------------------------- idle batches and refusals


def _idle_batch():
    return SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: True), device="cpu")


def test_an_idle_batch_neither_allocates_nor_verifies():
    tree = _random_tree(1, 3, 6, 4, 0)
    verify_input = DDTreeVerifyInput.from_tree(tree=tree, root_tokens=torch.tensor([1]), seq_lens=torch.tensor([3]))
    assert verify_input.get_spec_adjust_token_coefficient() == (5, 5)
    batch = _idle_batch()
    assert verify_input.prepare_for_verify(batch, page_size=1) is None and not hasattr(batch, "input_ids")
    new_bonus, commit_lens, next_hidden, num_correct = verify_input.verify(
        batch=batch, logits_output=None, page_size=1
    )
    assert new_bonus.numel() == commit_lens.numel() == next_hidden.numel() == 0 and num_correct == []
    assert commit_lens.dtype == torch.int32


def test_verify_refuses_sampling_info_of_another_batch_size():
    rng = random.Random(1)
    tree = _random_tree(2, 3, 6, 4, 1)
    allocator = TokenToKVPoolAllocator(size=512, dtype=torch.int64, device="cpu", kvcache=None, need_sort=False)
    batch = _make_batch(2, [3, 4], allocator, max_new_tokens=[10, 10])
    verify_input = DDTreeVerifyInput.from_tree(tree=tree, root_tokens=torch.tensor([rng.randrange(6)] * 2),
                                               seq_lens=batch.seq_lens)
    verify_input.prepare_for_verify(batch, page_size=1)
    batch.sampling_info = [object()] * 3  # three requests' sampling state for a batch of two
    logits = SimpleNamespace(next_token_logits=torch.zeros(2 * 5, 6), hidden_states=torch.zeros(2 * 5, 4))
    with pytest.raises(RuntimeError, match="sampling_info size mismatch"):
        verify_input.verify(batch=batch, logits_output=logits, page_size=1)
