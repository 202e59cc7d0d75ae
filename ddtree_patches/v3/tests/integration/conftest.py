"""Integration tests: they import the patched tree's own ``sglang`` package (DDTreeVerifyInput, the
DDTreeWorkerV2 round, the graph-runner and scheduler sites, ServerArgs), not just ``ddtree_utils``;
where its CPU dependencies are missing, each module is skipped with the import error (``sglang_tree.py``
in the shared core tests says how).
"""

from pathlib import Path

from sglang_tree import import_tree_sglang

pytest_pycollect_makemodule = import_tree_sglang(
    Path(__file__).resolve().parents[2],
    ("sglang.srt.speculative.ddtree_info_v2", "sglang.srt.speculative.ddtree_worker_v2"),
)
