"""The prompt sets one bench server measures: the set's short prompts and long ones, in the same server.

``--prompts FILE`` is one set, as before; ``--prompts short,FILE,...`` several (``short``: the set's own
prompts, a file: a set named by its stem). ``--long-prompts 4096[,N...]`` adds, per length, a generated
set ``long-4096`` of :data:`LONG_PROMPT_COUNT` token-id prompts of exactly that many tokens (ids drawn
with a fixed seed below :data:`LONG_ID_LIMIT` and the model's vocabulary), written into the logs folder
when the run starts. Every level runs once per set on the same server, so a long-context comparison
costs no extra server start; ratios and the fastest DFLASH are per (prompt set, level).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from patchkit.errors import BadInput
from patchkit.smoke.prompts import Prompt, load_prompts

#: The name of the set's own prompt file in ``--prompts short,FILE``.
SHORT = "short"
#: Prompts in a generated long set: a level sends max(prompts, concurrency) requests, so 8 prompts keep
#: one request at a time short in wall time while 32 concurrent requests still get distinct prompts x 4.
LONG_PROMPT_COUNT = 8
#: Generated ids stay below this (and the model's vocabulary): ordinary tokens of any tokenizer.
LONG_ID_LIMIT = 256


@dataclass(frozen=True, kw_only=True)
class PromptSet:
    name: str
    file: Path
    prompts: tuple[Prompt, ...]
    skipped: tuple[str, ...] = ()  # text prompts a server without a tokenizer cannot run
    generated: bool = False  # written by the bench (--long-prompts) into the logs folder

    @property
    def mean_tokens(self) -> float | None:
        """Mean prompt length in tokens (token-id prompts only; text prompts are not tokenized here)."""
        lengths = [len(p.input_ids) for p in self.prompts if p.input_ids is not None]
        return mean(lengths) if lengths else None

    def write(self) -> None:
        """A generated set's file, so the run can be repeated with ``--prompts short,FILE``."""
        if self.generated:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            self.file.write_text("".join(json.dumps({"id": p.id, "input_ids": list(p.input_ids or ())}) + "\n"
                                         for p in self.prompts))


def named_files(value: Path | None, default: Path) -> list[tuple[str, Path]]:
    """``--prompts`` as (set name, file) pairs: none given, the set's own; an existing file, that one; else a
    comma-separated list where ``short`` is the set's own."""
    if value is None:
        return [(SHORT, default)]
    if value.is_file() or "," not in str(value):
        return [(SHORT if value == default else value.stem, value)]
    pairs = []
    for part in (p.strip() for p in str(value).split(",")):
        if not part:
            raise BadInput(f"--prompts {value}: an empty item; separate the sets with single commas")
        pairs.append((SHORT, default) if part == SHORT else (Path(part).stem, Path(part)))
    return pairs


def long_set(tokens: int, logs: Path, vocab_size: int | None) -> PromptSet:
    """``long-N``: :data:`LONG_PROMPT_COUNT` prompts of ``tokens`` ids each, the same for every run."""
    rng = random.Random(tokens)
    limit = min(LONG_ID_LIMIT, vocab_size or LONG_ID_LIMIT)
    prompts = tuple(Prompt(f"long{tokens}-{i:02d}", input_ids=tuple(rng.randrange(1, limit) for _ in range(tokens)))
                    for i in range(LONG_PROMPT_COUNT))
    return PromptSet(name=f"long-{tokens}", file=logs / f"long-{tokens}.jsonl", prompts=prompts, generated=True)


def load_sets(value: Path | None, default: Path, long_prompts: Sequence[int], logs: Path,
              model_config: dict[str, Any] | None) -> list[PromptSet]:
    """Every prompt set of the run, checked (files readable, names distinct, long prompts that fit the model)."""
    sets = [PromptSet(name=name, file=path, prompts=load_prompts(path)) for name, path in named_files(value, default)]
    config = model_config or {}
    vocab = config.get("vocab_size") if isinstance(config.get("vocab_size"), int) else None
    sets += [long_set(tokens, logs, vocab) for tokens in long_prompts]
    names = [s.name for s in sets]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise BadInput(f"two prompt sets are named {twice!r} (--prompts names a set by its file's stem)",
                       hint="rename one file, or leave out the repeated one")
    return sets


def check_context(sets: Sequence[PromptSet], max_new_tokens: int, model_config: dict[str, Any] | None,
                  config_path: Path, context_length: int | None) -> None:
    """A prompt plus its new tokens must fit the server's context (``--context-length``, else the model's
    ``max_position_embeddings``), or every request of that set would be refused mid-run."""
    limit = context_length or (model_config or {}).get("max_position_embeddings")
    if not isinstance(limit, int):
        return
    for prompt_set in sets:
        longest = max((len(p.input_ids) for p in prompt_set.prompts if p.input_ids is not None), default=0)
        if longest + max_new_tokens > limit:
            where = "--context-length" if context_length else f"max_position_embeddings in {config_path}"
            raise BadInput(f"prompt set {prompt_set.name}: a prompt of {longest} tokens plus {max_new_tokens} new "
                           f"tokens does not fit the server's context of {limit} ({where})",
                           hint="use shorter prompts (--long-prompts N) or a model with a longer context")
