"""Fixtures for the gate tests: ``make_ctx`` comes from ``tests/verify/conftest.py`` (one definition):
example files become a real git tree with upstream history, a base commit and a patch commit, plus a
set directory with a complete manifest (see :mod:`patchkit.testing.verify`). HOME and PATCHKIT_HOME
are isolated by the suite-wide fixture in ``tests/conftest.py``."""
