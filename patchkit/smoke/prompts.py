"""The smoke prompt set: a JSONL file, one prompt per line.

Each line is an object with an ``id`` and either ``input_ids`` (a list of token ids, usable with
``--skip-tokenizer-init`` and the tiny random test models) or ``text`` (for real models with a
tokenizer). Blank lines and lines starting with ``#`` are skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import BadInput, location


@dataclass(frozen=True)
class Prompt:
    id: str
    input_ids: tuple[int, ...] | None = None
    text: str | None = None

    @property
    def needs_tokenizer(self) -> bool:
        return self.input_ids is None

    def request_body(self) -> dict:
        """The prompt part of a ``/generate`` request."""
        return {"input_ids": list(self.input_ids)} if self.input_ids is not None else {"text": self.text}


def _parse_line(raw: str, path: Path, line_no: int) -> Prompt:
    where = location(path, line_no)
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as error:
        raise BadInput(f"not JSON: {error.msg}", location=where) from error
    if not isinstance(doc, dict) or not isinstance(doc.get("id"), str):
        raise BadInput('each line needs a string "id"', location=where)
    ids, text = doc.get("input_ids"), doc.get("text")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
            raise BadInput('"input_ids" must be a non-empty list of non-negative ints', location=where)
        return Prompt(doc["id"], input_ids=tuple(ids))
    if isinstance(text, str) and text:
        return Prompt(doc["id"], text=text)
    raise BadInput('each line needs "input_ids" or a non-empty "text"', location=where)


def load_prompts(path: Path) -> tuple[Prompt, ...]:
    """Read and validate a prompt file; errors name the file and line."""
    if not path.is_file():
        raise BadInput(f"prompt file not found: {path}", hint="pass --prompts FILE")
    prompts: list[Prompt] = []
    for line_no, raw in enumerate(path.read_text().splitlines(), start=1):
        if raw.strip() and not raw.lstrip().startswith("#"):
            prompts.append(_parse_line(raw, path, line_no))
    if not prompts:
        raise BadInput("prompt file holds no prompts", location=location(path))
    ids = [p.id for p in prompts]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate is not None:
        raise BadInput(f"duplicate prompt id {duplicate!r}", location=location(path))
    return tuple(prompts)
