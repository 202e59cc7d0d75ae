"""Integration tests of this set's base: they import the patched tree's own ``sglang`` (ServerArgs, the
worker's set-up), not just ``ddtree_utils``; ``sglang_tree`` in the shared core tests says how."""

from pathlib import Path

from sglang_tree import WORKER_V2_MODULES, import_tree_sglang

pytest_pycollect_makemodule = import_tree_sglang(WORKER_V2_MODULES, Path(__file__).resolve().parents[2])
