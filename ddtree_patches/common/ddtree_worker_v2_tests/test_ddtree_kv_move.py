"""The worker's KV move after a verified round (``DDTreeWorkerV2._move_path_kv``), on a real token pool.

A plain ``MHATokenToKVPool`` (per-layer K and V buffers of whole rows, the pool SGLang builds for an MHA
target) takes one ``ddtree_move_path_kv`` launch that moves only the committed rows, addressed by the
pool's ``data_ptrs`` / ``data_strides``; the row width is read once from the strides
(``_kv_row_bytes``). Here the pool is SGLang's own class built on the CPU, the kernel runs in Triton's
interpreter, and the commit's tensors say they are CUDA tensors (the one thing a CPU lacks for the plain
branch: ``commit.kv_tgt.is_cuda``). The moved buffers must equal gathering every committed source row
first and then scattering it, in every layer's K and V.
"""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import pytest
import torch
from _kernel_helpers import as_if_cuda, interpreted_copy

worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402

pytestmark = pytest.mark.needs("ddtree_commit_round", "ddtree_move_path_kv")

SLOTS, HEADS, DIM, LAYERS = 300, 2, 8, 3


def worker_on(pool) -> worker_mod.DDTreeWorkerV2:
    worker = object.__new__(worker_mod.DDTreeWorkerV2)
    worker._kv_rows = None
    worker.model_runner = SimpleNamespace(token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool))
    return worker


def plain_pool(dtype=torch.bfloat16, seed: int = 0) -> MHATokenToKVPool:
    pool = MHATokenToKVPool(size=SLOTS, page_size=1, dtype=dtype, head_num=HEADS, head_dim=DIM, layer_num=LAYERS,
                            device="cpu", enable_memory_saver=False)
    gen = torch.Generator().manual_seed(seed)
    for buffer in (*pool.k_buffer, *pool.v_buffer):
        buffer.copy_(torch.randn(buffer.shape, generator=gen).to(buffer.dtype))
    return pool


def commit_of(ddtree_utils, seed: int, bs: int = 4, n: int = 16, steps: int = 8):
    """A round's commit: random walks over a window of free slots (as test_commit_round's cases)."""
    rng = random.Random(seed)
    index = torch.full((bs, steps), -1, dtype=torch.int64)
    length = torch.zeros(bs, dtype=torch.int64)
    for b in range(bs):
        accepted = rng.randrange(0, steps)
        index[b, 0] = 0
        for i, node in enumerate(sorted(rng.sample(range(1, n), accepted)), start=1):
            index[b, i] = node
        length[b] = accepted
    draft = torch.randint(0, 1000, (bs, n), generator=torch.Generator().manual_seed(seed))
    bonus = torch.randint(0, 1000, (bs,), generator=torch.Generator().manual_seed(seed + 1))
    window = torch.randperm(SLOTS, generator=torch.Generator().manual_seed(seed))[: bs * n].to(torch.int64)
    seq_lens = torch.randint(1, 500, (bs,), generator=torch.Generator().manual_seed(seed))
    return ddtree_utils.ddtree_commit_round(draft, index, length, bonus, window, seq_lens)


@pytest.mark.parametrize("seed", range(3))
def test_a_plain_pool_moves_the_committed_rows_of_every_layer_in_one_launch(ddtree_utils, monkeypatch, seed):
    interpreted = interpreted_copy(ddtree_utils, monkeypatch, triton_on_cpu=False)
    launches = []

    def move(*args):
        launches.append(args)
        interpreted.ddtree_move_path_kv(*args)

    monkeypatch.setattr(worker_mod, "ddtree_move_path_kv", move)
    pool = plain_pool(seed=seed)
    monkeypatch.setattr(pool, "move_kv_cache", lambda *a: pytest.fail("the plain pool takes the path kernel"))
    commit = commit_of(ddtree_utils, seed)
    expected = [buffer.clone() for buffer in (*pool.k_buffer, *pool.v_buffer)]
    for buffer in expected:
        buffer[commit.kv_tgt] = buffer[commit.kv_src]
    worker = worker_on(pool)
    worker._move_path_kv(dataclasses.replace(commit, kv_tgt=as_if_cuda(commit.kv_tgt)))
    assert len(launches) == 1 and launches[0][-1] == HEADS * DIM * 2  # the widest row, in bytes
    for got, want in zip((*pool.k_buffer, *pool.v_buffer), expected, strict=True):
        assert torch.equal(got, want)


def test_the_row_width_is_read_from_the_strides_once(ddtree_utils):
    worker = worker_on(None)
    assert worker._kv_row_bytes(torch.tensor([32, 64, 32, 64])) == 64
    assert worker._kv_row_bytes(torch.tensor([8])) == 64, "read once: the strides live on the device"
    assert worker._kv_rows == 64


@pytest.mark.parametrize("strides", [[6, 8], [], [4, 2]])
def test_rows_that_are_not_whole_words_leave_the_move_to_the_pool(strides):
    worker = worker_on(None)
    assert worker._kv_row_bytes(torch.tensor(strides, dtype=torch.int64)) == 0


def test_a_pool_whose_rows_are_not_whole_words_moves_its_own_kv(ddtree_utils, monkeypatch):
    monkeypatch.setattr(worker_mod, "ddtree_move_path_kv", lambda *a: pytest.fail("rows of 2 bytes: not the kernel"))
    pool = MHATokenToKVPool(size=SLOTS, page_size=1, dtype=torch.bfloat16, head_num=1, head_dim=1, layer_num=1,
                            device="cpu", enable_memory_saver=False)
    moved = []
    monkeypatch.setattr(pool, "move_kv_cache", lambda tgt, src: moved.append((tgt, src)))
    commit = commit_of(ddtree_utils, 5)
    worker_on(pool)._move_path_kv(dataclasses.replace(commit, kv_tgt=as_if_cuda(commit.kv_tgt)))
    assert len(moved) == 1 and torch.equal(moved[0][1], commit.kv_src)
