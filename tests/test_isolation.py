"""The whole suite runs isolated (the root conftest.py): no test, and no patchkit a test starts, can
write to the user's home, the user's cache, the checkout's ``.patchkit/`` or ``/tmp``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from patchkit import paths

REPO = Path(__file__).resolve().parents[1]
VARIABLES = ("HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "PATCHKIT_HOME", "TMPDIR")


def test_every_place_patchkit_writes_is_inside_the_sessions_folder(tmp_path_factory):
    session = tmp_path_factory.getbasetemp().resolve()
    for variable in VARIABLES:
        assert Path(os.environ[variable]).resolve().is_relative_to(session), variable
    for place in (paths.home(), paths.cache_dir(), paths.user_cache_dir(), paths.envs_dir(), Path(tempfile.gettempdir())):
        assert place.resolve().is_relative_to(session), place
    assert not paths.home().resolve().is_relative_to(REPO), "never <checkout>/.patchkit"


def test_a_patchkit_started_by_a_test_writes_inside_the_sessions_folder_too(tmp_path_factory):
    """A subprocess with the suite's environment (what every CLI test starts)."""
    code = ("import tempfile; from patchkit import paths; "
            "print(paths.home(), paths.cache_dir(), paths.user_cache_dir(), tempfile.gettempdir(), sep='\\n')")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    session = tmp_path_factory.getbasetemp().resolve()
    for line in done.stdout.splitlines():
        assert Path(line).resolve().is_relative_to(session), line
