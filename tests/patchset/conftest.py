"""Fixtures for the core tests: the tiny upstream and its locked 5-patch set, fresh per test."""

from __future__ import annotations

import pytest

from tests.patchset import helpers


@pytest.fixture(scope="session")
def template(tmp_path_factory):
    """Built once: (upstream repo, base commit, locked set dir). Tests copy the set, never edit it."""
    root = tmp_path_factory.mktemp("template")
    mp = pytest.MonkeyPatch()
    mp.setenv("PATCHKIT_HOME", str(root / "home"))
    mp.setenv("HOME", str(root / "userhome"))
    try:
        return helpers.build_template(root)
    finally:
        mp.undo()


@pytest.fixture
def fx(template, tmp_path) -> helpers.Fixture:
    """A private copy of the set and a freshly fetched base tree (git kind, local clone)."""
    upstream, commit, set_dir = template
    my_set = helpers.copy_set(set_dir, tmp_path / "set")
    target = tmp_path / "target"
    result = helpers.invoke("base", "fetch", "--set", str(my_set), "--dest", str(target))
    assert result.exit_code == 0, result.output
    return helpers.Fixture(upstream, commit, my_set, target)
