"""CPU tests of the patched tree's DDTREE verify input, request gate, predicates and graph sites.

Everything here is the tree's own code (DDTreeVerifyInput, the graph runner's capture and replay
sites, the dummy warmup input, the scheduler's request gate, the algorithm predicates), run on CPU
tensors. `patchkit verify --gate tests` runs it in the [verify.env] environment, once for each set
whose tree carries ddtree_info_v2; where the bases' SGLang differs, the test reads the tree's release
(``RELEASE``).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from sglang_tree import tree_release

ddtree_info_v2 = pytest.importorskip("sglang.srt.speculative.ddtree_info_v2")
from sglang.srt.managers.schedule_batch import Req  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode  # noqa: E402
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import (  # noqa: E402
    DecodeCudaGraphRunner,
)
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative import spec_info as spec_info_mod  # noqa: E402
from sglang.srt.speculative.ddtree_utils import (  # noqa: E402
    build_ddtree_tree_from_topk,
    ddtree_commit_round,
    ddtree_custom_mask,
    ddtree_follow_verified,
    ddtree_topk_from_logits,
)
from sglang.srt.speculative.dflash_info import DFlashVerifyInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpecInputType, SpeculativeAlgorithm  # noqa: E402
from sglang.srt.speculative.spec_registry import CustomSpecAlgo  # noqa: E402

DDTreeVerifyInput = ddtree_info_v2.DDTreeVerifyInput
RELEASE = tree_release()
#: 0.5.23's graph runner and dummy-input factory read topk and widths from the published spec bag
#: (runtime_context.get_spec), 0.5.17's from server_args.
SPEC_BAG = RELEASE >= (0, 5, 23)


def random_tree(bs=3, depth=4, vocab=7, budget=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(bs, depth, vocab, generator=gen) * 2
    return build_ddtree_tree_from_topk(*ddtree_topk_from_logits(logits, min(budget, vocab)), budget)


# ---------------------------------------------------------------- DDTreeVerifyInput


def test_verify_input_is_a_masked_dflash_verify_input_of_width_b_plus_one():
    tree = random_tree()
    seq_lens = torch.tensor([5, 0, 9])
    n = tree.num_verify_tokens
    mask = torch.ones(ddtree_info_v2.ddtree_mask_numel(n, int(seq_lens.sum()) + 6, 3), dtype=torch.bool)
    vi = DDTreeVerifyInput.from_tree(
        tree=tree, root_tokens=torch.tensor([4, 5, 6]), seq_lens=seq_lens, custom_mask=mask, topk=12
    )
    assert isinstance(vi, DFlashVerifyInput)
    assert vi.spec_input_type == SpecInputType.DFLASH_VERIFY and vi.is_verify_input()
    assert vi.draft_token_num == n == 13 and vi.num_tokens_per_req == n
    assert vi.topk == 12 and vi.capture_hidden_mode == CaptureHiddenMode.FULL
    # Root first, then the nodes in heap pop order.
    tokens = vi.draft_token.view(3, n)
    assert tokens[:, 0].tolist() == [4, 5, 6]
    assert torch.equal(tokens[:, 1:], tree.node_token_ids)
    # Positions: seq_len + depth; the mask: exactly the flat FULL_MASK, written into the buffer.
    depths = torch.cat([torch.zeros(3, 1, dtype=torch.long), tree.depths], 1)
    assert torch.equal(vi.positions.view(3, n), seq_lens.unsqueeze(1) + depths)
    expected = ddtree_custom_mask(tree, seq_lens, int(seq_lens.sum()))
    assert vi.custom_mask is mask
    assert torch.equal(mask[: expected.numel()], expected) and bool(mask[expected.numel():].all())
    assert vi.retrieve_next_token.shape == (3, n) and vi.retrieve_next_sibling.shape == (3, n)


@pytest.mark.skipif(SPEC_BAG, reason="0.5.23: generate_attn_arg_prefill is read only by the FlashInfer and aiter "
                    "backends, both refused for DDTREE, and takes a KV-index translator and plan")
def test_generate_attn_arg_prefill_keeps_the_tree_mask(monkeypatch):
    # The inherited FlashInfer/metadata path hands the same mask on (padding rows see all).
    from sglang.srt.speculative import dflash_info

    calls = []

    class _Kernel:
        def __getitem__(self, grid):
            def run(*args):
                calls.append(grid)
            return run

    monkeypatch.setattr(dflash_info, "create_flashinfer_kv_indices_triton", _Kernel())
    tree = random_tree(bs=2)
    seq_lens = torch.tensor([3, 4])
    n = tree.num_verify_tokens
    mask = torch.ones(ddtree_info_v2.ddtree_mask_numel(n, 7, 2), dtype=torch.bool)
    vi = DDTreeVerifyInput.from_tree(
        tree=tree, root_tokens=torch.tensor([1, 2]), seq_lens=seq_lens, custom_mask=mask, topk=4
    )
    _, _, qo_indptr, out_mask = vi.generate_attn_arg_prefill(
        torch.tensor([0, 1]), seq_lens.int(), 7, torch.zeros(2, 64, dtype=torch.int32)
    )
    assert calls == [(2,)]
    assert qo_indptr.tolist() == [0, n, 2 * n]
    assert torch.equal(out_mask[: mask.numel()], mask)


# ---------------------------------------------------------------- commit outputs


def test_commit_outputs_follow_the_walk():
    tree = random_tree(bs=3, depth=4, budget=12, seed=3)
    n = tree.num_verify_tokens
    draft = torch.cat([torch.tensor([[50], [51], [52]]), tree.node_token_ids], 1)
    # Target agrees with the draft's first path to depth 2 in request 0, nothing in 1, all in 2.
    target = torch.full((3, n), 99, dtype=torch.long)
    parents = tree.parents
    for b, depth in ((0, 2), (1, 0), (2, 4)):
        node = 0
        for _ in range(depth):
            kids = [i for i in range(1, n) if parents[b, i] == node]
            target[b, node] = draft[b, kids[0]]
            node = kids[0]
        target[b, node] = 77 + b
    accept_index, accept_length, bonus = ddtree_follow_verified(tree, target)
    window = torch.arange(3 * n) + 1000
    commit = ddtree_commit_round(draft, accept_index, accept_length, bonus, window, torch.zeros(3, dtype=torch.int64))
    out, commit_lens, flat = commit.out_tokens, commit.commit_lens, commit.flat_accept_index
    assert accept_length.tolist() == [2, 0, 4] and commit_lens.dtype == torch.int32
    assert commit_lens.tolist() == [3, 1, 5]
    assert out.shape == (3, 5)  # stride L = depth_limit + 1
    for b in range(3):
        path = accept_index[b, 1 : 1 + int(accept_length[b])].tolist()
        assert out[b, : len(path)].tolist() == draft[b, path].tolist()
        assert out[b, len(path)] == 77 + b
        valid = accept_index[b] >= 0
        assert torch.equal(flat[b][valid], accept_index[b][valid] + b * n)
        assert bool((flat[b][~valid] == -1).all())
    assert commit.path_rows.shape == (15,) and int(commit.path_rows.min()) >= 0


# ---------------------------------------------------------------- per-node target tokens


def _sampling_info(bs, temperature, top_k=-1, top_p=1.0, min_p=0.0, seeds=None):
    tk = top_k if top_k > 0 else 1 << 30
    return SimpleNamespace(
        is_all_greedy=False,
        temperatures=torch.full((bs, 1), float(temperature)),
        top_ks=torch.full((bs,), tk, dtype=torch.int32),
        top_ps=torch.full((bs,), float(top_p)),
        min_ps=torch.full((bs,), float(min_p)),
        need_top_k_sampling=top_k > 0,
        need_top_p_sampling=top_p < 1.0,
        need_min_p_sampling=min_p > 0.0,
        sampling_seed=seeds,
    )


def test_greedy_target_tokens_are_the_argmax():
    logits = torch.randn(12, 30)
    out = ddtree_info_v2.sample_ddtree_target_tokens(
        logits=logits, sampling_info=None, positions=torch.arange(12), num_verify_tokens=4
    )
    assert torch.equal(out, logits.argmax(-1))


@pytest.fixture(autouse=True)
def _cpu_row_argmax(monkeypatch):
    # 0.5.23's fast_sample (the Gumbel-max draw) takes the row argmax with a Triton kernel that has
    # no CPU path; torch's argmax is what it computes.
    if SPEC_BAG:
        from sglang.srt.speculative import spec_utils

        monkeypatch.setattr(spec_utils, "row_argmax", lambda x: x.argmax(dim=-1))


@pytest.mark.parametrize("kwargs", [dict(), dict(top_k=3), dict(top_p=0.6), dict(min_p=0.3)])
def test_sampled_target_tokens_follow_the_filtered_distribution(kwargs):
    torch.manual_seed(0)
    vocab, n = 6, 2
    base = torch.tensor([2.0, 1.5, 1.0, 0.2, -1.0, -3.0])
    logits = base.repeat(n * 4000, 1)
    info = _sampling_info(4000, 0.8, **kwargs)
    out = ddtree_info_v2.sample_ddtree_target_tokens(
        logits=logits, sampling_info=info, positions=torch.arange(n * 4000), num_verify_tokens=n
    )
    probs = torch.softmax(base / 0.8, -1)
    sorted_p, order = probs.sort(descending=True)
    keep = torch.ones(vocab, dtype=torch.bool)
    if "top_k" in kwargs:
        keep[kwargs["top_k"]:] = False
    if "top_p" in kwargs:
        keep &= (sorted_p.cumsum(0) - sorted_p) <= kwargs["top_p"]
    if "min_p" in kwargs:
        keep &= sorted_p >= sorted_p[0] * kwargs["min_p"]
    expected = torch.zeros(vocab)
    expected[order[keep]] = sorted_p[keep] / sorted_p[keep].sum()
    freq = torch.bincount(out, minlength=vocab).float() / out.numel()
    assert torch.allclose(freq, expected, atol=0.02), (freq, expected)


def test_seeded_target_tokens_are_keyed_on_position(monkeypatch):
    # Same seed and position -> same draw, wherever the node sits in the verify row: a committed
    # token equals what seeded autoregressive decoding draws at that position. The hash is a
    # Triton kernel; on CPU a torch hash of the same (seed, position, column) stands in.
    from sglang.srt.layers import sampler

    def torch_hash(seed, positions, cols):
        mixed = seed.view(-1, 1).long() * 1000003 + positions.view(-1, 1).long() * 7919 + cols.view(1, -1)
        return (mixed * 2654435761) % (1 << 32)

    monkeypatch.setattr(sampler, "murmur_hash32", torch_hash)
    logits = torch.randn(1, 50).repeat(6, 1)
    info = _sampling_info(2, 1.0, seeds=torch.tensor([7, 7]))
    positions = torch.tensor([10, 11, 12, 12, 11, 10])
    out = ddtree_info_v2.sample_ddtree_target_tokens(
        logits=logits, sampling_info=info, positions=positions, num_verify_tokens=3
    )
    assert out[0] == out[5] and out[1] == out[4] and out[2] == out[3]


# ---------------------------------------------------------------- the request gate


def _req(**params):
    extra = {k: params.pop(k) for k in ("return_logprob", "return_hidden_states", "custom_logit_processor") if k in params}
    return Req("r", "", [1, 2, 3], SamplingParams(max_new_tokens=4, **params), vocab_size=100, **extra)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(return_logprob=True), "return_logprob"),
        (dict(return_hidden_states=True), "return_hidden_states"),
        (dict(json_schema='{"type": "object"}'), "constrained decoding (json_schema)"),
        (dict(regex="a+"), "constrained decoding (regex)"),
        (dict(ebnf="root ::= 'a'"), "constrained decoding (ebnf)"),
        (dict(custom_logit_processor="{}"), "custom_logit_processor"),
        (dict(frequency_penalty=0.5), "penalties"),
        (dict(presence_penalty=0.5), "penalties"),
        (dict(repetition_penalty=1.2), "penalties"),
        (dict(min_new_tokens=2), "min_new_tokens"),
    ],
)
def test_gate_refuses_what_the_tree_verify_cannot_serve(kwargs, message):
    error = ddtree_info_v2.validate_ddtree_request(_req(**kwargs))
    assert error is not None and error.startswith("DDTREE") and message in error


@pytest.mark.parametrize("kwargs", [dict(), dict(temperature=0.7, top_p=0.9, top_k=20, min_p=0.05), dict(logit_bias={"3": 1.0})])
def test_gate_serves_plain_greedy_and_sampled_requests(kwargs):
    assert ddtree_info_v2.validate_ddtree_request(_req(**kwargs)) is None


def test_scheduler_routes_ddtree_requests_through_the_ddtree_gate():
    import inspect

    from sglang.srt.managers import scheduler

    assert scheduler.validate_ddtree_request is ddtree_info_v2.validate_ddtree_request
    source = inspect.getsource(scheduler.Scheduler)
    assert "validate_ddtree_request(req)" in source and "if self.spec_algorithm.is_ddtree()" in source


# ---------------------------------------------------------------- predicates and dispatch


def test_ddtree_is_in_the_dflash_family_but_not_dflash():
    algo = SpeculativeAlgorithm.from_string("ddtree")
    assert algo is SpeculativeAlgorithm.DDTREE and algo.is_ddtree()
    assert algo.is_dflash_family() and not algo.is_dflash() and not algo.is_dspark()
    assert algo.supports_target_verify_for_draft()  # the draft runner is DFLASH's block runner
    assert not algo.supports_grammar_overlap()  # grammar requests are refused
    assert algo.has_draft_kv() and not algo.need_topk() and not algo.carries_draft_hidden_states()
    # The family as upstream has it is unchanged for the others.
    assert SpeculativeAlgorithm.DFLASH.is_dflash_family() and SpeculativeAlgorithm.DSPARK.is_dflash_family()
    assert SpeculativeAlgorithm.DFLASH.supports_grammar_overlap()
    assert not SpeculativeAlgorithm.EAGLE.is_ddtree()


def test_create_worker_dispatches_ddtree_before_dflash():
    from sglang.srt.speculative.ddtree_worker_v2 import DDTreeWorkerV2
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    args = SimpleNamespace(enable_multi_layer_eagle=False)
    assert SpeculativeAlgorithm.DDTREE.create_worker(args) is DDTreeWorkerV2
    assert SpeculativeAlgorithm.DFLASH.create_worker(args) is DFlashWorkerV2
    assert issubclass(DDTreeWorkerV2, DFlashWorkerV2)


def test_handle_server_args_dispatches_ddtree_to_its_own_handler(monkeypatch):
    from sglang.srt.arg_groups import speculative_hook

    seen = []
    monkeypatch.setattr(speculative_hook, "_handle_ddtree", lambda a: seen.append("ddtree"))
    monkeypatch.setattr(speculative_hook, "_handle_dflash", lambda a: seen.append("dflash"))
    SpeculativeAlgorithm.DDTREE.handle_server_args(SimpleNamespace())
    SpeculativeAlgorithm.DFLASH.handle_server_args(SimpleNamespace())
    assert seen == ["ddtree", "dflash"]


def test_plugin_algorithms_still_conform_to_the_duck_typed_interface():
    from sglang.srt.speculative import spec_registry

    assert CustomSpecAlgo("X", lambda a: object).is_ddtree() is False
    spec_registry._assert_custom_spec_algo_conforms(CustomSpecAlgo)  # raises if is_ddtree were missing
    with pytest.raises(ValueError, match="reserved"):
        SpeculativeAlgorithm.register("DDTREE")(lambda a: object)


# ---------------------------------------------------------------- CUDA-graph capture / replay sites


def _runner(is_draft_worker: bool, width: int):
    model_runner = SimpleNamespace(
        spec_algorithm=SpeculativeAlgorithm.DDTREE,
        is_draft_worker=is_draft_worker,
        **({} if SPEC_BAG else {"server_args": SimpleNamespace(speculative_eagle_topk=8)}),
        attn_backend=type("TritonAttnBackend", (), {})(),
    )
    return SimpleNamespace(
        model_runner=model_runner,
        dllm_uses_input_embeds=False,
        dllm_input_preparation=None,
        buffers=SimpleNamespace(custom_mask=torch.ones(64, dtype=torch.bool)),
        captured_req_width=width,
        speculative_num_steps=1,
        speculative_num_draft_tokens=width,
        _capture_ragged_verify_layout=lambda num_tokens: None,
    )


@pytest.fixture
def spec_bag(monkeypatch):
    """The widths the graph runner and the dummy-input factory read: on 0.5.23 from the published spec
    bag (runtime_context.get_spec), stood in for here; on 0.5.17 from server_args (``_runner``'s)."""
    bag = SimpleNamespace(speculative_eagle_topk=8, speculative_num_steps=1, speculative_num_draft_tokens=65)
    if SPEC_BAG:
        from sglang.srt.model_executor.runner import decode_cuda_graph_runner as runner_mod

        monkeypatch.setattr(runner_mod, "get_spec", lambda: bag)
        monkeypatch.setattr(spec_info_mod, "get_spec_config", lambda: bag)
    return bag


def test_target_verify_graph_is_captured_with_the_tree_mask(spec_bag):
    runner = _runner(is_draft_worker=False, width=65)
    spec = DecodeCudaGraphRunner.get_spec_info(runner, num_tokens=65)
    assert isinstance(spec, DDTreeVerifyInput)
    assert spec.custom_mask is runner.buffers.custom_mask  # triton captures in custom-mask mode
    assert spec.draft_token_num == 65 and spec.topk == 8
    assert spec.capture_hidden_mode == CaptureHiddenMode.FULL


def test_draft_runner_graph_keeps_the_mask_free_dflash_block_input(spec_bag):
    runner = _runner(is_draft_worker=True, width=16)
    spec = DecodeCudaGraphRunner.get_spec_info(runner, num_tokens=16)
    assert type(spec) is DFlashVerifyInput and spec.custom_mask is None
    assert spec.draft_token_num == 16 and spec.capture_hidden_mode == CaptureHiddenMode.NULL


def test_replaying_the_target_verify_graph_without_a_mask_is_refused():
    runner = _runner(is_draft_worker=False, width=65)
    forward_batch = SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY,
        spec_info=DDTreeVerifyInput(draft_token=None, positions=None, draft_token_num=65),
    )
    with pytest.raises(RuntimeError, match="without its tree mask"):
        DecodeCudaGraphRunner.load_batch(runner, forward_batch)


def test_dummy_warmup_of_the_target_runs_the_masked_verify(spec_bag):
    args = () if SPEC_BAG else (spec_bag,)  # 0.5.17 hands the widths in; 0.5.23 reads the bag
    mask = torch.ones(8, dtype=torch.bool)
    target = spec_info_mod.create_dummy_verify_input(SpeculativeAlgorithm.DDTREE, *args, mask, 65, False)
    assert isinstance(target, DDTreeVerifyInput) and target.custom_mask is mask
    draft = spec_info_mod.create_dummy_verify_input(SpeculativeAlgorithm.DDTREE, *args, mask, 16, True)
    assert type(draft) is DFlashVerifyInput and draft.custom_mask is None


def test_a_verify_input_without_the_tree_mask_is_refused():
    with pytest.raises(ValueError, match="tree mask"):  # the refusal names what is missing
        ddtree_info_v2.DDTreeVerifyInput.from_verify_inputs(
            tree=SimpleNamespace(), verify=SimpleNamespace(custom_mask=None), root_tokens=torch.zeros(1), topk=2)
