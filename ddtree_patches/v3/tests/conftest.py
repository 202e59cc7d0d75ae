"""This set's own tests: what is about its base (integration/: the worker, dispatch, server args).

The tests of the DDTree core module live once, in ``ddtree_patches/common/ddtree_utils_tests`` (named
by ``[verify.tests] shared`` in the manifest), and run against this set's tree with these. Their
fixtures (``ddtree_utils``, ``device``, ``cuda``) and helpers (``_kernel_helpers``,
``ddtree_heap_reference``) serve a test of the set's own too, so a test file can be dropped into either
folder; ``PATCHKIT_SET`` names this set to them when no ``PATCHKIT_TARGET`` is given.
"""

import os
import sys
from pathlib import Path

SET_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SET_DIR.parent / "common" / "ddtree_utils_tests"))
os.environ.setdefault("PATCHKIT_SET", str(SET_DIR))

from core_fixtures import *  # noqa: E402, F403
