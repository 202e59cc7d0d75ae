"""Isolation for the whole suite (tests/, the sets' own tests, ci/): from the first fixture on, HOME and
PATCHKIT_HOME point at a temporary folder of the session, so nothing (not even a session-scoped fixture
such as the set's patched tree) writes to the user's home or the checkout's ``.patchkit/``.
``tests/conftest.py`` then gives each test of ``tests/`` fresh ones of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("session")
    (root / "home").mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("HOME", str(root / "home"))
    patch.setenv("PATCHKIT_HOME", str(root / "patchkit-home"))
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
