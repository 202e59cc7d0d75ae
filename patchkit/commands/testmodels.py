"""``patchkit testmodels``: tiny arranged models, or random weights at a real shape."""

from __future__ import annotations

from pathlib import Path

import click

from patchkit.commands.options import Output, epilog, output_options, run_command


@click.command(epilog=epilog(_2="bad input, or torch/numpy missing (the message says what to install)"))
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Directory that receives target/ and draft/.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
@click.option("--heads", type=click.IntRange(min=1), default=None,
              help="Attention heads of both models (tiny models: a multiple of 2, default 4; tensor parallel size N "
                   "needs a multiple of N). With --shape: overrides the shape's.")
@click.option("--profile", default="default", show_default=True, metavar="NAME",
              help="default, or tree: a pair where a DDTree tree verifies more tokens than a DFLASH chain.")
@click.option("--shape", default=None, metavar="NAME",
              help="Random bf16 weights at a real shape instead (qwen3-8b, qwen3-1.7b); the options below override it.")
@click.option("--layers", type=int, default=None, help="Shape: target layers.")
@click.option("--hidden", type=int, default=None, help="Shape: hidden size.")
@click.option("--kv-heads", type=int, default=None, help="Shape: KV heads.")
@click.option("--head-dim", type=int, default=None, help="Shape: head dimension (default hidden / heads).")
@click.option("--intermediate", type=int, default=None, help="Shape: MLP intermediate size.")
@click.option("--vocab", type=int, default=None, help="Shape: vocabulary size.")
@click.option("--draft-layers", type=int, default=None, help="Shape: DFlash draft layers (default 2).")
@click.option("--block-size", type=int, default=None, help="Shape: DFlash block size (default 16).")
@output_options
def testmodels(out: Path, seed: int, heads: int | None, profile: str, shape: str | None, layers: int | None,
               hidden: int | None, kv_heads: int | None, head_dim: int | None, intermediate: int | None,
               vocab: int | None, draft_layers: int | None, block_size: int | None, output: Output) -> None:
    """Write a tiny arranged Qwen3 target and DFlash draft (no tokenizer; use input ids), or random
    weights at a real shape (--shape, or every shape option)."""
    from patchkit.hostprep.shapemodels import write_shaped
    from patchkit.hostprep.testmodels import write_test_models
    from patchkit.render.hostprep import with_byte_progress

    overrides = dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     intermediate=intermediate, vocab=vocab, draft_layers=draft_layers, block_size=block_size)
    if shape is not None or any(v is not None for k, v in overrides.items() if k != "heads"):
        run_command("testmodels", output, lambda: with_byte_progress(
            "writing models", lambda progress, announce: write_shaped(out, seed, shape, overrides, progress, announce),
            output.verbosity, bar=not output.as_json))
    else:
        run_command("testmodels", output, lambda: write_test_models(out, seed, heads=heads or 4, profile=profile))
