"""Accept lengths of a greedy chain (DFLASH) and of a DDTree tree on the test models, computed on CPU
with the plain-torch reference forward and the v1 set's own tree builder.

The builder is ``python/sglang/srt/speculative/ddtree_utils.py``, a new file in the set's patch 0001;
it is written out of the patch and loaded by path (as the set's tests load it from a patched tree),
so no base wheel is needed.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from unidiff import PatchSet

import reference as ref

REPO_ROOT = Path(__file__).resolve().parents[3]
SET_DIR = REPO_ROOT / "ddtree_patches" / "v1"
MODULE = "python/sglang/srt/speculative/ddtree_utils.py"


def load_ddtree_utils(tmp_dir: Path) -> ModuleType:
    """The set's ``ddtree_utils.py``, taken from the patch that adds it, imported by path."""
    for patch in sorted(SET_DIR.glob("*.patch")):
        for changed in PatchSet(patch.read_text()):
            if changed.path == MODULE and changed.is_added_file:
                text = "".join(line.value for hunk in changed for line in hunk if line.is_added)
                path = tmp_dir / "ddtree_utils.py"
                path.write_text(text)
                spec = importlib.util.spec_from_file_location("ddtree_utils_for_testmodels", path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
                spec.loader.exec_module(module)
                return module
    raise AssertionError(f"no patch of {SET_DIR} adds {MODULE}")


@dataclass(frozen=True)
class Walk:
    """One prompt: the target's greedy output and, per verifier, the accept length of every round."""

    output: list[int]
    rounds: dict[str, list[int]]  # "chain" or "B=<budget>" -> accept lengths (bonus included)


def _chain_accepted(draft_logits: torch.Tensor, future: list[int]) -> int:
    guesses = draft_logits.argmax(-1).tolist()
    k = 0
    while k < len(guesses) and k < len(future) and guesses[k] == future[k]:
        k += 1
    return k


def _tree_accepted(utils: ModuleType, draft_logits: torch.Tensor, future: list[int], budget: int) -> int:
    log_probs, ids = utils.ddtree_topk_from_logits(draft_logits.unsqueeze(0), min(budget, draft_logits.shape[-1]))
    tree = utils.build_ddtree_tree_from_topk(log_probs, ids, budget)
    parents, tokens = tree.parents[0].tolist(), [None, *tree.node_token_ids[0].tolist()]
    node, k = 0, 0
    while k < len(future):
        children = [i for i in range(1, len(parents)) if parents[i] == node and tokens[i] == future[k]]
        if not children:
            break
        node, k = children[0], k + 1
    return k


def walk(utils: ModuleType, target: dict, draft: dict, prompt: list[int], steps: int, budgets: list[int]) -> Walk:
    """Greedy target output, then every verifier decodes it round by round as the server would.

    A round starts at the bonus token ``seq[j]`` (the target's token not yet verified), drafts the block,
    accepts k drafted tokens and commits them plus the target's next token: it advances k + 1.
    """
    target = {name: t.to(torch.bfloat16).float() for name, t in target.items()}  # as written to disk
    draft = {name: t.to(torch.bfloat16).float() for name, t in draft.items()}
    output = ref.greedy(target, prompt, steps)
    seq = list(prompt) + output
    rounds: dict[str, list[int]] = {}
    for name in ["chain", *(f"B={b}" for b in budgets)]:
        lengths, j = [], len(prompt)
        while j < len(seq) - 1:
            logits = ref.draft_block_logits(target, draft, j, seq[j])
            future = seq[j + 1:]
            if name == "chain":
                k = _chain_accepted(logits, future)
            else:
                k = _tree_accepted(utils, logits, future, int(name[2:]))
            lengths.append(k + 1)
            j += k + 1
        rounds[name] = lengths
    return Walk(output, rounds)


def mean_accept(walks: list[Walk], name: str) -> float:
    """Tokens over rounds, as the server reports it (completion tokens / verify rounds)."""
    rounds = [n for w in walks for n in w.rounds[name]]
    return sum(rounds) / len(rounds)
