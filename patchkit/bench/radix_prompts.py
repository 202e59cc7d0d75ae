"""``patchkit bench --radix-prompts``: token-id prompts that make SGLang's radix cache share KV.

With the radix cache on, a request whose prompt starts with tokens another request already ran reuses
that KV instead of computing it, and a finished request leaves its prompt and output in the tree. A
speculative round moves accepted KV rows into place while other requests hold references to shared
prefix KV, so the greedy outputs of such prompts must still equal the baseline's. Two groups, the same
ids on every run (a fixed seed), all ids in ``[1, min(ID_LIMIT, vocab))``:

* **shared prefix**: :data:`SHARED_COUNT` prompts of one :data:`SHARED_PREFIX`-token prefix and a
  :data:`SHARED_TAIL`-token tail of their own (many requests on one cached prefix at once);
* **prefix chain**: :data:`CHAIN_COUNT` prompts, each the one before it extended by :data:`CHAIN_STEP`
  tokens (a request whose whole prompt, or a part of it, is another's: cached when the shorter ran first,
  a prefix of a cached one when the longer did; from the second repeat on every prompt is cached whole).

They are one more prompt set of the run (``radix``, :mod:`patchkit.bench.prompt_sets`), measured by the
same servers at every level, its file written into the logs folder (``radix-prompts.jsonl``, so a run can
be repeated with ``--prompts FILE``); a level sends ``max(prompts, concurrency)`` requests in file order,
so at 16 concurrent requests both groups run side by side.
"""

from __future__ import annotations

import random
from pathlib import Path

from patchkit.bench.prompt_sets import PromptSet
from patchkit.smoke.prompts import Prompt

NAME = "radix"
FILE_NAME = "radix-prompts.jsonl"
#: Ids stay below this and the model's vocabulary: ordinary tokens of any tokenizer, and of the test models.
ID_LIMIT = 256
SHARED_COUNT, SHARED_PREFIX, SHARED_TAIL = 8, 192, 64
CHAIN_COUNT, CHAIN_STEP = 8, 32
SEED = 0


def radix_prompts(vocab_size: int | None = None) -> tuple[Prompt, ...]:
    """The shared-prefix group, then the prefix chain (shortest first)."""
    rng = random.Random(SEED)
    limit = min(ID_LIMIT, vocab_size or ID_LIMIT)

    def ids(count: int) -> tuple[int, ...]:
        return tuple(rng.randrange(1, limit) for _ in range(count))

    prefix = ids(SHARED_PREFIX)
    shared = [Prompt(f"shared{SHARED_PREFIX}-{i:02d}", input_ids=prefix + ids(SHARED_TAIL))
              for i in range(SHARED_COUNT)]
    chain_ids = ids(CHAIN_STEP * CHAIN_COUNT)
    chain = [Prompt(f"chain-{CHAIN_STEP * (i + 1)}", input_ids=chain_ids[:CHAIN_STEP * (i + 1)])
             for i in range(CHAIN_COUNT)]
    return (*shared, *chain)


def radix_set(logs: Path, vocab_size: int | None) -> PromptSet:
    """The prompts as a generated prompt set, its file in ``logs`` (written when the run starts)."""
    return PromptSet(name=NAME, file=logs / FILE_NAME, prompts=radix_prompts(vocab_size), generated=True)
