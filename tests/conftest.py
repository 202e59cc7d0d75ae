"""Suite-wide fixtures: no test touches the real $HOME or a shared patchkit home."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    """Point HOME, the XDG directories and PATCHKIT_HOME at fresh temporary directories for every test.

    With PATCHKIT_HOME set, the caches live in it too (see patchkit.paths); no test reads or writes the
    user's shared cache, and no variable of the caller's shell changes what a test sees.
    """
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("PATCHKIT_HOME", str(tmp_path_factory.mktemp("patchkit-home")))
    for variable in ("PATCHKIT_CACHE_DIR", "PATCHKIT_LOCK_WAIT", "PATCHKIT_TEST_PAUSE", "PATCHKIT_TEST_PAUSE_S"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("PATCHKIT_TARGET", raising=False)
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_INDEX_FILE", raising=False)
    return home
