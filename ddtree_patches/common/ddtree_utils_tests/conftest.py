"""The DDTree core module's tests, shared by every set that carries ``ddtree_utils.py`` (a set's
manifest names this folder in ``[verify.tests] shared``); the fixtures are the plugin ``core_fixtures``."""

pytest_plugins = ["core_fixtures"]
