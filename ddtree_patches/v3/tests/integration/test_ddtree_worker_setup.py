"""DDTreeWorkerV2's set-up path on CPU: the widths it resolves from a real 0.5.23 ``ServerArgs`` record,
the configurations it refuses, and the draft runner built under the block width with topk 1.

What runs is the tree's own ``resolve_ddtree_widths``, ``DDTreeWorkerV2.__init__`` and
``_draft_config`` (the scoped ``get_spec().override``), against a ``ServerArgs`` record published into
the process-wide context the way a launcher does. Only ``DFlashWorkerV2.__init__`` (which loads the
draft model and builds its runner) is stood in for: it records the spec bag it sees.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

worker_mod = pytest.importorskip("sglang.srt.speculative.ddtree_worker_v2")
from sglang.srt.runtime_context import get_context, get_spec, reset_context  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2  # noqa: E402

VOCAB = 100


def server_args(**fields) -> ServerArgs:
    values = dict(model_path="toy", page_size=1, speculative_algorithm="DDTREE", speculative_ddtree_budget=8,
                  speculative_num_draft_tokens=9, speculative_dflash_block_size=4)
    values.update(fields)
    return ServerArgs(**values)


@pytest.mark.parametrize(("fields", "vocab", "expected"), [
    ({}, VOCAB, dict(budget=8, verify_width=9, block_size=4, topk=8, server_topk=1, auto_widths=(9,))),
    # K = min(B, V): a vocabulary smaller than the budget bounds it
    ({}, 5, dict(budget=8, verify_width=9, block_size=4, topk=5, server_topk=1, auto_widths=(9,))),
    # a cap trades exactness for speed; the server's own eagle topk is carried through
    ({"speculative_ddtree_topk_cap": 3, "speculative_eagle_topk": 2}, VOCAB,
     dict(budget=8, verify_width=9, block_size=4, topk=3, server_topk=2, auto_widths=(9,))),
    ({"speculative_ddtree_budget": 3, "speculative_num_draft_tokens": 4}, VOCAB,
     dict(budget=3, verify_width=4, block_size=4, topk=3, server_topk=1, auto_widths=(4,))),
    # auto: the widest verify is the resolved speculative_num_draft_tokens; the rounds choose among L, 2L, 4L
    ({"speculative_ddtree_budget": "auto", "speculative_num_draft_tokens": 16}, VOCAB,
     dict(budget=15, verify_width=16, block_size=4, topk=15, server_topk=1, auto_widths=(4, 8, 16))),
])
def test_the_widths_of_a_consistent_configuration(fields, vocab, expected):
    assert worker_mod.resolve_ddtree_widths(server_args(**fields), vocab) == expected


@pytest.mark.parametrize(("fields", "message"), [
    ({"page_size": 16}, "requires --page-size 1, got 16"),
    ({"speculative_ddtree_budget": 0, "speculative_num_draft_tokens": 1}, "budget must be >= 1, got 0"),
    ({"speculative_num_draft_tokens": 8}, "expected speculative_num_draft_tokens=9, got 8"),
    ({"speculative_num_draft_tokens": None}, "expected speculative_num_draft_tokens=9, got None"),
    ({"speculative_dflash_block_size": 1}, "at least 2 tokens (speculative_dflash_block_size), got 1"),
    ({"speculative_dflash_block_size": None}, "got None"),
    ({"speculative_ddtree_budget": 2, "speculative_num_draft_tokens": 3}, "budget=2, block size=4"),
])
def test_an_inconsistent_configuration_is_refused(fields, message):
    with pytest.raises(ValueError) as raised:
        worker_mod.resolve_ddtree_widths(server_args(**fields), VOCAB)
    assert message in str(raised.value)


@pytest.fixture
def published():
    """A record published into the process-wide context (as a launcher does), reset afterwards."""
    record = server_args()
    get_context().set_server_args(record)
    yield record
    reset_context()


def target_worker(vocab: int = VOCAB) -> SimpleNamespace:
    return SimpleNamespace(model_runner=SimpleNamespace(model_config=SimpleNamespace(vocab_size=vocab)))


def recording_init(seen: list, *, block_size=None, selector=None):
    """DFlashWorkerV2.__init__'s stand-in: what the draft runner would be built with."""

    def init(self, server_args, gpu_id, nccl_port, target_worker):
        spec = get_spec()
        seen.append({"num_draft_tokens": spec.speculative_num_draft_tokens, "topk": spec.speculative_eagle_topk,
                     "record": server_args, "args": (gpu_id, nccl_port, target_worker)})
        self.block_size = spec.speculative_num_draft_tokens if block_size is None else block_size
        self.selector, self._is_domino, self.lilicorr, self._target_tp_rank = selector, False, None, 0

    return init


def test_the_draft_runner_is_built_for_the_block_with_topk_1(published, monkeypatch):
    seen: list = []
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init(seen))
    target = target_worker()
    worker = worker_mod.DDTreeWorkerV2(published, 3, 1234, target)
    assert [(s["num_draft_tokens"], s["topk"]) for s in seen] == [(4, 1)]
    assert seen[0]["record"] is published and seen[0]["args"] == (3, 1234, target)
    assert (worker.budget, worker.verify_width, worker.ddtree_topk, worker.server_topk) == (8, 9, 8, 1)
    assert worker.draft_block_size == 4 and worker._draft_topk is None and worker._ddtree_mask_buf is None
    # the scope ends with the init: the target's verify width and topk are back in the bag
    assert (get_spec().speculative_num_draft_tokens, get_spec().speculative_eagle_topk) == (9, None)
    assert published.speculative_num_draft_tokens == 9  # the record itself stays the target's


def test_the_draft_config_scope_restores_the_target_widths_after_an_error(published, monkeypatch):
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init([]))
    worker = worker_mod.DDTreeWorkerV2(published, 0, 0, target_worker())
    with pytest.raises(RuntimeError, match="boom"), worker._draft_config():
        assert get_spec().speculative_num_draft_tokens == 4
        raise RuntimeError("boom")
    assert get_spec().speculative_num_draft_tokens == 9


def test_a_draft_runner_of_another_block_size_is_refused(published, monkeypatch):
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init([], block_size=6))
    with pytest.raises(RuntimeError, match="draft block size 6 != 4"):
        worker_mod.DDTreeWorkerV2(published, 0, 0, target_worker())


def test_a_drafter_with_a_candidate_selector_is_refused(published, monkeypatch):
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init([], selector=object()))
    with pytest.raises(ValueError, match="plain DFlash drafters only"):
        worker_mod.DDTreeWorkerV2(published, 0, 0, target_worker())


def test_an_inconsistent_record_is_refused_before_the_draft_model_loads(monkeypatch):
    seen: list = []
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init(seen))
    with pytest.raises(ValueError, match="--page-size 1"):
        worker_mod.DDTreeWorkerV2(server_args(page_size=4), 0, 0, target_worker())
    assert seen == []


def test_the_worker_reads_the_widths_resolution_declared_not_the_operators_record(monkeypatch):
    """0.5.23's record keeps what the operator passed; the speculative hook declares the page size, the
    draft block and the verify width on it. A server started with none of them given must get those."""
    from sglang.srt.arg_groups.overrides import declare_resolution

    record = server_args(page_size=None, speculative_num_draft_tokens=None, speculative_dflash_block_size=None)
    declare_resolution(record, "speculative_hook", page_size=1, speculative_num_draft_tokens=9,
                       speculative_dflash_block_size=4)
    seen: list = []
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init(seen))
    get_context().set_server_args(record)
    try:
        worker = worker_mod.DDTreeWorkerV2(record, 0, 0, target_worker())
    finally:
        reset_context()
    assert (worker.budget, worker.verify_width, worker.draft_block_size, worker.ddtree_topk) == (8, 9, 4, 8)
    assert [(s["num_draft_tokens"], s["topk"]) for s in seen] == [(4, 1)]
    assert record.speculative_num_draft_tokens is None  # the record itself is untouched
