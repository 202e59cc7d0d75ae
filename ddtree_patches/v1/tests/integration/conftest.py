"""Integration tests: they import the patched tree's own ``sglang`` package (DDTreeVerifyInput, the DFlash
worker in DDTree mode, the vocab-parallel draft top-k), not just ``ddtree_utils``; where its CPU
dependencies are missing, each module is skipped with the import error (``sglang_tree.py`` in the shared
core tests says how).
"""

from pathlib import Path

from sglang_tree import import_tree_sglang

pytest_pycollect_makemodule = import_tree_sglang(
    ("sglang.srt.speculative.ddtree_info", "sglang.srt.speculative.dflash_worker"), Path(__file__).resolve().parents[2]
)
