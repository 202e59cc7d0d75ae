"""The commit after the walk (``ddtree_commit_round``, ``ddtree_window_slots``): what a verified round
commits (output tokens, lengths, path rows) and the KV moves that keep the accepted path. The torch ops
are checked against the rule itself on the CPU; the kernels against the torch ops on a GPU."""

from __future__ import annotations

import random

import pytest
import torch
from _kernel_helpers import load_fresh

pytestmark = pytest.mark.needs("ddtree_commit_round", "ddtree_window_slots", "ddtree_move_path_kv")


def _paths(rng: random.Random, bs: int, n: int, steps: int):
    """Walk results: each request's path is root then increasing node indices (a child is popped after its
    parent), -1 past the path; an accepted length of 0..steps-1."""
    index = torch.full((bs, steps), -1, dtype=torch.int64)
    length = torch.zeros(bs, dtype=torch.int64)
    for b in range(bs):
        accepted = rng.randrange(0, steps)
        nodes = sorted(rng.sample(range(1, n), accepted)) if accepted else []
        index[b, 0] = 0
        for i, node in enumerate(nodes, start=1):
            index[b, i] = node
        length[b] = accepted
    return index, length


def _case(seed: int, bs: int = 5, n: int = 16, steps: int = 8):
    rng = random.Random(seed)
    draft = torch.tensor([[rng.randrange(1000) for _ in range(n)] for _ in range(bs)], dtype=torch.int64)
    index, length = _paths(rng, bs, n, steps)
    bonus = torch.tensor([rng.randrange(1000) for _ in range(bs)], dtype=torch.int64)
    window = torch.randperm(bs * n * 4, generator=torch.Generator().manual_seed(seed))[: bs * n] + 1
    seq_lens = torch.tensor([rng.randrange(1, 500) for _ in range(bs)], dtype=torch.int64)
    return draft, index, length, bonus, window.to(torch.int64), seq_lens


@pytest.mark.parametrize("seed", range(6))
def test_the_commit_is_the_path_then_the_bonus_and_moves_each_path_node_to_its_position(ddtree_utils, seed):
    draft, index, length, bonus, window, seq_lens = _case(seed)
    bs, n = draft.shape
    steps = index.shape[1]
    commit = ddtree_utils.ddtree_commit_round(draft, index, length, bonus, window, seq_lens)
    slots = window.view(bs, n)
    assert commit.commit_lens.dtype == torch.int32
    assert torch.equal(commit.commit_lens, (length + 1).to(torch.int32))
    assert torch.equal(commit.new_seq_lens, seq_lens + length + 1)
    for b in range(bs):
        k = int(length[b])
        path = [int(v) for v in index[b, : k + 1]]
        assert commit.out_tokens[b, :k].tolist() == [int(draft[b, node]) for node in path[1:]]
        assert int(commit.out_tokens[b, k]) == int(bonus[b])
        assert commit.flat_accept_index[b].tolist() == [b * n + node for node in path] + [-1] * (steps - k - 1)
        rows = commit.path_rows.view(bs, steps)[b].tolist()
        assert rows[: k + 1] == [b * n + node for node in path]
        tgt = commit.kv_tgt.view(bs, steps)[b].tolist()
        src = commit.kv_src.view(bs, steps)[b].tolist()
        assert tgt == slots[b, :steps].tolist()  # the window's first L slots: positions seq_len + i
        assert src[: k + 1] == [int(slots[b, node]) for node in path]
        assert src[k + 1 :] == tgt[k + 1 :]  # past the path: each slot onto itself


@pytest.mark.parametrize("seed", range(4))
def test_the_moves_done_all_at_once_leave_each_position_with_its_path_nodes_kv(ddtree_utils, seed):
    """The all-layer copy loads every slot of a launch before it stores any: a path node moved onto an
    earlier window slot that is itself a later source is still read before it is overwritten."""
    draft, index, length, bonus, window, seq_lens = _case(seed, bs=6, n=12, steps=6)
    commit = ddtree_utils.ddtree_commit_round(draft, index, length, bonus, window, seq_lens)
    kv = torch.arange(int(window.max()) + 1, dtype=torch.float64) * 10.0  # slot s holds 10 * s
    moved = kv.clone()
    moved[commit.kv_tgt] = kv[commit.kv_src]  # gather all, then scatter all
    bs, n = draft.shape
    for b in range(bs):
        for i in range(int(length[b]) + 1):
            node = int(index[b, i])
            assert moved[int(window.view(bs, n)[b, i])] == kv[int(window.view(bs, n)[b, node])]


def test_window_slots_are_the_slots_of_positions_seq_len_onwards(ddtree_utils):
    req_to_token = torch.arange(4 * 64, dtype=torch.int32).view(4, 64) * 3
    pool_rows = torch.tensor([2, 0, 3])
    seq_lens = torch.tensor([5, 0, 40])
    slots = ddtree_utils.ddtree_window_slots(req_to_token, pool_rows, seq_lens, 9)
    assert slots.dtype == torch.int64 and slots.shape == (27,)
    expected = [int(req_to_token[r, s + i]) for r, s in zip(pool_rows.tolist(), seq_lens.tolist()) for i in range(9)]
    assert slots.tolist() == expected


@pytest.mark.gpu
@pytest.mark.parametrize("bs", [1, 3, 17, 32])
def test_the_commit_kernel_equals_the_torch_ops(ddtree_utils, cuda, bs):
    draft, index, length, bonus, window, seq_lens = _case(100 + bs, bs=bs, n=32, steps=16)
    expected = ddtree_utils.ddtree_commit_round(draft, index, length, bonus, window, seq_lens)
    got = ddtree_utils.ddtree_commit_round(*(t.to(cuda) for t in (draft, index, length, bonus, window, seq_lens)))
    for field in ("out_tokens", "commit_lens", "flat_accept_index", "path_rows", "kv_src", "kv_tgt", "new_seq_lens"):
        assert torch.equal(getattr(got, field).cpu(), getattr(expected, field)), field
    req_to_token = torch.randint(0, 10**6, (40, 256), dtype=torch.int32)
    pool_rows = torch.randperm(40)[:bs]
    starts = torch.randint(0, 200, (bs,))
    assert torch.equal(
        ddtree_utils.ddtree_window_slots(req_to_token.to(cuda), pool_rows.to(cuda), starts.to(cuda), 33).cpu(),
        ddtree_utils.ddtree_window_slots(req_to_token, pool_rows, starts, 33),
    )


@pytest.fixture
def interpreted(ddtree_utils, monkeypatch):
    """The module with its Triton kernels run by Triton's interpreter on the CPU (no GPU here)."""
    pytest.importorskip("triton")
    return load_fresh(ddtree_utils, monkeypatch, TRITON_INTERPRET="1")


@pytest.mark.parametrize(("bs", "n"), [(1, 16), (3, 16), (7, 32)])
def test_the_commit_and_window_kernels_equal_the_torch_ops_in_the_interpreter(interpreted, bs, n):
    draft, index, length, bonus, window, seq_lens = _case(10 * bs + n, bs=bs, n=n, steps=8)
    expected = interpreted.ddtree_commit_round(draft, index, length, bonus, window, seq_lens)
    got = interpreted._commit_round_triton(draft, index, length, bonus, window.view(bs, n), seq_lens)
    for field in ("out_tokens", "commit_lens", "flat_accept_index", "path_rows", "kv_src", "kv_tgt", "new_seq_lens"):
        assert torch.equal(getattr(got, field), getattr(expected, field)), field
    req_to_token = torch.randint(0, 10**6, (16, 300), dtype=torch.int32)
    rows, starts = torch.randperm(16)[:bs], torch.randint(0, 200, (bs,))
    assert torch.equal(interpreted._window_slots_triton(req_to_token, rows, starts, n),
                       interpreted.ddtree_window_slots(req_to_token, rows, starts, n))


@pytest.mark.parametrize("seed", range(4))
def test_the_path_kv_move_kernel_equals_moving_every_row_at_once(interpreted, seed):
    """Every layer's K and V buffer, addressed by raw pointers as the pool's are; the kernel walks each
    path in order, which must equal gathering every source row first and then scattering."""
    layers, slots, row = 3, 300, (2, 8)
    buffers = [torch.randn(slots, *row).to(torch.bfloat16) for _ in range(2 * layers)]
    pointers = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    row_bytes = row[0] * row[1] * 2
    strides = torch.tensor([row_bytes] * len(buffers))
    draft, index, length, bonus, _, seq_lens = _case(seed, bs=4, n=16, steps=8)
    window = torch.randperm(slots, generator=torch.Generator().manual_seed(seed))[: 4 * 16]
    commit = interpreted.ddtree_commit_round(draft, index, length, bonus, window, seq_lens)
    expected = [b.clone() for b in buffers]
    for b in expected:
        b[commit.kv_tgt] = b[commit.kv_src]
    interpreted.ddtree_move_path_kv(pointers, strides, commit.kv_tgt, commit.kv_src, commit.commit_lens, row_bytes)
    assert all(torch.equal(got, want) for got, want in zip(buffers, expected))
