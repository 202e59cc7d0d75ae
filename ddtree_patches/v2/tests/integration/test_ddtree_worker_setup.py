"""DDTreeWorkerV2's set-up path on CPU: the widths it resolves from a real 0.5.17 ``ServerArgs`` record,
the configurations it refuses, and the draft runner built from a copy of the record overridden to the
block width with topk 1.

What runs is the tree's own ``resolve_ddtree_widths``, ``DDTreeWorkerV2.__init__`` (the deepcopy, the
``override("ddtree.draft_runner", ...)`` and the dropped cached width) and ``_draft_config``. The
record is a real ``ServerArgs`` whose fields are set directly (its ``__post_init__`` resolution needs
a model and a GPU; the fields it does not set read the dataclass defaults). Only
``DFlashWorkerV2.__init__`` (which loads the draft model and builds its runner) is stood in for: it
records the record it is given.
"""

from __future__ import annotations

import dataclasses
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
    record = object.__new__(ServerArgs)  # no resolution: it needs the model and a GPU
    for field in dataclasses.fields(ServerArgs):
        if field.default_factory is not dataclasses.MISSING:  # defaults that are not class attributes
            setattr(record, field.name, field.default_factory())
    for name, value in values.items():
        setattr(record, name, value)
    return record


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


def target_worker(vocab: int = VOCAB) -> SimpleNamespace:
    return SimpleNamespace(model_runner=SimpleNamespace(model_config=SimpleNamespace(vocab_size=vocab)))


PS = SimpleNamespace(tp_rank=0)


def recording_init(seen: list, *, block_size=None):
    """DFlashWorkerV2.__init__'s stand-in: the record the draft runner would be built from."""

    def init(self, server_args, gpu_id, ps, nccl_port, target_worker):
        seen.append({"record": server_args, "args": (gpu_id, ps, nccl_port, target_worker)})
        self.block_size = server_args.speculative_num_draft_tokens if block_size is None else block_size
        self.ps = ps

    return init


def test_the_draft_runner_is_built_from_a_copy_at_the_block_width_with_topk_1(monkeypatch):
    seen: list = []
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init(seen))
    record, target = server_args(), target_worker()
    record.__dict__["max_speculative_num_draft_tokens"] = 9  # the cached width a resolved record carries
    worker = worker_mod.DDTreeWorkerV2(record, 3, PS, 1234, target)
    (call,) = seen
    draft = call["record"]
    assert call["args"] == (3, PS, 1234, target)
    assert draft is not record and isinstance(draft, ServerArgs)
    assert (draft.speculative_num_draft_tokens, draft.speculative_eagle_topk) == (4, 1)
    assert "max_speculative_num_draft_tokens" not in draft.__dict__  # it would still say N
    assert draft.speculative_ddtree_budget == 8 and draft.page_size == 1  # everything else is the target's
    # the target's record is untouched, and the worker keeps it
    assert (record.speculative_num_draft_tokens, record.speculative_eagle_topk) == (9, None)
    assert worker.server_args is record
    assert (worker.budget, worker.verify_width, worker.ddtree_topk, worker.server_topk) == (8, 9, 8, 1)
    assert worker._draft_topk is None and worker._ddtree_mask_buf is None


def test_a_draft_runner_of_another_block_size_is_refused(monkeypatch):
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init([], block_size=6))
    with pytest.raises(RuntimeError, match="draft block size 6 != 4"):
        worker_mod.DDTreeWorkerV2(server_args(), 0, PS, 0, target_worker())


def test_an_inconsistent_record_is_refused_before_the_draft_model_loads(monkeypatch):
    seen: list = []
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init(seen))
    with pytest.raises(ValueError, match="--page-size 1"):
        worker_mod.DDTreeWorkerV2(server_args(page_size=4), 0, PS, 0, target_worker())
    assert seen == []


@pytest.fixture
def published():
    """A record published into the process-wide context (as a launcher does), reset afterwards."""
    record = server_args()
    get_context().set_server_args(record)
    yield record
    reset_context()


def test_the_draft_config_publishes_the_draft_record_and_restores_the_target_one(published, monkeypatch):
    seen: list = []
    monkeypatch.setattr(DFlashWorkerV2, "__init__", recording_init(seen))
    record = published
    worker = worker_mod.DDTreeWorkerV2(record, 0, PS, 0, target_worker())
    worker.draft_model_runner = SimpleNamespace(server_args=seen[0]["record"])
    with worker._draft_config():
        assert get_spec().speculative_num_draft_tokens == 4
    assert get_spec().speculative_num_draft_tokens == 9
