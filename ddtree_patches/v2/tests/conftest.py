"""This set's own tests: what is about its base (integration/). The DDTree core module's tests live in
``ddtree_patches/common/ddtree_utils_tests`` ([verify.tests] shared); their fixtures, helpers and
``sglang_tree`` serve these too, so a test file can be dropped into either folder."""

import os
import sys
from pathlib import Path

SET_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SET_DIR.parent / "common" / "ddtree_utils_tests"))
os.environ.setdefault("PATCHKIT_SET", str(SET_DIR))  # the core fixtures' tree when no PATCHKIT_TARGET

from core_fixtures import *  # noqa: E402, F403
