"""Every Triton kernel variant a DDTREE decode round can reach is compiled at start-up, not while serving.

A Triton kernel compiles once per specialisation key: its compile-time constants, the dtypes and 16-byte
alignment of its pointers, the divisibility of the integers it may specialise on, and its launch options.
The H100 compiled three variants in the middle of serving at 16 and at 32 requests (stalls up to 820 ms):
the draft top-K splits each row into PARTS programs to fill the GPU, fewer as the batch grows, and PARTS is
a compile-time constant of its merge kernel.

Here every kernel of the patched ``ddtree_utils`` is replaced by a recorder that computes the key Triton
itself would compute for an sm_90 target (the kernel's own binder, from its signature: nothing launches,
so no GPU is needed), with the Triton paths enabled for CPU tensors. The keys that the worker's start-up
warm-up (``_warm_round_kernels``) produces must contain the keys of every round serving can run: every
batch size up to the largest, every width, the draft top-K of each width and of auto's statistics rounds,
at the shapes and dtypes the round passes.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")
from sglang.srt.speculative import ddtree_utils  # noqa: E402

Worker = worker_mod.DDTreeWorkerV2
pytestmark = pytest.mark.skipif(not hasattr(Worker, "_warm_round_kernels"),
                                reason="this tree's DDTreeWorkerV2 has no _warm_round_kernels")

L = 16  # the draft block: 15 drafted rows per request
VOCAB = 16384  # splits a row into as many parts (16) as the 151,936 words of Qwen3 do
MAX_BS = 72  # from 71 requests on a row is no longer split (PARTS = 1 at 132 SMs)
AUTO_WIDTHS = (16, 32, 64)


@pytest.fixture
def triton_keys(monkeypatch):
    """Record, instead of launching, the specialisation key of every kernel launch of ``ddtree_utils``."""
    pytest.importorskip("triton", reason="triton is not installed: no kernel keys to record")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature
    except ImportError as error:  # pragma: no cover - another triton's internals
        pytest.skip(f"this triton's binder is not where the test reads it: {error}")
    backend = make_backend(GPUTarget("cuda", 90, 32))
    keys: set = set()

    class Recorder:
        def __init__(self, name, kernel):
            self.name = name
            self.binder = create_function_from_signature(kernel.signature, kernel.params, backend)

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                _, specialization, options = self.binder(*args, **kwargs)
                keys.add((self.name, compute_cache_key({}, specialization, options)))
            return launch

    kernels = {name: value for name, value in vars(ddtree_utils).items() if isinstance(value, JITFunction)}
    assert len(kernels) >= 10, sorted(kernels)
    for name, kernel in kernels.items():
        monkeypatch.setattr(ddtree_utils, name, Recorder(name, kernel))
    monkeypatch.setattr(ddtree_utils, "_triton_ready", lambda *tensors: True)  # the CUDA paths, on CPU tensors
    return keys


def _worker(auto_widths, budget, topk, compact_mask=False):
    w = object.__new__(Worker)
    w._compact_tree_mask = compact_mask  # the target backend reads the compact mask (fa3) or the FULL_MASK
    w.block_size, w.budget, w.ddtree_topk, w.server_topk = L, budget, topk, min(topk, budget)
    w.auto_widths, w.verify_width = tuple(auto_widths), budget + 1
    w.device = torch.device("cpu")
    w.ps = SimpleNamespace(tp_rank=0)
    w._target_tp_rank = 0  # 0.5.23's worker: the target's TP rank (it has no ps)
    w._draft_sampler = None
    w._ddtree_mask_buf = None
    w._draft_topk = worker_mod._DDTreeDraftTopK(
        weight=torch.randn(VOCAB, 4), num_org=VOCAB, num_org_padded=VOCAB, org_vocab_start=0,
        block_size=L, topk=topk, max_bs=1,
    )
    w.model_runner = SimpleNamespace(
        req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros(MAX_BS + 1, 4096, dtype=torch.int32)),
        max_running_requests=MAX_BS,
    )
    w._serving_max_bs = lambda: MAX_BS
    return w


def _serve_every_round(w):
    """The stages of ``_forward_decode`` after the draft forward, at every batch size and width a round can
    take, with the shapes and dtypes the round passes them (greedy: the walk takes the arg-max's tokens)."""
    auto = len(w.auto_widths) > 1
    head, steps = w._draft_topk, L - 1
    for bs in range(1, MAX_BS + 1):
        seq_lens = torch.full((bs,), 100, dtype=torch.int64)
        pool_rows = torch.arange(bs, dtype=torch.int64)
        for n in w.auto_widths:
            for stats_round in ((False, True) if auto else (False,)):
                grown = n - 1 if auto and not stats_round else w.budget
                lp, ids = head.compute(torch.zeros(bs * steps, 4),
                                       k=min(grown, w.ddtree_topk) if auto else None)
                tree = worker_mod.build_ddtree_tree_from_topk(lp.view(bs, steps, -1), ids.view(bs, steps, -1), grown)
                if n - 1 < grown:
                    tree = worker_mod.ddtree_truncate_tree(tree, n - 1)
                if hasattr(Worker, "_verify_inputs"):  # the round's own choice of mask (fa3: none written)
                    w._verify_inputs(tree, seq_lens, bs, seq_lens + L, n)
                else:
                    worker_mod.ddtree_verify_inputs(
                        tree, seq_lens, mask_out=w._verify_mask_out(bs, seq_lens + L, n))
                slots = worker_mod.ddtree_window_slots(w.model_runner.req_to_token_pool.req_to_token,
                                                       pool_rows, seq_lens, n)
                draft = torch.cat([torch.zeros(bs, 1, dtype=torch.int64), tree.node_token_ids.to(torch.int64)], 1)
                accept = worker_mod.ddtree_verify_round(tree, target_tokens=torch.zeros(bs, n, dtype=torch.int64))
                worker_mod.ddtree_commit_round(draft, accept.accept_index, accept.accept_length,
                                               accept.bonus_tokens, slots, seq_lens)


@pytest.mark.parametrize("compact_mask", [False, True], ids=["full-mask", "compact-mask"])
@pytest.mark.parametrize(("auto_widths", "budget", "topk"), [(AUTO_WIDTHS, 63, 63), ((16,), 15, 15), ((64,), 63, 32)],
                         ids=["auto", "fixed-B15", "fixed-B63-topk-cap-32"])
def test_start_up_compiles_every_variant_a_round_can_reach(triton_keys, auto_widths, budget, topk, compact_mask):
    if compact_mask and not hasattr(Worker, "_verify_inputs"):
        pytest.skip("this tree's worker has no compact-mask (fa3) path")
    w = _worker(auto_widths, budget, topk, compact_mask)
    Worker._warm_round_kernels(w)
    warmed = set(triton_keys)
    triton_keys.clear()
    _serve_every_round(w)
    served = set(triton_keys)
    assert served <= warmed, sorted(name for name, _ in served - warmed)
    merges = {key for name, key in served if name == "_ddtree_topk_merge_kernel"}
    widths_or_ks = len({min(n - 1, topk) for n in auto_widths} | {min(budget, topk)}) if len(auto_widths) > 1 else 1
    # The batch sizes reach PARTS 16, 8, 4, 2 and 1 for each K: the test sees what made the H100 compile.
    assert len(merges) == 5 * widths_or_ks
    print(f"{len(served)} variants served, {len(warmed)} compiled at start")


def test_a_warm_up_at_one_request_would_leave_variants_to_compile_while_serving(triton_keys):
    # The negative control: ddtree@2.3.0 ran the top-K head for one request per width at start.
    w = _worker(AUTO_WIDTHS, 63, 63)
    for n in AUTO_WIDTHS:
        w._draft_topk.compute(torch.zeros(L - 1, 4), k=n - 1)
    warmed = set(triton_keys)
    triton_keys.clear()
    _serve_every_round(w)
    missing = {name for name, _ in set(triton_keys) - warmed}
    assert "_ddtree_topk_merge_kernel" in missing and "_ddtree_heap_tree_kernel" in missing


def test_the_warm_up_writes_no_request_state(triton_keys):
    # Zeros of the round's shapes: the request pool and the head's own buffers stay as they were; only the
    # worker's mask buffer is (re)used.
    w = _worker(AUTO_WIDTHS, 63, 63)
    w.model_runner.req_to_token_pool.req_to_token.random_(0, 1000)
    before = w.model_runner.req_to_token_pool.req_to_token.clone()
    Worker._warm_round_kernels(w)
    assert torch.equal(w.model_runner.req_to_token_pool.req_to_token, before)
    assert w._ddtree_mask_buf is not None


def test_without_a_head_yet_the_warm_up_builds_the_eager_one(triton_keys):
    w = _worker((16,), 15, 15)
    head, built = w._draft_topk, []
    w._draft_topk = None
    w._ddtree_topk_head = lambda *, max_bs: built.append(max_bs) or head
    Worker._warm_round_kernels(w)
    assert built == [1] and w._draft_topk is head


def test_the_top_k_variants_of_a_row_count_follow_the_chunks_of_the_head():
    w = _worker(AUTO_WIDTHS, 63, 63)
    head = w._draft_topk
    assert head.launch_variants(15, 15) == (ddtree_utils.ddtree_topk_variant(15, VOCAB, 15, torch.device("cpu")),)
    assert head.launch_variants(15, 15) == ((16, 16),)  # KP 16 (k <= 16), a row split in 16 parts
    assert head.launch_variants(480, 63) == ((64, 4),)  # 32 requests
    head.chunk_rows = 256
    assert head.launch_variants(600, None) == ((64, 8), (64, 8), (64, 16))  # chunks of 256, 256 and 88 rows


def test_the_largest_batch_is_the_schedulers_cap_or_the_largest_graph(monkeypatch):
    w = _worker(AUTO_WIDTHS, 63, 63)
    del w._serving_max_bs
    decode = SimpleNamespace(bs=[1, 2, 4])
    graphs = SimpleNamespace(graph=SimpleNamespace(cuda_graph_config=SimpleNamespace(decode=decode)))
    monkeypatch.setattr(worker_mod, "get_exec", lambda: graphs)
    assert w._serving_max_bs() == MAX_BS
    w.model_runner.max_running_requests = 0
    assert w._serving_max_bs() == 4
