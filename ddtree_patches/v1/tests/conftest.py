"""This set's own tests: what is about its base (integration/). The DDTree core fixtures are the shared
plugin ``core_fixtures`` (``ddtree_patches/common/ddtree_utils_tests``, on the path through pytest's
``pythonpath``: the tests gate and the checkout's pyproject.toml name it)."""

pytest_plugins = ["core_fixtures"]
