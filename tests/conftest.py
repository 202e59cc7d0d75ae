"""Suite-wide fixtures: no test touches the real $HOME or a shared patchkit home."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    """Point HOME and PATCHKIT_HOME at fresh temporary directories for every test."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATCHKIT_HOME", str(tmp_path_factory.mktemp("patchkit-home")))
    monkeypatch.delenv("PATCHKIT_TARGET", raising=False)
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_INDEX_FILE", raising=False)
    return home
