"""One rank of the DDTree vocab-parallel draft top-k check (run by
test_ddtree_draft_topk.py as a real subprocess per TP rank, gloo backend).

Each rank owns a contiguous, possibly uneven, slice of a random LM head and
calls DFlashWorker._topk_log_probs_from_vocab_parallel_head with a TP group
that wraps torch.distributed. Rank 0 compares the merged result with the
top-k log-probs of the dense, unsharded logits and exits non-zero on mismatch.
"""

import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from sglang.srt.speculative import dflash_worker
from sglang.srt.speculative.ddtree_utils import ddtree_topk_from_logits


class _GlooGroup:
    def __init__(self):
        self.world_size = dist.get_world_size()

    def all_gather_into_tensor(self, output, inp):
        parts = [torch.empty_like(inp) for _ in range(self.world_size)]
        dist.all_gather(parts, inp.contiguous())
        output.copy_(torch.cat(parts, dim=0))


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    vocab, hidden, num_tokens, k = 1000, 16, 37, int(os.environ["TOPK"])
    bounds = [0, 600, 1000] if world == 2 else [0, vocab]
    padded = 640 if world == 2 else 1024

    gen = torch.Generator().manual_seed(0)
    weight_full = torch.randn(vocab, hidden, generator=gen)
    hidden_states = torch.randn(num_tokens, hidden, generator=gen)

    start, end = bounds[rank], bounds[rank + 1]
    weight = torch.zeros(padded, hidden)
    weight[: end - start] = weight_full[start:end]
    lm_head = SimpleNamespace(
        weight=weight,
        shard_indices=SimpleNamespace(
            num_org_elements=end - start,
            num_org_elements_padded=padded,
            num_added_elements=0,
            org_vocab_start_index=start,
            added_vocab_start_index=vocab,
        ),
    )
    dflash_worker.get_tp_group = _GlooGroup
    log_probs, ids = (
        dflash_worker.DFlashWorker._topk_log_probs_from_vocab_parallel_head(
            SimpleNamespace(),
            hidden_states=hidden_states,
            lm_head=lm_head,
            k=k,
            chunk_size=8,
        )
    )
    ok = True
    if rank == 0:
        ref_log_probs, ref_ids = ddtree_topk_from_logits(
            (hidden_states @ weight_full.T).unsqueeze(0), k
        )
        ok = torch.equal(ids, ref_ids[0]) and torch.allclose(
            log_probs, ref_log_probs[0], atol=1e-5
        )
        print(f"shape={tuple(ids.shape)} match={ok}")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
