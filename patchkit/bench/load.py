"""``patchkit bench --changing-load``: requests that arrive and finish at different times, so the batch
the server runs keeps changing (what a serving DDTREE's width policy meets).

Per level of concurrency C: ``--load-requests`` requests (default :data:`REQUESTS_PER_SLOT` x C, at
least one per prompt). Request i asks for prompt ``i % len(prompts)`` and a seeded number of new
tokens between ``max_new_tokens // 4`` and ``max_new_tokens``, so requests finish at different times.
The client keeps a *target* number of requests in flight, drawn again (seeded, 1 to C) every time a
request finishes: when the target rises, new requests arrive at once; when it falls, none arrive until
enough have finished. With the same ``--seed`` every server gets the same requests, the same lengths and
the same sequence of targets, whatever its speed; only the times differ.

Measured per level, besides the usual tok/s: how many requests were in flight (client side, share of
the level's time), the batch sizes the server ran (from its round records, ``--phases``, which a
changing-load run turns on for every speculative server) and the rounds' p50 / p99, on the device (round
records) and per request (the client's ms per round).
"""

from __future__ import annotations

import itertools
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from patchkit.bench.measure import JOIN_POLL_S, Job
from patchkit.bench.phases import quantile
from patchkit.smoke.client import Generation
from patchkit.smoke.prompts import Prompt

#: Default requests per level: this many per concurrent slot, so the target is drawn again many times.
REQUESTS_PER_SLOT = 4
#: The shortest request asks for this share of ``max_new_tokens``.
SHORTEST_SHARE = 4

R = TypeVar("R")
#: (time.monotonic(), requests in flight from then on), one entry per arrival and per finish.
Trace = list[tuple[float, int]]


@dataclass(frozen=True, kw_only=True)
class LoadPlan:
    seed: int
    requests: int | None = None  # per level; None: REQUESTS_PER_SLOT x concurrency


@dataclass(frozen=True, kw_only=True)
class Schedule:
    jobs: tuple[Job, ...]
    targets: tuple[int, ...]  # the first target, then one drawn per finished request


def schedule(prompts: Sequence[Prompt], concurrency: int, max_new_tokens: int, plan: LoadPlan) -> Schedule:
    """The level's requests, lengths and in-flight targets: a function of the seed and the level only."""
    rng = random.Random(plan.seed * 1_000_003 + concurrency)
    count = max(len(prompts), plan.requests or REQUESTS_PER_SLOT * concurrency)
    shortest = max(1, max_new_tokens // SHORTEST_SHARE)
    jobs = tuple(Job(index=i, prompt=prompts[i % len(prompts)], max_new_tokens=rng.randint(shortest, max_new_tokens))
                 for i in range(count))
    targets = tuple(rng.randint(1, concurrency) for _ in range(count + 1))
    return Schedule(jobs=jobs, targets=targets)


def run_schedule(plan: Schedule, work: Callable[[Job], R]) -> tuple[list[R], Trace]:
    """``work(job)`` for every job, each in its own daemon thread, keeping the target number in flight;
    the results in the jobs' order and the in-flight trace. The first exception is raised here at once
    (the requests still running end with the server's teardown)."""
    done: queue.Queue[tuple[int, R | None, Exception | None]] = queue.Queue()
    results: list[R | None] = [None] * len(plan.jobs)
    targets = iter(plan.targets)
    target = next(targets)
    sent = in_flight = 0
    trace: Trace = []

    def run(index: int) -> None:
        try:
            done.put((index, work(plan.jobs[index]), None))
        except Exception as error:  # raised again in the calling thread
            done.put((index, None, error))

    while sent < len(plan.jobs) or in_flight:
        while in_flight < target and sent < len(plan.jobs):
            threading.Thread(target=run, args=(sent,), daemon=True).start()
            sent += 1
            in_flight += 1
            trace.append((time.monotonic(), in_flight))
        try:  # a polling wait keeps Ctrl-C responsive: the main thread is never stuck in a request
            index, result, error = done.get(timeout=JOIN_POLL_S)
        except queue.Empty:
            continue
        if error is not None:
            raise error
        results[index] = result
        in_flight -= 1
        trace.append((time.monotonic(), in_flight))
        target = next(targets, target)
    return [r for r in results if r is not None], trace


@dataclass(frozen=True, kw_only=True)
class LoadStats:
    """One changing-load level, over its measured repeats."""

    seed: int
    requests: int  # per repeat
    tokens_min: int  # the shortest and longest request asked for
    tokens_max: int
    in_flight: dict[int, float]  # requests in flight (client side) -> share of the measured time
    mean_in_flight: float
    request_round_p50_ms: float | None  # per request, (last event - first token) / rounds
    request_round_p99_ms: float | None


def in_flight_shares(traces: Sequence[Trace]) -> dict[int, float]:
    """Time-weighted share of each in-flight count, from the first arrival to the last finish of each trace."""
    held: dict[int, float] = {}
    for trace in traces:
        for (start, count), (end, _) in itertools.pairwise(trace):
            if count:
                held[count] = held.get(count, 0.0) + (end - start)
    total = sum(held.values())
    return {k: held[k] / total for k in sorted(held)} if total > 0 else {}


def load_stats(plan: LoadPlan, level: Schedule, batches: Sequence[Sequence[Generation]],
               traces: Sequence[Trace]) -> LoadStats:
    shares = in_flight_shares(traces)
    per_round = [g.ms_per_round for batch in batches for g in batch if g.ms_per_round is not None]
    lengths = [job.max_new_tokens or 0 for job in level.jobs]
    return LoadStats(seed=plan.seed, requests=len(level.jobs), tokens_min=min(lengths), tokens_max=max(lengths),
                     in_flight=shares, mean_in_flight=sum(k * share for k, share in shares.items()),
                     request_round_p50_ms=quantile(per_round, 0.50) if per_round else None,
                     request_round_p99_ms=quantile(per_round, 0.99) if per_round else None)
