"""The DDTree core module's tests, shared by every set that carries ``ddtree_utils.py`` (a set's
manifest names this folder in ``[verify.tests] shared``); the fixtures are in ``core_fixtures.py``."""

from core_fixtures import *  # noqa: F403
