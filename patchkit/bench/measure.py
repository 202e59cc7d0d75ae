"""Requests at a concurrency level, and the numbers one batch of them gives.

A level sends ``max(prompts, concurrency)`` requests (prompt ``i % len(prompts)`` for request ``i``)
through ``concurrency`` client threads, so the server holds ``concurrency`` requests at once until the
queue drains. Times come from the client's clock (``time.monotonic``):

* per-request tok/s: output tokens / (last event - request sent), averaged over the requests;
* aggregate tok/s: all output tokens / (last request finished - first request sent);
* TTFT: first streamed token - request sent;
* ms per verify round: (last event - first token) / verify rounds (``spec_verify_ct`` of the final
  ``meta_info``); on the baseline the rounds are the decode steps, output tokens - 1;
* accept length: output tokens / verify rounds, summed over the requests (SGLang's own definition);
* the histogram of accept lengths: SGLang 0.5.17's ``spec_correct_drafts_histogram``, or, from 0.5.12
  whose DFLASH and DDTREE workers leave it empty, the tokens each streamed event added (one event per
  round); requests whose events were merged (fewer events than rounds) are left out and counted.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import mean
from typing import Any, TypeVar

from patchkit.smoke.client import Generation
from patchkit.smoke.launch import request
from patchkit.smoke.prompts import Prompt
from patchkit.smoke.server import ServerGroup

JOIN_POLL_S = 0.1
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, kw_only=True)
class Job:
    index: int
    prompt: Prompt
    sampling: dict[str, Any] | None = None
    max_new_tokens: int | None = None  # this request's own length (--changing-load); None: the level's


def level_jobs(prompts: Sequence[Prompt], concurrency: int) -> list[Job]:
    return [Job(index=i, prompt=prompts[i % len(prompts)]) for i in range(max(len(prompts), concurrency))]


def run_batch(server: ServerGroup, jobs: Sequence[Job], concurrency: int, max_new_tokens: int,
              timeout_s: float) -> list[Generation]:
    """Run ``jobs`` through ``concurrency`` client threads; the first failed request is raised."""
    return run_parallel(jobs, concurrency, lambda job: request(server, job.prompt, job.max_new_tokens or max_new_tokens,
                                                               timeout_s, job.sampling))


def run_parallel(items: Sequence[T], concurrency: int, work: Callable[[T], R]) -> list[R]:
    """``work(item)`` for every item through ``concurrency`` daemon threads, results in the items'
    order; the first exception stops the rest and is raised here.

    Daemon threads and a polling join keep Ctrl-C responsive: the main thread is never stuck in a
    request, so the server's teardown starts at once.
    """
    todo: queue.Queue[int] = queue.Queue()
    for index in range(len(items)):
        todo.put(index)
    results: list[R | None] = [None] * len(items)
    errors: list[Exception] = []
    count = min(concurrency, len(items))
    if count == 0:
        return []
    # Every thread is running before the first request goes out, so starting threads is not timed.
    ready = threading.Barrier(count)

    def worker() -> None:
        ready.wait()
        while not errors:
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[index] = work(items[index])
            except Exception as error:  # raised again in the calling thread
                errors.append(error)
                return

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(JOIN_POLL_S)
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


@dataclass(frozen=True, kw_only=True)
class RepeatStats:
    """One measured batch at one level."""

    requests: int
    output_tokens: int
    wall_s: float
    aggregate_tok_s: float
    per_request_tok_s: float
    ttft_ms: float
    ms_per_round: float | None
    verify_rounds: int | None
    accept_length: float | None


def repeat_stats(generations: Sequence[Generation]) -> RepeatStats:
    tokens = sum(len(g.output_ids) for g in generations)
    wall = max(g.finished_at for g in generations) - min(g.started_at for g in generations)
    rounds = [g.verify_ct for g in generations if g.verify_ct]
    per_round = [g.ms_per_round for g in generations if g.ms_per_round is not None]
    verified = sum(len(g.output_ids) for g in generations if g.verify_ct)
    return RepeatStats(
        requests=len(generations), output_tokens=tokens, wall_s=wall,
        aggregate_tok_s=tokens / wall if wall > 0 else 0.0,
        per_request_tok_s=mean(g.tokens_per_s for g in generations),
        ttft_ms=mean(g.ttft_s for g in generations) * 1000,
        ms_per_round=mean(per_round) if per_round else None,
        verify_rounds=sum(rounds) if rounds else None,
        accept_length=verified / sum(rounds) if rounds else None,
    )


@dataclass(frozen=True, kw_only=True)
class Histogram:
    """Verify rounds by accept length (bonus included), and where the counts come from."""

    counts: dict[int, int]
    source: str  # "server" (meta_info) or "stream" (tokens per streamed event)
    requests: int  # requests counted
    left_out: int  # requests whose rounds could not be told apart (merged events)

    @property
    def mean(self) -> float:
        rounds = sum(self.counts.values())
        return sum(k * n for k, n in self.counts.items()) / rounds if rounds else 0.0


def histogram(generations: Sequence[Generation]) -> Histogram | None:
    speculative = [g for g in generations if g.verify_ct]
    if not speculative:
        return None
    counts: Counter[int] = Counter()
    counted = 0
    for g in speculative:
        lengths = g.round_lengths
        if lengths is not None:
            counts.update(lengths)
            counted += 1
    source = "server" if any(g.server_histogram for g in speculative) else "stream"
    return Histogram(counts=dict(sorted(counts.items())), source=source, requests=counted,
                     left_out=len(speculative) - counted)
