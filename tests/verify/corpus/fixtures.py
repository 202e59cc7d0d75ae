"""Session-wide state shared by the seeded-defect suite and the corpus: one patchkit home (so the
pinned verify environment is built once), one fetched base, one tree with v1 applied.

Both modules import these fixtures; the objects behind them are built once per process (``_SHARED``),
so the environment and the applied tree are shared even though each module registers the fixtures.
Set ``PATCHKIT_SEEDED_ENV_DIR`` to an existing folder of verify environments to reuse one across runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from patchkit.verify.api import VerifyContext

from .evaluate import REPO, SETS, applied_tree, patchkit, prepare_home, run_one  # noqa: F401  (re-exported)
from .evaluate import context as set_context

V1 = SETS / "v1"
_SHARED: dict[str, Any] = {}


def _once(key: str, build: Any) -> Any:
    if key not in _SHARED:
        _SHARED[key] = build()
    return _SHARED[key]


@pytest.fixture(scope="session")
def seeded_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PATCHKIT_HOME for the session: the verify environment and the base are built once."""
    def build() -> Path:
        return prepare_home(tmp_path_factory.mktemp("seeded-home"))

    return _once("home", build)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def pristine_base(seeded_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    def build() -> Path:
        base = tmp_path_factory.mktemp("seeded-base") / "tree"
        patchkit("base", "fetch", "--set", V1, "--dest", base, home=seeded_home)
        return base

    return _once("base", build)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def clean_tree(pristine_base: Path, seeded_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """v1 applied by ``patchkit apply`` to a clone of the base; seeded rows swap one file in and out."""
    def build() -> Path:
        return applied_tree(V1, seeded_home, tmp_path_factory.mktemp("seeded-tree") / "tree", base=pristine_base)

    return _once("tree", build)  # type: ignore[no-any-return]


def context(tree: Path, home: Path, config: dict[str, dict[str, Any]] | None = None) -> VerifyContext:
    """The verify context of v1 on ``tree`` with ``home``'s caches, ``[verify.<gate>]`` tables overridden."""
    ctx = set_context(V1, tree, home)
    if config:
        verify = dict(ctx.manifest.verify)
        for gate, table in config.items():
            verify[gate] = {**verify.get(gate, {}), **table}
        ctx = dataclasses.replace(ctx, manifest=dataclasses.replace(ctx.manifest, verify=verify))
    return ctx
