"""The scheduler's request handler of the patched tree on a DDTREE server, on CPU: a request DDTREE cannot
serve is aborted with DDTREE's own message and queued as finished. The scheduler is a stand-in with the
fields the method reads (and, from 0.5.23, ``_create_generation_req`` building the tree's own ``Req``);
the method, the request and the validation are the tree's. 0.5.17 calls it ``handle_generate_request``;
0.5.23 ``_handle_generate_request``, with an exit stack."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
from sglang_tree import tree_release

sched = pytest.importorskip("sglang.srt.managers.scheduler")
from sglang.srt.managers import io_struct, schedule_batch  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

# 0.5.23 renamed the handler, gave it an exit stack, and builds the Req through the scheduler.
SCHEDULER_BUILDS_REQ = tree_release() >= (0, 5, 23)


def _scheduler():
    scheduler = MagicMock()
    scheduler.spec_algorithm = SpeculativeAlgorithm.DDTREE
    scheduler.enable_overlap = True
    scheduler.model_config.vocab_size = 1024
    scheduler.model_config.hf_eos_token_id = None
    scheduler.metrics_reporter.enable_metrics = False
    scheduler.tokenizer = None
    scheduler.dllm_config = None
    scheduler.disaggregation_mode = sched.DisaggregationMode.NULL
    if SCHEDULER_BUILDS_REQ:
        scheduler.enable_session_radix_cache = False
        scheduler._create_generation_req = lambda recv_req, *args, **kwargs: schedule_batch.Req(*args, **kwargs)
        scheduler.validate_dllm_request = lambda req: None
    return scheduler


def _request(rid, return_logprob=False, **sampling):
    release_fields = {"return_hidden_states": False} if SCHEDULER_BUILDS_REQ else {}
    return io_struct.TokenizedGenerateReqInput(
        rid=rid, input_text="hi", input_ids=[1, 2, 3], input_embeds=None, mm_inputs=None, token_type_ids=None,
        sampling_params=SamplingParams(max_new_tokens=4, **sampling), return_logprob=return_logprob,
        logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False, bootstrap_port=0,
        **release_fields)


def _handle(scheduler, request):
    if SCHEDULER_BUILDS_REQ:
        sched.Scheduler._handle_generate_request(scheduler, request, contextlib.ExitStack())
    else:
        sched.Scheduler.handle_generate_request(scheduler, request)


@pytest.mark.parametrize(("request_kwargs", "message"), [
    ({"return_logprob": True}, "DDTREE speculative decoding does not support return_logprob"),
    ({"repetition_penalty": 1.3}, "penalties"),
])
def test_a_request_ddtree_cannot_serve_is_aborted_with_its_message(monkeypatch, request_kwargs, message):
    monkeypatch.setattr(schedule_batch, "get_parallel", lambda: SimpleNamespace(tp_rank=0))
    scheduler = _scheduler()
    _handle(scheduler, _request("r1", **request_kwargs))
    (queued,) = scheduler._add_request_to_queue.call_args.args[:1]
    assert queued.to_finish is not None and message in queued.to_finish.message
