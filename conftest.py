"""Isolation for the whole suite (tests/, the sets' own tests, ci/): from the first fixture on, HOME, the
XDG folders, PATCHKIT_HOME and the temporary directory point into a folder of the session, so nothing
(not even a session-scoped fixture such as the set's patched tree, nor a patchkit the tests start) writes
to the user's home, the user's cache (``~/.cache/patchkit``), the checkout's ``.patchkit/`` or ``/tmp``.
``tests/conftest.py`` then gives each test of ``tests/`` fresh ones of its own."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

#: What the session points at its own folder (tests/test_isolation.py and ci/gpu check it).
ISOLATED = ("HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "PATCHKIT_HOME", "TMPDIR")


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("session")
    for folder in ("home", "tmp"):
        (root / folder).mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("HOME", str(root / "home"))
    patch.setenv("XDG_CACHE_HOME", str(root / "home" / ".cache"))
    patch.setenv("XDG_DATA_HOME", str(root / "home" / ".local" / "share"))
    patch.setenv("XDG_CONFIG_HOME", str(root / "home" / ".config"))
    patch.setenv("PATCHKIT_HOME", str(root / "patchkit-home"))
    patch.delenv("PATCHKIT_CACHE_DIR", raising=False)
    # scratch folders of the patchkits the tests start (and of this process): inside the session's
    # folder, which pytest rotates, never left in /tmp (a test that kill -9s one leaves its folders)
    patch.setenv("TMPDIR", str(root / "tmp"))
    patch.setattr(tempfile, "tempdir", str(root / "tmp"))
    # pytest-xdist's workers export COLUMNS=80; the CLI under test would then wrap its tables at 80
    # columns in some runs and not in others. Outside a terminal it should use its own default.
    patch.delenv("COLUMNS", raising=False)
    yield
    patch.undo()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked ``long`` run first. The suite runs a file's tests on one worker (--dist
    loadfile), handing out files in collection order: a minute-long file handed out last would run
    alone on one core while the others sit idle. The sort is stable, so the rest keep their order."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
