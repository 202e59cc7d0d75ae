"""``patchkit smoke``: launch the patched SGLang server (baseline, then DDTREE), check greedy outputs
token for token, and tear the servers down. Entry point: :func:`patchkit.smoke.run.run_smoke`."""
