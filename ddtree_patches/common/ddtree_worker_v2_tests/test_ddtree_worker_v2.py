"""The DDTreeWorkerV2 decode round, run for real on CPU against a toy target and drafter.

What runs is the patched tree's own code: ``DDTreeWorkerV2._forward_decode`` and its stages
(draft block, per-depth top-K head, tree, ``DDTreeVerifyInput.from_tree`` and its mask, the walk,
``ddtree_commit_round``, the pool's ``move_kv_cache`` (the CPU path of the KV move), ``on_publish``, the draft-KV
hand-off, the spec-v2 ``GenerationBatchResult`` and ``DFlashDraftInputV2``). What is stood in for:

- the models. The toy target's next token is a hash of its whole context, and it reads that
  context the way an attention backend would: the committed prefix from the "KV cache" through
  ``req_to_token``, the tree tokens through the flat FULL_MASK rows at the triton layout's offsets
  (``N * (seq_len + N)`` per request). The drafter proposes the true continuation, except that at
  some depths its top-1 is wrong and the truth is its second choice, so only a tree recovers it.
- the kernels that cannot launch on CPU (Triton cache-location kernels, the KV move): torch
  equivalents with the same semantics; the "KV cache" stores, per slot, the token and position
  written there, so a wrong compaction shows up as a wrong context in the next round.
- the scheduler: a loop that carries ``new_seq_lens`` and the bonus token into the next round,
  once with exact host lengths (``--disable-overlap-schedule``) and once with host lengths one
  round stale (the overlap scheduler's lag).

Greedy DDTree must then reproduce greedy autoregressive decoding token for token, and seeded
sampling (draws keyed on seed and position) must reproduce seeded autoregressive sampling.

Every set whose tree carries DDTreeWorkerV2 runs this file against its own base: where the bases'
SGLang differs (which module launches the cache-location kernel, the name of the reserved lengths),
the test reads the tree's release (``RELEASE``) and stands in for what that release calls.
"""

from __future__ import annotations

import ast
import inspect
import json
from types import SimpleNamespace

import pytest
import torch
from sglang_tree import tree_release

worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")
from sglang.srt.layers import sampler as sampler_mod  # noqa: E402
from sglang.srt.managers.scheduler import GenerationBatchResult  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative import ddtree_info_v2, spec_utils  # noqa: E402
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2  # noqa: E402
from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info  # noqa: E402

budget_mod = pytest.importorskip("sglang.srt.speculative.ddtree_budget")
phase_mod = pytest.importorskip("sglang.srt.speculative.spec_phase_timing")

RELEASE = tree_release()
#: 0.5.23 packs the accepted slots with fill_front_out_cache_loc_func, which launches the kernel of
#: sglang.kernels.ops.speculative.cache_locs; 0.5.17 launches spec_utils' own.
if RELEASE >= (0, 5, 23):
    from sglang.kernels.ops.speculative import cache_locs as cache_loc_kernels
else:
    cache_loc_kernels = spec_utils
#: The lengths the next round reserves, on the planning result (renamed in 0.5.23).
RESERVED_LENS = "nxt_kv_lens_cpu" if RELEASE >= (0, 5, 23) else "reserved_seq_lens_cpu"

V = 41  # vocabulary; the mask token is V - 1 and never a real token
MASK = V - 1
CTX = 512  # req_to_token row width (the reserved window)


def target_next(context: list[int]) -> int:
    """The toy target's greedy token: a hash of the whole context, never the mask token."""
    h = 17
    for i, t in enumerate(context):
        h = (h * 31 + t * (i % 7 + 3)) % 1000003
    return h % (V - 1)


def target_logits(context: list[int]) -> torch.Tensor:
    """Logits whose argmax is ``target_next`` and with room for sampling."""
    base = torch.tensor([((target_next(context) * 13 + v * 7) % 11) / 4.0 for v in range(V)])
    base[target_next(context)] = 4.0
    base[MASK] = -30.0
    return base.double()


def draft_wrong_at(context_len: int, depth: int) -> bool:
    """Where the drafter's top-1 is wrong (its second choice is the truth)."""
    return (context_len * 5 + depth * 3) % 7 < 2


class KVStore:
    """Per-slot contents of the toy target's KV cache: the token and position written there."""

    def __init__(self, slots: int):
        self.token = torch.full((slots,), -1, dtype=torch.long)
        self.position = torch.full((slots,), -1, dtype=torch.long)

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        # move_kv_cache_native's semantics: gather first, then scatter.
        self.token[tgt_loc.long()] = self.token[src_loc.long()].clone()
        self.position[tgt_loc.long()] = self.position[src_loc.long()].clone()


class Allocator:
    def __init__(self, store: KVStore):
        self.store = store
        self.page_size = 1

    def get_kvcache(self):
        return self.store


class _Launch:
    """Stands in for ``kernel[grid](*args)`` with a torch function."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.fn(*args)


def _assign_extend_cache_locs(req_pool_indices, req_to_token, start, end, out, _width, _pow2=None):
    offset = 0
    for i in range(len(req_pool_indices)):
        s, e = int(start[i]), int(end[i])
        out[offset : offset + e - s] = req_to_token[int(req_pool_indices[i]), s:e]
        offset += e - s


def _assign_extend_cache_locs_func(*, req_pool_indices, req_to_token, start_offset, end_offset,
                                   batch_size, draft_token_num, device):
    out = torch.empty((batch_size * draft_token_num,), dtype=torch.int64, device=device)
    _assign_extend_cache_locs(req_pool_indices, req_to_token, start_offset, end_offset, out, 0)
    return out


def _fill_accept_out_cache_loc(accept_index, out_cache_loc, accept_out_cache_loc, size):
    flat = accept_index.reshape(-1)
    valid = flat[flat >= 0]
    accept_out_cache_loc[: valid.numel()] = out_cache_loc[valid]


def _torch_murmur(seed, positions, cols):
    mixed = seed.view(-1, 1).long() * 1000003 + positions.view(-1, 1).long() * 7919 + cols.view(1, -1)
    return (mixed * 2654435761) % (1 << 32)


@pytest.fixture(autouse=True)
def _cpu_kernels(monkeypatch):
    monkeypatch.setattr(worker_mod, "assign_extend_cache_locs_func", _assign_extend_cache_locs_func)
    monkeypatch.setattr(cache_loc_kernels, "assign_extend_cache_locs", _Launch(_assign_extend_cache_locs))
    monkeypatch.setattr(spec_utils, "fill_accept_out_cache_loc_func", _fill_accept_out_cache_loc)
    monkeypatch.setattr(sampler_mod, "murmur_hash32", _torch_murmur)
    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: SimpleNamespace(world_size=1))


class ToyModels:
    """The drafter's and target's forwards over the shared toy KV store; records what it saw."""

    def __init__(self, store: KVStore, req_to_token: torch.Tensor, block_size: int, verify_width: int):
        self.store, self.req_to_token = store, req_to_token
        self.L, self.N = block_size, verify_width
        self.sampling = None  # None: greedy; else (temperature, seed)
        self.verify_calls = []
        self.widths = []  # verify width of every round

    def committed(self, b: int, seq_len: int) -> list[int]:
        slots = self.req_to_token[b, :seq_len]
        assert bool((self.store.position[slots] == torch.arange(seq_len)).all()), "KV out of place"
        return self.store.token[slots].tolist()

    def draft_forward(self, fb):
        bs, L = fb.batch_size, self.L
        assert fb.forward_mode == ForwardMode.TARGET_VERIFY and fb.input_ids.numel() == bs * L
        hidden = torch.zeros((bs * L, V), dtype=torch.float32)
        for b in range(bs):
            seq_len = int(fb.seq_lens[b])
            block = fb.input_ids.view(bs, L)[b].tolist()
            assert block[1:] == [MASK] * (L - 1)
            assert fb.positions.view(bs, L)[b].tolist() == list(range(seq_len, seq_len + L))
            assert torch.equal(fb.out_cache_loc.view(bs, L)[b], self.req_to_token[b, seq_len : seq_len + L])
            context = self.committed(b, seq_len) + [block[0]]
            for depth in range(1, L):
                truth = target_next(context)
                wrong = (truth + 1 + depth) % (V - 1)
                first, second = (wrong, truth) if draft_wrong_at(seq_len, depth) else (truth, wrong)
                row = hidden[b * L + depth]
                row[:] = torch.linspace(0.0, 1.0, V)  # distinct, low
                row[first], row[second] = 9.0, 8.0
                context = context + [truth]
        return SimpleNamespace(logits_output=SimpleNamespace(hidden_states=hidden), can_run_graph=False)

    def verify_forward(self, fb):
        spec = fb.spec_info
        bs = fb.batch_size
        n = spec.draft_token.numel() // bs  # the round's width (auto varies it)
        assert spec.num_tokens_per_req == n, "a verify names its width for the graph runners"
        self.widths.append(n)
        tokens = spec.draft_token.view(bs, n)
        positions = spec.positions.view(bs, n)
        cache_loc = fb.out_cache_loc.view(bs, n)
        mask, offset = spec.custom_mask, 0
        # A compact-mask backend (fa3) reads the trees' own [bs, n, n] rows and no FULL_MASK is written.
        compact = getattr(spec, "tree_mask", None)
        assert (compact is None) != (mask is None), "exactly one mask, the one the backend reads"
        logits = torch.empty((bs * n, V), dtype=torch.float32)
        hidden = torch.empty((bs * n, 2), dtype=torch.float32)
        for b in range(bs):
            seq_len = int(fb.seq_lens[b])
            assert torch.equal(cache_loc[b], self.req_to_token[b, seq_len : seq_len + n])
            prefix = self.committed(b, seq_len)
            width = seq_len + n
            for i in range(n):
                if compact is not None:
                    visible = [j for j in range(n) if compact[b, i, j]]
                else:
                    row = mask[offset + i * width : offset + (i + 1) * width]
                    assert bool(row[:seq_len].all()), "prefix columns must all be visible"
                    visible = [j for j in range(n) if row[seq_len + j]]
                assert visible[-1] == i, "a node sees its ancestors and itself, nothing after it"
                context = prefix + tokens[b, visible].tolist()
                assert int(positions[b, i]) == seq_len + len(visible) - 1
                logits[b * n + i] = target_logits(context).float()
                hidden[b * n + i] = torch.tensor([float(tokens[b, i]), float(positions[b, i])])
                # The forward writes every verify token's KV into its window slot.
                self.store.token[cache_loc[b, i]] = tokens[b, i]
                self.store.position[cache_loc[b, i]] = positions[b, i]
            offset += n * width
        assert compact is not None or mask.numel() >= offset, "the mask must cover every request's rows"
        self.verify_calls.append(fb)
        return SimpleNamespace(
            logits_output=SimpleNamespace(next_token_logits=logits, hidden_states=hidden),
            can_run_cuda_graph=False,
        )


class RecordingWorker(worker_mod.DDTreeWorkerV2):
    """The real worker with its draft-KV writer recorded (the draft model's KV layers are not
    built on CPU); every other method of the round is the tree's own."""

    def _append_target_hidden_to_draft_kv_by_loc(self, *, target_hidden, cache_loc, positions,
                                                 cache_loc_2d=None, commit_lens=None):
        self.events.append("draft_kv")
        self.draft_kv.append((target_hidden.clone(), cache_loc_2d.clone(), positions.clone(), commit_lens.clone()))


def make_worker(*, bs: int, budget: int, block_size: int, topk: int, auto_widths=None, costs=None,
                accept_model=None, compact_mask=False):
    """The worker; with ``auto_widths`` its budget is chosen per round by a BudgetPolicy over
    ``costs`` (a CostTable) -- the widest width is then ``budget + 1``. ``compact_mask``: the target
    backend reads the trees' compact mask (fa3) instead of the FULL_MASK (triton)."""
    if compact_mask and not hasattr(worker_mod.DDTreeWorkerV2, "_verify_inputs"):
        pytest.skip("this tree's worker has no compact-mask (fa3) path")
    n = budget + 1
    store = KVStore(bs * CTX + 1)
    req_to_token = (torch.arange(bs * CTX, dtype=torch.int32).view(bs, CTX) + 1)
    models = ToyModels(store, req_to_token, block_size, n)
    w = object.__new__(RecordingWorker)
    w.events, w.draft_kv = [], []
    w.block_size, w.verify_width, w.budget, w.ddtree_topk, w.server_topk = block_size, n, budget, topk, topk
    w.speculative_num_draft_tokens = block_size
    w.device = torch.device("cpu")
    w.ps = SimpleNamespace(tp_rank=0)
    w._target_tp_rank = 0
    w.page_size = 1
    w._need_mamba_verify_commit = False
    w._use_triton_prepare_block = False
    w._mask_token_id = MASK
    w._block_pos_offsets = torch.arange(block_size)
    w._draft_block_ids_buf = None
    w._draft_sampler = None
    w._ddtree_mask_buf = None
    w._compact_tree_mask = compact_mask
    w._phases = phase_mod.PHASES_OFF
    w._draft_ran_graph = False
    w._fixed_width = n
    w._width_runners = {}
    w._stats_round = 0
    w.auto_widths = tuple(auto_widths) if auto_widths else (n,)
    w._policy = None
    if auto_widths:
        w._policy = budget_mod.BudgetPolicy(widths=w.auto_widths, costs=costs, accept_model=accept_model)
        w._stats_slots = [worker_mod._StatsSlot.allocate(len(w.auto_widths) + 1, "cpu")
                          for _ in range(worker_mod.STATS_LAG + 1)]
    w._draft_topk = worker_mod._DDTreeDraftTopK(
        weight=torch.eye(V), num_org=V, num_org_padded=V, org_vocab_start=0,
        block_size=block_size, topk=topk, max_bs=bs,
    )
    w._draft_block_spec_info = make_draft_block_spec_info(draft_token_num=block_size, device=w.device)
    w.model_runner = SimpleNamespace(
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
        token_to_kv_pool_allocator=Allocator(store),
        model_config=SimpleNamespace(context_len=CTX - n),
    )
    embed = lambda ids: torch.zeros((*ids.shape, 4))  # noqa: E731 - the toy drafter ignores them
    target_model = SimpleNamespace(get_input_embeddings=lambda: embed)
    w._target_worker = SimpleNamespace(
        model_runner=SimpleNamespace(model=target_model),
        forward_batch_generation=lambda batch, forward_batch, is_verify, skip_attn_backend_init: (
            models.verify_forward(forward_batch)
        ),
    )
    w.draft_model_runner = SimpleNamespace(forward=models.draft_forward)
    return w, models


@pytest.fixture(autouse=True)
def _plain_prepare_for_verify(monkeypatch):
    """ForwardBatch.init_new needs a full ScheduleBatch; the verify forward only needs these."""

    def prepare(self, batch, target_worker):
        batch.input_ids = self.draft_token
        batch.spec_info = self
        batch.forward_mode = ForwardMode.TARGET_VERIFY
        fb = SimpleNamespace(
            batch_size=len(batch.seq_lens), seq_lens=batch.seq_lens.clone(),
            out_cache_loc=batch.out_cache_loc, spec_info=self,
            seq_lens_cpu=batch.seq_lens_cpu.clone(), seq_lens_sum=batch.seq_lens_sum,
        )
        return fb, False

    monkeypatch.setattr(ddtree_info_v2.DDTreeVerifyInput, "prepare_for_verify", prepare)


def make_batch(prompts, bonus, seq_lens_cpu, sampling_info=None):
    bs = len(prompts)
    seq_lens = torch.tensor([len(p) for p in prompts], dtype=torch.int64)
    return SimpleNamespace(
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens_cpu,
        seq_lens_sum=int(seq_lens_cpu.sum()),
        req_pool_indices=torch.arange(bs, dtype=torch.int64),
        forward_mode=ForwardMode.DECODE,
        is_extend_in_batch=False,
        has_grammar=False,
        return_logprob=False,
        sampling_info=sampling_info,
        mamba_track_indices=None,
        out_cache_loc=None,
        spec_info=DFlashDraftInputV2.create_idle_input(torch.device("cpu")),
        _bonus=bonus,
    )


class _Info(SimpleNamespace):
    """The SamplingBatchInfo fields the round reads."""

    def __len__(self):
        return len(self.temperatures)


def seeded_sampling_info(bs, temperature, seed):
    return _Info(
        is_all_greedy=False,
        temperatures=torch.full((bs, 1), float(temperature)),
        top_ks=torch.full((bs,), 1 << 30, dtype=torch.int32),
        top_ps=torch.ones(bs),
        min_ps=torch.zeros(bs),
        need_top_k_sampling=False, need_top_p_sampling=False, need_min_p_sampling=False,
        sampling_seed=torch.full((bs,), seed, dtype=torch.int64),
        has_custom_logit_processor=False,
        acc_linear_penalties=None,
        penalizer_orchestrator=None,
        grammar_mask=None,
        logit_bias=None,
    )


def ar_reference(prompt, steps, sampling=None):
    """Greedy (or seeded) autoregressive decoding of the toy target."""
    seq = list(prompt)
    out = []
    for _ in range(steps):
        if sampling is None:
            token = target_next(seq)
        else:
            temperature, seed = sampling
            probs = torch.softmax(target_logits(seq).float() / temperature, -1).unsqueeze(0)
            token = int(sampler_mod.top_k_top_p_min_p_sampling_from_probs_torch(
                probs, torch.tensor([1 << 30]), torch.ones(1), torch.zeros(1), False,
                # Keyed like SGLang's sampler: on the input token's position.
                torch.tensor([seed]), torch.tensor([len(seq) - 1]),
            )[0])
        out.append(token)
        seq.append(token)
    return out


def run_rounds(*, prompts, budget, block_size, topk, overlap, rounds, sampling=None, widths=None, setup=None,
               **auto):
    """Prefill by hand (prompt KV in place, first bonus = the target's token), then ``rounds``
    decode rounds driven like the scheduler drives the worker. ``widths``: the verify width of
    each round, in turn (the choices an auto budget could make); ``setup(worker)``: a change to the
    worker before the first round; ``auto``: make_worker's."""
    bs = len(prompts)
    w, models = make_worker(bs=bs, budget=budget, block_size=block_size, topk=topk, **auto)
    w.models = models
    if setup is not None:
        setup(w)
    if widths is not None:
        turn = iter(widths * rounds)
        w._round_width = lambda bs: next(turn)
    req_to_token, store = models.req_to_token, models.store
    outputs, bonus = [], []
    for b, prompt in enumerate(prompts):
        slots = req_to_token[b, : len(prompt)]
        store.token[slots] = torch.tensor(prompt)
        store.position[slots] = torch.arange(len(prompt))
        first = ar_reference(prompt, 1, sampling)[0]
        outputs.append([first])
        bonus.append(first)
    seq_lens = torch.tensor([len(p) for p in prompts], dtype=torch.int64)
    host_lens = seq_lens.clone()  # what the host knows; one round stale under overlap
    bonus = torch.tensor(bonus, dtype=torch.int64)
    accept_lengths = []
    for _ in range(rounds):
        info = None if sampling is None else seeded_sampling_info(bs, *sampling)
        batch = make_batch(prompts, bonus, host_lens.clone(), info)
        batch.req_to_token_pool = w.model_runner.req_to_token_pool
        batch.seq_lens = seq_lens.clone()
        batch.spec_info = DFlashDraftInputV2(
            topk_p=torch.empty((bs, 0)), topk_index=torch.empty((bs, 0), dtype=torch.long),
            bonus_tokens=bonus.clone(), new_seq_lens=seq_lens.clone(), hidden_states=torch.empty((bs, 0)),
        )
        published = []
        w.events.clear()

        def on_publish(lens):
            w.events.append("publish")
            published.append(lens.clone())

        result = w.forward_batch_generation(batch, on_publish=on_publish if overlap else None)
        assert isinstance(result, GenerationBatchResult)
        assert isinstance(result.next_draft_input, DFlashDraftInputV2)
        assert result.speculative_num_draft_tokens == block_size  # the output stride is L
        commit = result.accept_lens
        assert commit.dtype == torch.int32 and int(commit.min()) >= 1 and int(commit.max()) <= block_size
        tokens = result.next_token_ids.view(bs, block_size)
        for b in range(bs):
            outputs[b].extend(tokens[b, : int(commit[b])].tolist())
        assert torch.equal(result.new_seq_lens, seq_lens + commit)
        if overlap:
            assert w.events == ["publish", "draft_kv"], "new_seq_lens is published before the draft KV"
            assert torch.equal(published[0], result.new_seq_lens)
        # The draft KV of the committed tokens: the path's hidden rows at the window's first slots.
        path_hidden, loc_2d, positions, draft_commit = w.draft_kv[-1]
        assert torch.equal(draft_commit, commit)
        for b in range(bs):
            c = int(commit[b])
            rows = path_hidden.view(bs, block_size, 2)[b, :c]
            assert rows[:, 1].long().tolist() == list(range(int(seq_lens[b]), int(seq_lens[b]) + c))
            committed_tokens = [int(bonus[b])] + tokens[b, : c - 1].tolist()
            assert rows[:, 0].long().tolist() == committed_tokens
            assert torch.equal(loc_2d[b], req_to_token[b, int(seq_lens[b]) : int(seq_lens[b]) + block_size].long())
        accept_lengths.extend(commit.tolist())
        host_lens = seq_lens.clone() if overlap else (seq_lens + commit).clone()
        seq_lens = result.new_seq_lens.clone()
        bonus = result.next_draft_input.bonus_tokens.clone()
    return outputs, accept_lengths, w


PROMPTS = [[3, 9, 1], [7], [12, 4, 4, 30, 2, 8], [5, 5]]


MASKS = pytest.mark.parametrize("compact_mask", [False, True], ids=["full-mask", "compact-mask"])


@MASKS
@pytest.mark.parametrize("overlap", [False, True], ids=["non-overlap", "overlap"])
@pytest.mark.parametrize(("budget", "block_size", "topk"), [(16, 8, 16), (7, 8, 7), (24, 6, 4)])
def test_greedy_rounds_reproduce_autoregressive_decoding(overlap, budget, block_size, topk, compact_mask):
    outputs, accept_lengths, _ = run_rounds(
        prompts=PROMPTS, budget=budget, block_size=block_size, topk=topk, overlap=overlap, rounds=8,
        compact_mask=compact_mask,
    )
    for prompt, out in zip(PROMPTS, outputs):
        assert out == ar_reference(prompt, len(out))
    # The drafter's top-1 is wrong at some depths: a chain would stop there, the tree goes on.
    assert max(accept_lengths) > 2 and sum(accept_lengths) > 2 * len(accept_lengths)


def test_tree_accepts_more_than_the_drafters_own_chain():
    # The same rounds with a one-wide tree (B = L - 1, K = 1: DFLASH's chain) accept less.
    _, tree_lengths, _ = run_rounds(prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=True, rounds=6)
    _, chain_lengths, _ = run_rounds(prompts=PROMPTS, budget=7, block_size=8, topk=1, overlap=True, rounds=6)
    assert sum(tree_lengths) > sum(chain_lengths)


@pytest.mark.parametrize("overlap", [False, True], ids=["non-overlap", "overlap"])
def test_seeded_sampling_rounds_reproduce_seeded_autoregressive_sampling(overlap):
    outputs, _, _ = run_rounds(
        prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=overlap, rounds=6, sampling=(0.9, 1234)
    )
    for prompt, out in zip(PROMPTS, outputs):
        assert out == ar_reference(prompt, len(out), sampling=(0.9, 1234))


def test_the_mask_is_sized_from_the_host_bound_not_the_device_lengths():
    # Under overlap the host lengths lag by a round; the mask and verify planning use
    # seq_lens_cpu + L, which covers the device lengths, and never read the device.
    _, _, w = run_rounds(prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=True, rounds=3)
    batch = SimpleNamespace(seq_lens_cpu=torch.tensor([5, 9]))
    bound = w._host_prefix_bound(batch, SimpleNamespace(**{RESERVED_LENS: None}))
    assert bound.tolist() == [13, 17] and bound.device.type == "cpu"
    far = SimpleNamespace(seq_lens_cpu=torch.tensor([CTX * 2]))
    assert w._host_prefix_bound(far, None).tolist() == [CTX - w.verify_width]  # clamped to context
    # Backends that keep no CPU lengths: the lengths reserved for the next round bound it.
    reserved = SimpleNamespace(**{RESERVED_LENS: torch.tensor([14, 30], dtype=torch.int32)})
    bound = w._host_prefix_bound(SimpleNamespace(seq_lens_cpu=None), reserved)
    assert bound.tolist() == [14, 30] and bound.dtype == torch.int64
    with pytest.raises(RuntimeError, match="needs host sequence lengths"):
        w._host_prefix_bound(SimpleNamespace(seq_lens_cpu=None), SimpleNamespace(**{RESERVED_LENS: None}))


def test_the_mask_buffer_persists_across_rounds_and_grows_only_on_a_larger_host_size():
    # One buffer for every round: a round whose host-sized mask fits reuses it (no
    # per-round allocation), a larger one grows it geometrically; the slice handed to
    # the verify is exactly the host-known size, so the backend copies no more.
    w, _ = make_worker(bs=2, budget=8, block_size=4, topk=4)
    n = w.verify_width
    first = w._verify_mask_out(2, torch.tensor([10, 20]), n)
    assert first.numel() == n * 30 + 2 * n * n and first.dtype == torch.bool
    buffer = w._ddtree_mask_buf
    smaller = w._verify_mask_out(1, torch.tensor([12]), n)
    assert w._ddtree_mask_buf is buffer and smaller.data_ptr() == buffer.data_ptr()
    assert smaller.numel() == n * 12 + n * n
    larger = w._verify_mask_out(2, torch.tensor([40, 40]), n)
    assert w._ddtree_mask_buf is not buffer
    assert w._ddtree_mask_buf.numel() == max(larger.numel(), 2 * buffer.numel())
    assert larger.numel() == n * 80 + 2 * n * n


def test_the_rounds_verify_reads_its_mask_from_the_persistent_buffer(monkeypatch):
    # Every round's custom_mask is a view of the worker's one buffer, never a new tensor.
    masks = []
    build = RecordingWorker._build_verify_input

    def recording(self, *args, **kwargs):
        verify_input, cache_loc = build(self, *args, **kwargs)
        masks.append((verify_input.custom_mask, self._ddtree_mask_buf))
        return verify_input, cache_loc

    monkeypatch.setattr(RecordingWorker, "_build_verify_input", recording)
    run_rounds(prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=True, rounds=3)
    assert len(masks) == 3
    for mask, buffer in masks:
        assert mask.data_ptr() == buffer.data_ptr() and mask.numel() <= buffer.numel()


def test_requests_ddtree_cannot_serve_never_reach_the_round():
    w, _ = make_worker(bs=1, budget=8, block_size=4, topk=4)
    batch = make_batch([[1, 2]], torch.tensor([3]), torch.tensor([2]))
    batch.has_grammar = True
    with pytest.raises(RuntimeError, match="should have rejected"):
        w.forward_batch_generation(batch)


def test_prefill_and_idle_batches_are_dflashs(monkeypatch):
    seen = []
    monkeypatch.setattr(
        worker_mod.DFlashWorkerV2, "forward_batch_generation",
        lambda self, batch, on_publish=None, grammar_barrier=None, **_: seen.append(batch.forward_mode) or "dflash",
    )
    w, _ = make_worker(bs=1, budget=8, block_size=4, topk=4)
    for mode in (ForwardMode.EXTEND, ForwardMode.IDLE):
        batch = make_batch([[1]], torch.tensor([2]), torch.tensor([1]))
        batch.forward_mode = mode
        assert w.forward_batch_generation(batch) == "dflash"
    assert seen == [ForwardMode.EXTEND, ForwardMode.IDLE]


@pytest.mark.skipif(not hasattr(budget_mod.BudgetPolicy, "interrupted"),
                    reason="this tree's auto policy does not hear of prefills")
def test_a_prefill_between_decode_rounds_is_not_timed_as_one(monkeypatch):
    monkeypatch.setattr(worker_mod.DFlashWorkerV2, "forward_batch_generation",
                        lambda self, batch, on_publish=None, grammar_barrier=None, **_: "dflash")
    w, _ = make_worker(bs=1, budget=31, block_size=8, topk=16, auto_widths=(8, 16, 32),
                       costs=_costs((8, 16, 32), (4.0, 4.0, 40.0)))
    w._policy.period_lag = 0  # without the overlap scheduler: the next start would time this round
    w._policy.round_started(1.0)
    w._policy.choose(1)
    batch = make_batch([[1]], torch.tensor([2]), torch.tensor([1]))
    batch.forward_mode = ForwardMode.EXTEND
    w.forward_batch_generation(batch)
    w._policy.round_started(9.0)  # eight seconds later, a prefill in between: no decode round's period
    assert w._policy.model.observations == 0 and w._policy._last_start == 9.0


def test_hybrid_targets_commit_the_state_of_the_last_accepted_tree_node(monkeypatch):
    # The tree-aware commit gets the flat accept index: its step index is the accepted *node*.
    calls = []

    class HybridBackend:
        def update_mamba_state_after_mtp_verify(self, **kwargs):
            calls.append(kwargs)

    monkeypatch.setattr(spec_utils, "mambaish_config", lambda config: object())
    monkeypatch.setattr(worker_mod, "prepare_mamba_track_for_verify", lambda batch: calls.append("track"))
    w, models = make_worker(bs=len(PROMPTS), budget=16, block_size=8, topk=16)
    w._need_mamba_verify_commit = True
    w._target_worker.model_runner.attn_backend = HybridBackend()
    w._target_worker.model_runner.model_config = SimpleNamespace()
    w._target_worker.model_runner.req_to_token_pool = SimpleNamespace()
    store, req_to_token = models.store, models.req_to_token
    for b, prompt in enumerate(PROMPTS):
        store.token[req_to_token[b, : len(prompt)]] = torch.tensor(prompt)
        store.position[req_to_token[b, : len(prompt)]] = torch.arange(len(prompt))
    batch = make_batch(PROMPTS, None, torch.tensor([len(p) for p in PROMPTS]))
    batch.req_to_token_pool = w.model_runner.req_to_token_pool
    bonus = torch.tensor([target_next(p) for p in PROMPTS])
    batch.spec_info = DFlashDraftInputV2(
        topk_p=torch.empty((4, 0)), topk_index=torch.empty((4, 0), dtype=torch.long),
        bonus_tokens=bonus, new_seq_lens=batch.seq_lens.clone(), hidden_states=torch.empty((4, 0)),
    )
    result = w.forward_batch_generation(batch)
    assert calls[0] == "track"
    commit = calls[1]
    spec = models.verify_calls[-1].spec_info
    n = w.verify_width
    last = commit["last_correct_step_indices"]
    assert last.shape == (4,) and int(last.max()) < n
    tokens = spec.draft_token.view(4, n)
    for b in range(4):
        c = int(result.accept_lens[b])
        # The node at that index carries the last committed drafted token (or the root).
        expected = int(bonus[b]) if c == 1 else int(result.next_token_ids.view(4, -1)[b, c - 2])
        assert int(tokens[b, int(last[b])]) == expected


@MASKS
@pytest.mark.parametrize("overlap", [False, True], ids=["non-overlap", "overlap"])
@pytest.mark.parametrize("sampling", [None, (0.9, 1234)], ids=["greedy", "seeded-sampling"])
def test_rounds_at_changing_widths_reproduce_autoregressive_decoding(overlap, sampling, compact_mask):
    # auto cuts the widest tree (B = 31) to the width the policy picks, round by round: every
    # cut is a valid tree, the mask, walk, KV compaction and draft hand-off follow the width
    # (a compact mask is the cut tree's own strided visibility).
    widths = [8, 32, 16, 8, 16, 32]
    outputs, accept_lengths, w = run_rounds(
        prompts=PROMPTS, budget=31, block_size=8, topk=16, overlap=overlap, rounds=6, sampling=sampling,
        widths=widths, auto_widths=(8, 16, 32), costs=budget_mod.CostTable(), compact_mask=compact_mask,
    )
    for prompt, out in zip(PROMPTS, outputs):
        assert out == ar_reference(prompt, len(out), sampling)
    assert w.models.widths == widths
    assert all(c <= 8 for c in accept_lengths)  # never past the draft block


def _costs(widths, verify_ms):
    table = budget_mod.CostTable()
    for width, ms in zip(widths, verify_ms):
        for bs in (1, 2, 4, 8):
            table.add(width, bs, ms)
    return table


def test_auto_verifies_the_width_the_policy_prefers_and_learns_from_the_rounds():
    widths = (8, 16, 32)
    # One accept table for every width (B 7/15/31 -> 3/5/6 tokens); the 16-wide verify is the
    # cheapest per committed token: every round takes it, and with a table no round measures the
    # tree's own expectations.
    table = {7: 3.0, 15: 5.0, 31: 6.0}
    outputs, _, w = run_rounds(prompts=PROMPTS, budget=31, block_size=8, topk=16, overlap=True, rounds=5,
                               auto_widths=widths, costs=_costs(widths, (4.0, 4.0, 40.0)), accept_model=table)
    for prompt, out in zip(PROMPTS, outputs):
        assert out == ar_reference(prompt, len(out))
    assert set(w._policy.chosen) == {16} and w._policy.chosen[16] == 5 and set(w.models.widths) == {16}
    assert w._policy.expected == {}
    # Without a table the first round of every STATS_EVERY grows the widest tree: its expectations
    # come back (STATS_LAG rounds late, through the pinned copy), one per width, larger for a larger
    # tree, and the measured acceptance moves the calibration.
    outputs, _, w = run_rounds(prompts=PROMPTS, budget=31, block_size=8, topk=16, overlap=True, rounds=5,
                               auto_widths=widths, costs=_costs(widths, (4.0, 4.0, 40.0)))
    for prompt, out in zip(PROMPTS, outputs):
        assert out == ar_reference(prompt, len(out))
    assert set(w.models.widths) == {16}
    expected = [w._policy.expected[width] for width in widths]
    assert expected == sorted(expected) and expected[0] > 0
    assert w._policy.calibration != 1.0


@pytest.mark.skipif(not hasattr(worker_mod, "POLICY_LOG_EVERY"), reason="this tree's auto logs no summary")
def test_auto_logs_its_choices_probes_and_cost_model_every_so_many_rounds(monkeypatch, caplog):
    monkeypatch.setattr(worker_mod, "POLICY_LOG_EVERY", 2)
    widths = (8, 16, 32)
    with caplog.at_level("INFO", logger=worker_mod.logger.name):
        run_rounds(prompts=PROMPTS, budget=31, block_size=8, topk=16, overlap=False, rounds=5,
                   auto_widths=widths, costs=_costs(widths, (4.0, 4.0, 40.0)), accept_model={7: 3.0, 15: 5.0, 31: 6.0})
    lines = [r.getMessage() for r in caplog.records if "DDTREE auto budget: rounds by width" in r.getMessage()]
    assert len(lines) == 2 and "{16: 4}" in lines[-1] and "model from" in lines[-1]


def test_an_auto_round_drafts_the_candidates_of_its_own_width(monkeypatch):
    widths = (8, 16, 32)
    asked = []
    compute = worker_mod._DDTreeDraftTopK.compute

    def recording(head, hidden_states, k=None):
        asked.append(k)
        return compute(head, hidden_states, k=k)

    monkeypatch.setattr(worker_mod._DDTreeDraftTopK, "compute", recording)
    run_rounds(prompts=PROMPTS, budget=31, block_size=8, topk=16, overlap=False, rounds=3,
               auto_widths=widths, costs=_costs(widths, (4.0, 4.0, 40.0)), accept_model={7: 3.0, 15: 5.0, 31: 6.0})
    assert asked == [15, 15, 15]  # K = n - 1 for the 16-wide rounds, not the widest tree's 16


def test_without_a_cost_table_auto_verifies_the_chains_width():
    w, _ = make_worker(bs=1, budget=31, block_size=8, topk=16)
    w.auto_widths = (8, 16, 32)
    w.model_runner.decode_cuda_graph_runner = None
    w._init_budget_policy()
    assert w._policy is None and w._round_width(4) == 8


def test_a_round_without_a_built_head_takes_the_draft_samplers():
    def sampler_only(w):
        w._draft_sampler, w._draft_topk = w._draft_topk, None  # no graph ran: the sampler's head is the head

    outputs, _, w = run_rounds(prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=False, rounds=2,
                               setup=sampler_only)
    assert w._draft_topk is w._draft_sampler
    for prompt, out in zip(PROMPTS, outputs):
        assert out == ar_reference(prompt, len(out))


def test_a_draft_whose_cuda_graph_ran_hands_the_round_its_fused_top_k():
    """With a draft CUDA graph, the top-K head is the graph's tail hook (``_maybe_build_draft_sampler``): it
    writes its static buffers inside the graph, and the round reads them instead of the hidden states. Here
    the toy draft forward runs the hook as the graph would and reports that the graph ran, with no hidden
    states left to read."""

    def graph_tail(w):
        w._draft_sampler, w._draft_topk = w._draft_topk, None
        forward = w.draft_model_runner.forward

        def replay(forward_batch):
            out = forward(forward_batch)
            w._draft_sampler(out.logits_output.hidden_states)  # the capture hook, run by the replay
            return SimpleNamespace(logits_output=SimpleNamespace(hidden_states=None), can_run_graph=True)

        w.draft_model_runner = SimpleNamespace(forward=replay)

    outputs, _, w = run_rounds(prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=True, rounds=3,
                               setup=graph_tail)
    assert w._draft_ran_graph and w._draft_topk is None, "nothing but the graph's buffers was read"
    for prompt, out in zip(PROMPTS, outputs):
        assert out == ar_reference(prompt, len(out))


def test_the_triton_draft_block_kernel_prepares_the_block_the_draft_reads(monkeypatch):
    """Where GPU Triton runs, the draft block (``[bonus, mask x (L-1)]``, its positions, its KV slots) is one
    SGLang kernel (``_prepare_dflash_draft_block_unchecked``); here it runs in Triton's interpreter, and the
    toy draft checks every block, position and slot it is handed."""
    from sglang.kernels.ops.speculative import dflash as dflash_kernels
    from _kernel_helpers import interpreted_copy

    interpreted = interpreted_copy(dflash_kernels, monkeypatch, triton_on_cpu=False)
    monkeypatch.setattr(worker_mod, "_prepare_dflash_draft_block_unchecked",
                        interpreted._prepare_dflash_draft_block_unchecked)
    monkeypatch.setattr(worker_mod, "assign_extend_cache_locs_func",
                        lambda **kwargs: pytest.fail("the kernel fills the slots"))

    def triton_block(w):
        w._use_triton_prepare_block = True

    outputs, _, _ = run_rounds(prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=False, rounds=2,
                               setup=triton_block)
    for prompt, out in zip(PROMPTS, outputs):
        assert out == ar_reference(prompt, len(out))


def _drafts_no_hidden_states(w):
    w.draft_model_runner = SimpleNamespace(forward=lambda forward_batch: SimpleNamespace(
        logits_output=SimpleNamespace(hidden_states=None), can_run_graph=False))


def _verifies_without_hidden_states(w):
    forward = w._target_worker.forward_batch_generation

    def blind(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.logits_output.hidden_states = None
        return out
    w._target_worker = SimpleNamespace(model_runner=w._target_worker.model_runner, forward_batch_generation=blind)


@pytest.mark.parametrize(("setup", "message"), [
    (_drafts_no_hidden_states, "DDTREE draft model returned no hidden states"),
    (_verifies_without_hidden_states, "DDTREE verify requires target hidden states"),
])
def test_a_model_that_returns_no_hidden_states_stops_the_round(setup, message):
    with pytest.raises(RuntimeError, match=message):
        run_rounds(prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=False, rounds=1, setup=setup)


def test_a_batch_without_the_dflash_draft_state_is_refused():
    w, _ = make_worker(bs=1, budget=8, block_size=4, topk=8)
    with pytest.raises(RuntimeError, match="expected DFlashDraftInputV2 state"):
        w._forward_decode(SimpleNamespace(spec_info=object()), None)


def test_the_host_prefix_bound_from_the_reserved_lengths_is_clamped_to_the_context():
    w, _ = make_worker(bs=2, budget=8, block_size=4, topk=8)
    reserved = SimpleNamespace(**{RESERVED_LENS: torch.tensor([7, 900], dtype=torch.int32)})
    bound = w._host_prefix_bound(SimpleNamespace(seq_lens_cpu=None), reserved)
    assert bound.tolist() == [7, CTX - 9]  # clamped to the context length


@pytest.mark.parametrize(("broken", "sampling", "calls"), [(True, (0.9, 1234), 2), (True, None, 0), (False, (0.9, 1234), 0)])
def test_the_test_only_broken_rule_runs_only_on_sampled_rounds_when_asked(monkeypatch, broken, sampling, calls):
    seen = []
    rule = worker_mod._broken_acceptance
    monkeypatch.setattr(worker_mod, "_TEST_BROKEN_ACCEPT", broken)
    monkeypatch.setattr(worker_mod, "_broken_acceptance", lambda tree, tokens: seen.append(1) or rule(tree, tokens))
    run_rounds(prompts=PROMPTS, budget=16, block_size=8, topk=16, overlap=False, rounds=2, sampling=sampling)
    assert len(seen) == calls


@pytest.mark.skipif(not hasattr(worker_mod.DDTreeWorkerV2, "_warm_topk_widths"),
                    reason="this tree warms every round kernel variant instead (test_ddtree_round_kernel_warmup.py)")
def test_auto_compiles_the_top_k_of_every_width_at_start(monkeypatch):
    # Each auto width drafts its own K (n - 1, at most the head's): the set-up runs the head once per width so
    # that no round compiles a top-K variant while serving.
    asked = []
    compute = worker_mod._DDTreeDraftTopK.compute

    def recording(head, hidden_states, k=None):
        asked.append((k, tuple(hidden_states.shape)))
        return compute(head, hidden_states, k=k)

    monkeypatch.setattr(worker_mod._DDTreeDraftTopK, "compute", recording)
    w, _ = make_worker(bs=1, budget=31, block_size=8, topk=16, auto_widths=(8, 16, 32),
                       costs=budget_mod.CostTable())
    head, built = w._draft_topk, []
    w._draft_topk = None  # no eager head yet: the set-up builds it for one request
    w._ddtree_topk_head = lambda *, max_bs: built.append(max_bs) or head
    w._warm_topk_widths()
    assert built == [1] and w._draft_topk is head
    assert [k for k, _ in asked] == [7, 15, 16]
    assert all(shape == (7, V) for _, shape in asked)  # the L - 1 drafted rows of one request


# ---------------------------------------------------------------- the test-only broken rule, on every path

class FlashAttentionBackend:
    """The target attention backend of the compact-mask path, by fa3's class name."""


#: Every path a sampled round takes to its accept: run_rounds arguments, and the width of each round.
BROKEN_RULE_PATHS = {
    "fixed-8": (dict(budget=7, block_size=8, topk=7), [8, 8, 8]),
    "fixed-16": (dict(budget=15, block_size=8, topk=15), [16, 16, 16]),
    "fixed-32": (dict(budget=31, block_size=8, topk=16), [32, 32, 32]),
    # auto at each width it can choose: K = n - 1 drafted, the (n - 1)-node tree built directly (an accept
    # table, so no round is a statistics round)
    **{f"auto-{n}": (dict(budget=31, block_size=8, topk=16, widths=[n], auto_widths=(8, 16, 32),
                          costs=budget_mod.CostTable(), accept_model={7: 3.0, 15: 5.0, 31: 6.0}), [n, n, n])
       for n in (8, 16, 32)},
    # auto without a table: round 0 grows the widest tree for the statistics, cut to the round's width
    "auto-statistics-round": (dict(budget=31, block_size=8, topk=16, widths=[8], auto_widths=(8, 16, 32),
                                   costs=budget_mod.CostTable()), [8, 8, 8]),
}


@MASKS
@pytest.mark.parametrize("path", list(BROKEN_RULE_PATHS))
@pytest.mark.parametrize("broken", [True, False], ids=["broken", "correct"])
def test_the_broken_rule_acts_on_every_path_that_accepts_tokens(monkeypatch, path, broken, compact_mask):
    # SGLANG_DDTREE_TEST_BROKEN_ACCEPT must reach every sampled round, whatever chose its width and tree and
    # whichever mask the verify read (triton's FULL_MASK, fa3's compact mask): the walk takes the rule's
    # tokens, and the output leaves seeded autoregressive sampling; without it the same rounds reproduce it.
    arguments, widths = BROKEN_RULE_PATHS[path]
    rule, walk = worker_mod._broken_acceptance, worker_mod.ddtree_verify_round
    ruled, walked, stats_rounds = [], [], []

    def recording_rule(tree, tokens):
        out = rule(tree, tokens)
        ruled.append((tree.num_verify_tokens, tuple(tokens.shape), out))
        return out

    def recording_walk(tree, *args, **kwargs):
        walked.append(kwargs.get("target_tokens"))
        return walk(tree, *args, **kwargs)

    def backend(w):
        if compact_mask:
            w.model_runner.attn_backend = FlashAttentionBackend()

    queue = RecordingWorker._queue_budget_stats
    monkeypatch.setattr(RecordingWorker, "_queue_budget_stats",
                        lambda self, tree: stats_rounds.append(tree.num_verify_tokens) or queue(self, tree))
    monkeypatch.setattr(worker_mod, "_TEST_BROKEN_ACCEPT", broken)
    monkeypatch.setattr(worker_mod, "_broken_acceptance", recording_rule)
    monkeypatch.setattr(worker_mod, "ddtree_verify_round", recording_walk)
    torch.manual_seed(0)  # the rule's coin flips
    outputs, _, w = run_rounds(prompts=PROMPTS, overlap=False, rounds=3, sampling=(0.9, 1234), setup=backend,
                               compact_mask=compact_mask, **arguments)
    assert w.models.widths == widths
    if path == "auto-statistics-round":
        assert stats_rounds == [32]  # the widest tree, built for the statistics, then cut to the round's 8
    reference = [ar_reference(prompt, len(out), sampling=(0.9, 1234))
                 for prompt, out in zip(PROMPTS, outputs, strict=True)]
    if not broken:
        assert ruled == [] and outputs == reference
        return
    assert [(n, shape) for n, shape, _ in ruled] == [(n, (len(PROMPTS), n)) for n in widths]
    assert all(torch.equal(tokens, out) for tokens, (_, _, out) in zip(walked, ruled, strict=True))
    assert outputs != reference  # the rule changed what was accepted


def _self_calls(function: ast.FunctionDef) -> set[str]:
    return {n.func.attr for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}


def _name_calls(function: ast.FunctionDef) -> set[str]:
    return {n.func.id for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def test_one_method_accepts_the_serving_rounds_tokens_and_holds_the_broken_rule():
    # A path that accepted tokens elsewhere (another backend's verify, say) would escape the rule: of every
    # method a decode round reaches, only DDTreeWorkerV2._verify_round calls the walk, and the rule is
    # called there and nowhere else in the worker module.
    module = ast.parse(inspect.getsource(worker_mod))
    worker = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "DDTreeWorkerV2")
    methods = {n.name: n for n in worker.body if isinstance(n, ast.FunctionDef)}
    reached, todo = set(), ["forward_batch_generation"]
    while todo:
        name = todo.pop()
        if name in methods and name not in reached:
            reached.add(name)
            todo += sorted(_self_calls(methods[name]))
    assert {"_forward_decode", "_verify_round"} <= reached
    walking = {name for name in reached if "ddtree_verify_round" in _name_calls(methods[name])}
    assert walking == {"_verify_round"}
    functions = [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)]
    assert [f.name for f in functions if "_broken_acceptance" in _name_calls(f)] == ["_verify_round"]


# ---------------------------------------------------------------- rounds and tokens that went through the tree

tree_usage = pytest.mark.skipif(not hasattr(worker_mod, "ddtree_tree_usage"),
                                reason="this tree's worker does not count tree rounds (ddtree_tree_usage)")


def _tree(parents: list[int]):
    real = sum(p >= 0 for p in parents)  # the root's parent and the padding's are -1
    return SimpleNamespace(parents=torch.tensor([parents]), num_nodes=torch.tensor([real]))


def _accept(path: list[int], depth: int = 4):
    index = path + [-1] * (depth + 1 - len(path))
    return SimpleNamespace(accept_index=torch.tensor([index]), accept_length=torch.tensor([len(path) - 1]))


@tree_usage
@pytest.mark.parametrize(("parents", "path", "counts"), [
    ([-1, 0, 1, 2], [0, 1, 2, 3], [0, 0, 0, 3]),  # a chain: nothing branched, every token on it
    ([-1, 0, 0, 1, 2], [0, 1, 3], [1, 0, 0, 2]),  # branched, the path stayed on the first children
    ([-1, 0, 0, 1, 2], [0, 2, 4], [1, 1, 2, 2]),  # took the root's second child: both tokens off the chain
    ([-1, 0, 1, 1, 3], [0, 1, 3, 4], [1, 1, 2, 3]),  # left the chain at depth 2: the last two tokens
    ([-1, 0, 0, -1, -1], [0], [1, 0, 0, 0]),  # padding (parent -1) is no sibling of anything
    ([-1, 0, 1, -1, -1], [0, 1, 2], [0, 0, 0, 2]),  # a padded chain
])
def test_tree_usage_counts_branched_trees_and_tokens_off_the_chain(parents, path, counts):
    usage = worker_mod.ddtree_tree_usage(_tree(parents), _accept(path))
    assert usage.tolist() == counts and worker_mod.TREE_USAGE_FIELDS[1] == "off_chain"


@tree_usage
def test_timed_rounds_carry_the_tree_counts_and_a_chain_shows_none(tmp_path):
    # With the phase timer on, each DDTREE round's line says how many requests verified a branching tree
    # and accepted tokens a chain would not have; a one-wide tree (K = 1, DFLASH's chain) shows none.
    def timed(w):
        w._phases = phase_mod.RoundPhaseTimer("DDTREE", str(tmp_path / f"{w.ddtree_topk}.jsonl"), "cpu")

    lines = {}
    for topk in (16, 1):
        budget = 16 if topk > 1 else 7
        _, lengths, w = run_rounds(prompts=PROMPTS, budget=budget, block_size=8, topk=topk, overlap=True, rounds=4,
                                   setup=timed)
        w._phases.flush()
        w._phases.start(1)  # a later round reads the last one back
        w._phases.flush()
        lines[topk] = [json.loads(line) for line in (tmp_path / f"{topk}.jsonl").read_text().splitlines()]
        assert len(lines[topk]) == 4 and all(len(line["tree"]) == 4 for line in lines[topk])
        totals = [sum(line["tree"][i] for line in lines[topk]) for i in range(4)]
        assert totals[3] == sum(lengths) - len(lengths)  # every drafted token accepted (commits less the bonus)
    tree_totals = [sum(line["tree"][i] for line in lines[16]) for i in range(4)]
    assert tree_totals[0] == 4 * len(PROMPTS)  # every tree branched
    assert tree_totals[1] > 0 and 0 < tree_totals[2] <= tree_totals[3]  # the drafter's top-1 is wrong at times
    chain_totals = [sum(line["tree"][i] for line in lines[1]) for i in range(4)]
    assert chain_totals[:3] == [0, 0, 0] and chain_totals[3] > 0
