"""A minimal client for SGLang's native ``/generate``, streaming so time to first token is measured.

SGLang streams server-sent events: ``data: {json}`` lines whose ``output_ids`` grow cumulatively,
then ``data: [DONE]``. The last object carries the full ``output_ids`` and ``meta_info``
(``completion_tokens``, and on a speculative server ``spec_accept_length`` and ``spec_verify_ct``).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from patchkit.smoke.prompts import Prompt


class RequestFailed(Exception):
    """A ``/generate`` request failed (connection lost, timeout, HTTP error, error object)."""


@dataclass(frozen=True)
class Generation:
    """What one greedy request produced and how fast."""

    output_ids: tuple[int, ...]
    ttft_s: float
    total_s: float
    accept_length: float | None
    verify_ct: int | None

    @property
    def tokens_per_s(self) -> float:
        return len(self.output_ids) / self.total_s if self.total_s > 0 else 0.0


def request_body(prompt: Prompt, max_new_tokens: int) -> dict[str, Any]:
    """Greedy, fixed length: temperature 0 and ``ignore_eos`` so both servers emit the same count."""
    return {
        **prompt.request_body(),
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
        "stream": True,
    }


def _events(response) -> Any:
    for raw in response:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)


def generate(base_url: str, prompt: Prompt, max_new_tokens: int, timeout_s: float) -> Generation:
    """Send one prompt; raise :class:`RequestFailed` with the reason on any failure."""
    data = json.dumps(request_body(prompt, max_new_tokens)).encode()
    request = urllib.request.Request(f"{base_url}/generate", data=data,
                                     headers={"Content-Type": "application/json"})
    start = time.monotonic()
    first: float | None = None
    last: dict[str, Any] | None = None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            for event in _events(response):
                if "error" in event:
                    raise RequestFailed(f"server error: {event['error']}")
                if first is None and event.get("output_ids"):
                    first = time.monotonic()
                last = event
                if time.monotonic() - start > timeout_s:
                    raise RequestFailed(f"no complete answer within {timeout_s:g}s")
    except (socket.timeout, TimeoutError) as error:
        raise RequestFailed(f"no answer within {timeout_s:g}s") from error
    except urllib.error.HTTPError as error:
        raise RequestFailed(f"HTTP {error.code}: {error.read()[:300]!r}") from error
    except (urllib.error.URLError, ConnectionError, OSError) as error:
        raise RequestFailed(f"connection failed: {error}") from error
    except json.JSONDecodeError as error:
        raise RequestFailed(f"malformed stream event: {error}") from error
    if last is None:
        raise RequestFailed("the stream ended without output")
    end = time.monotonic()
    meta = last.get("meta_info") or {}
    return Generation(
        output_ids=tuple(last.get("output_ids") or ()),
        ttft_s=(first or end) - start,
        total_s=end - start,
        accept_length=meta.get("spec_accept_length"),
        verify_ct=meta.get("spec_verify_ct"),
    )
