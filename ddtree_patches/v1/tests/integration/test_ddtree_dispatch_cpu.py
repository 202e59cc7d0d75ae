"""DDTREE's dispatch in 0.5.12 on CPU: the algorithm's predicates (built-in and custom algorithms), the
worker ``create_worker`` picks for it and its refusal of the overlap scheduler, and the greedy path of
the per-node target sampler. Each runs the patched tree's own code.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

spec_info = pytest.importorskip("sglang.srt.speculative.spec_info")
from sglang.srt.speculative import ddtree_info, spec_registry  # noqa: E402

SpeculativeAlgorithm = spec_info.SpeculativeAlgorithm


@pytest.mark.parametrize(("name", "ddtree", "family"), [
    ("DDTREE", True, True), ("DFLASH", False, True), ("EAGLE", False, False), ("NGRAM", False, False),
])
def test_the_predicates_tell_ddtree_apart(name, ddtree, family):
    algorithm = SpeculativeAlgorithm.from_string(name)
    assert algorithm.is_ddtree() is ddtree
    assert algorithm.is_dflash_family() is family
    assert algorithm.is_dflash() is (name == "DFLASH")  # DDTREE never runs as a plain DFLASH chain


def test_a_custom_algorithm_is_neither_ddtree_nor_of_the_dflash_family():
    custom = object.__new__(spec_registry.CustomSpecAlgo)
    assert custom.is_ddtree() is False and custom.is_dflash_family() is False


def test_ddtree_runs_on_the_dflash_worker_without_the_overlap_scheduler():
    from sglang.srt.speculative.dflash_worker import DFlashWorker

    ddtree = SpeculativeAlgorithm.from_string("DDTREE")
    assert ddtree.create_worker(SimpleNamespace(disable_overlap_schedule=True)) is DFlashWorker
    with pytest.raises(ValueError, match="does not support overlap scheduling"):
        ddtree.create_worker(SimpleNamespace(disable_overlap_schedule=False))


@pytest.mark.parametrize("sampling_info", [None, SimpleNamespace(is_all_greedy=True)])
def test_greedy_batches_take_the_argmax_at_every_node(sampling_info):
    logits = torch.randn(6, 11, generator=torch.Generator().manual_seed(3))
    tokens = ddtree_info.sample_ddtree_target_tokens(logits=logits, sampling_info=sampling_info, draft_token_num=3,
                                                     positions=torch.arange(6))
    assert torch.equal(tokens, logits.argmax(dim=-1))


class _DraftWorkerBuilt(Exception):
    """Raised by the draft TpModelWorker stand-in once it has recorded what it was given."""


def _ddtree_record(**fields):
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    out = object.__new__(ServerArgs)  # no resolution: it needs the model and a GPU
    for field in dataclasses.fields(ServerArgs):
        if field.default_factory is not dataclasses.MISSING:
            setattr(out, field.name, field.default_factory())
    values = dict(model_path="toy", speculative_algorithm="DDTREE", speculative_draft_model_path="toy-draft",
                  speculative_ddtree_budget=8, speculative_num_draft_tokens=9, speculative_dflash_block_size=4,
                  speculative_eagle_topk=8, attention_backend="triton", speculative_draft_attention_backend="triton",
                  page_size=1, context_length=64)
    values.update(fields)
    for name, value in values.items():
        setattr(out, name, value)
    return out


def _build_worker(monkeypatch, record):
    """DFlashWorker's init in DDTREE mode up to the draft TpModelWorker, which records its server args."""
    from sglang.srt import server_args
    from sglang.srt.speculative import dflash_worker

    seen: dict = {}

    def draft_worker(**kwargs):
        seen.update(kwargs)
        raise _DraftWorkerBuilt

    monkeypatch.setattr(dflash_worker, "TpModelWorker", draft_worker)
    monkeypatch.setattr(server_args, "_global_server_args", record)  # the process-wide record, restored after
    triton = type("TritonAttnBackend", (), {})()  # the class name is what the worker checks
    runner = SimpleNamespace(attn_backend=triton, model_config=SimpleNamespace(context_len=64, vocab_size=100),
                             memory_pool_config=None)
    target = SimpleNamespace(device="cpu", model_runner=runner, get_memory_pool=lambda: (None, None))
    with pytest.raises(_DraftWorkerBuilt):
        dflash_worker.DFlashWorker(record, 0, 0, 0, 0, 0, 0, 1234, target)
    return seen["server_args"]


def test_the_ddtree_draft_runner_is_dflashs_block_runner(monkeypatch):
    record = _ddtree_record()
    draft = _build_worker(monkeypatch, record)
    assert draft is not record
    assert (draft.speculative_algorithm, draft.speculative_num_draft_tokens, draft.speculative_eagle_topk) == \
        ("DFLASH", 4, 1)
    assert (record.speculative_algorithm, record.speculative_num_draft_tokens) == ("DDTREE", 9)  # untouched


@pytest.mark.parametrize(("fields", "message"), [
    ({"speculative_ddtree_budget": 0}, "budget must be positive, got 0"),
    ({"speculative_num_draft_tokens": 8}, "expected speculative_num_draft_tokens=9, got 8"),
    ({"speculative_dflash_block_size": 1}, "to be at least 2, got 1"),
    ({"speculative_ddtree_topk_cap": 0}, "topk cap must be positive, got 0"),
])
def test_the_worker_rechecks_what_would_fail_silently(monkeypatch, fields, message):
    with pytest.raises(ValueError) as raised:
        _build_worker(monkeypatch, _ddtree_record(**fields))
    assert message in str(raised.value)
