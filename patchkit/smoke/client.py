"""A minimal client for SGLang's native ``/generate``, streaming so time to first token is measured.

SGLang streams server-sent events: ``data: {json}`` lines whose ``output_ids`` grow cumulatively,
then ``data: [DONE]``. The last object carries the full ``output_ids`` and ``meta_info``
(``completion_tokens``, ``e2e_latency``, and on a speculative server ``spec_accept_length`` and
``spec_verify_ct``; SGLang 0.5.17 adds ``spec_correct_drafts_histogram``, the number of verify rounds
that accepted k drafted tokens, which 0.5.12's DFLASH and DDTREE workers leave empty). Each event
after the first (the prefill's token) is one scheduler step, so the growth of ``output_ids`` per event
is the accept length of each verify round, unless the server merged events (then their count is
smaller than ``spec_verify_ct``; see :attr:`Generation.round_lengths`).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from patchkit.smoke.prompts import Prompt


class RequestFailed(Exception):
    """A ``/generate`` request failed (connection lost, timeout, HTTP error, error object)."""


@dataclass(frozen=True)
class Generation:
    """What one request produced and how fast (times from the client's clock, in seconds)."""

    output_ids: tuple[int, ...]
    ttft_s: float
    total_s: float
    accept_length: float | None
    verify_ct: int | None
    chunk_tokens: tuple[int, ...] = ()  # new tokens per streamed event, in order
    server_histogram: tuple[int, ...] | None = None  # index k: rounds that accepted k drafted tokens
    e2e_latency_s: float | None = None  # the server's own created -> finished time
    started_at: float = 0.0  # time.monotonic() when the request was sent

    @property
    def tokens_per_s(self) -> float:
        return len(self.output_ids) / self.total_s if self.total_s > 0 else 0.0

    @property
    def finished_at(self) -> float:
        return self.started_at + self.total_s

    @property
    def decode_rounds(self) -> int:
        """Rounds after the first token: verify rounds on a speculative server, else decode steps."""
        return self.verify_ct if self.verify_ct else max(0, len(self.output_ids) - 1)

    @property
    def ms_per_round(self) -> float | None:
        """Decode time (first token to last) over the rounds that produced the rest."""
        rounds = self.decode_rounds
        return (self.total_s - self.ttft_s) * 1000 / rounds if rounds else None

    @property
    def round_lengths(self) -> tuple[int, ...] | None:
        """Accept length (bonus included) of every verify round: from the server's histogram when it
        sends one, else from the stream when every round arrived as its own event; None otherwise."""
        if not self.verify_ct:
            return None
        if self.server_histogram:
            return tuple(k + 1 for k, count in enumerate(self.server_histogram) for _ in range(count))
        rounds = self.chunk_tokens[1:]
        return rounds if len(rounds) == self.verify_ct else None


GREEDY = {"temperature": 0.0}
#: One opener for every request, with no proxy: the server is on 127.0.0.1, and building an opener per
#: request (urlopen's default) reads the proxy settings each time, which costs milliseconds that would
#: count as the server's time.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request_body(prompt: Prompt, max_new_tokens: int, sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fixed length (``ignore_eos``) so every server emits the same count; greedy unless ``sampling``."""
    return {
        **prompt.request_body(),
        "sampling_params": {**(sampling or GREEDY), "max_new_tokens": max_new_tokens, "ignore_eos": True},
        "stream": True,
    }


def _events(response: Any) -> Iterator[dict[str, Any]]:
    for raw in response:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)


@contextlib.contextmanager
def _translated_errors(timeout_s: float) -> Iterator[None]:
    """Every way an HTTP exchange with the server fails, as one :class:`RequestFailed`."""
    try:
        yield
    except TimeoutError as error:  # socket.timeout is TimeoutError
        raise RequestFailed(f"no answer within {timeout_s:g}s") from error
    except urllib.error.HTTPError as error:
        raise RequestFailed(f"HTTP {error.code}: {error.read()[:300]!r}") from error
    except (urllib.error.URLError, ConnectionError, OSError) as error:
        raise RequestFailed(f"connection failed: {error}") from error
    except json.JSONDecodeError as error:
        raise RequestFailed(f"malformed answer: {error}") from error


def generate(base_url: str, prompt: Prompt, max_new_tokens: int, timeout_s: float,
             sampling: dict[str, Any] | None = None) -> Generation:
    """Send one prompt; raise :class:`RequestFailed` with the reason on any failure."""
    data = json.dumps(request_body(prompt, max_new_tokens, sampling)).encode()
    request = urllib.request.Request(f"{base_url}/generate", data=data,
                                     headers={"Content-Type": "application/json"})
    start = time.monotonic()
    first: float | None = None
    last: dict[str, Any] | None = None
    chunks: list[int] = []
    with _translated_errors(timeout_s), _OPENER.open(request, timeout=timeout_s) as response:
        for event in _events(response):
            if "error" in event:
                raise RequestFailed(f"server error: {event['error']}")
            grown = len(event.get("output_ids") or ()) - sum(chunks)
            if grown > 0:
                chunks.append(grown)
                if first is None:
                    first = time.monotonic()
            last = event
            if time.monotonic() - start > timeout_s:
                raise RequestFailed(f"no complete answer within {timeout_s:g}s")
    if last is None:
        raise RequestFailed("the stream ended without output")
    end = time.monotonic()
    meta = last.get("meta_info") or {}
    histogram = meta.get("spec_correct_drafts_histogram") or meta.get("spec_accept_histogram")
    return Generation(
        output_ids=tuple(last.get("output_ids") or ()),
        ttft_s=(first or end) - start,
        total_s=end - start,
        accept_length=meta.get("spec_accept_length"),
        verify_ct=meta.get("spec_verify_ct"),
        chunk_tokens=tuple(chunks),
        server_histogram=tuple(int(n) for n in histogram) if histogram else None,
        e2e_latency_s=meta.get("e2e_latency"),
        started_at=start,
    )


def score(base_url: str, prompt_ids: Sequence[int], output_ids: Sequence[int], timeout_s: float) -> tuple[float, ...]:
    """The server's log-probability of each of ``output_ids`` given the prompt and the outputs before it.

    A prefill-only request (one greedy token, not used) with ``return_logprob`` from the prompt's last
    position: SGLang answers ``meta_info["input_token_logprobs"]``, ``[logprob, token_id, text]`` per
    input position from ``logprob_start_len`` on, the first of them without a logprob (None: SGLang
    scores position i from position i - 1, and the start has none before it in the request's range), so
    the range starts one position before the first output. The entries are matched to ``output_ids`` by
    token id (the last ``len(output_ids)`` of them), so an answer that covers other positions is
    refused, not misread.
    """
    body = {"input_ids": [*prompt_ids, *output_ids], "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_logprob": True, "logprob_start_len": max(len(prompt_ids) - 1, 0)}
    request = urllib.request.Request(f"{base_url}/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with _translated_errors(timeout_s), _OPENER.open(request, timeout=timeout_s) as response:
        answer = json.loads(response.read())
    if not isinstance(answer, dict) or "error" in answer:
        raise RequestFailed(f"server error: {answer.get('error') if isinstance(answer, dict) else answer!r}")
    entries = (answer.get("meta_info") or {}).get("input_token_logprobs")
    if not isinstance(entries, list):
        raise RequestFailed("the answer has no meta_info.input_token_logprobs")
    tail = entries[len(entries) - len(output_ids):] if len(entries) >= len(output_ids) else []
    try:
        pairs = [(float(entry[0]), int(entry[1])) for entry in tail]
    except (TypeError, ValueError, IndexError) as error:
        raise RequestFailed(f"malformed input_token_logprobs entry: {error}") from error
    if len(pairs) != len(output_ids) or any(t != o for (_, t), o in zip(pairs, output_ids, strict=True)):
        raise RequestFailed(f"input_token_logprobs ({len(entries)} entries) do not cover the "
                            f"{len(output_ids)} output tokens")
    return tuple(lp for lp, _ in pairs)
