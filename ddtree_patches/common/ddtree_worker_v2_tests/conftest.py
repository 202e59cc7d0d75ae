"""Tests of DDTreeWorkerV2 and its verify input, shared by every set whose tree carries them (the set's
manifest names this folder in ``[verify.tests] shared``); they import the tree of ``$PATCHKIT_SET``."""

from sglang_tree import WORKER_V2_MODULES, import_tree_sglang

pytest_plugins = ["core_fixtures"]
pytest_pycollect_makemodule = import_tree_sglang(WORKER_V2_MODULES)
