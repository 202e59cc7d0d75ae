"""Is a greedy mismatch a near-tie? The target's own top logits along the baseline's greedy path, in fp32 and bf16.

When a speculative server's greedy output differs from the baseline's at one position, the question is
whether the baseline's choice there was decided by more than the arithmetic's resolution. This runs the
target model (a Hugging Face checkpoint folder, e.g. `patchkit testmodels --out DIR`'s DIR/target) on
CPU with `transformers` (not a patchkit dependency: install it beside this script's interpreter, e.g.
`pip install --target DIR transformers` and PYTHONPATH=DIR), greedy from the prompt's token ids, and
prints at each position in --show the top three logits, in fp32 and in bf16. A margin between the first
two under one bf16 step at that magnitude (2**-7 of the logit's power of two: 0.03125 for logits in
[4, 8)) is one a different but correct attention kernel may flip.

    python benchmarks/near_tie.py --model /tmp/mt/target --prompt 195 --tokens 20 --show 8-12
"""

from __future__ import annotations

import argparse
import math


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the target checkpoint folder")
    parser.add_argument("--prompt", required=True, help="token ids, comma-separated")
    parser.add_argument("--tokens", type=int, default=16, help="greedy tokens to generate")
    parser.add_argument("--show", default="0-15", help="positions to print, FIRST-LAST (0 = first output)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    first, last = (int(x) for x in args.show.split("-"))
    prompt = [int(x) for x in args.prompt.split(",")]
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).eval()
        ids = torch.tensor([prompt])
        path = []
        with torch.no_grad():
            for position in range(args.tokens):
                logits = model(ids).logits[0, -1].float()
                top = torch.topk(logits, 3)
                token = int(top.indices[0])
                path.append(token)
                if first <= position <= last:
                    margin = float(top.values[0] - top.values[1])
                    step = 2.0 ** (math.floor(math.log2(abs(float(top.values[0])) or 1.0)) - 7)
                    pairs = ", ".join(f"{int(i)}: {float(v):.4f}" for v, i in zip(top.values, top.indices))
                    flag = "  <- under one bf16 step" if margin < step else ""
                    print(f"{str(dtype)[6:]:9} position {position:3d}: {pairs}  margin {margin:.4f}{flag}")
                ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
        print(f"{str(dtype)[6:]:9} greedy: {path}")


if __name__ == "__main__":
    main()
