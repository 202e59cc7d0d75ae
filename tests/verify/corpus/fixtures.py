"""Session-wide state shared by the seeded-defect suite and the corpus: one patchkit home (so the
pinned verify environment is built once), one fetched base, one tree with v1 applied.

Both modules import these fixtures; the objects behind them are built once per process (``_SHARED``),
so the environment and the applied tree are shared even though each module registers the fixtures.
Set ``PATCHKIT_SEEDED_ENV_DIR`` to an existing folder of verify environments to reuse one across runs.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from patchkit.verify.api import VerifyContext
from patchkit.verify.run import build_context, run_gate

REPO = Path(__file__).resolve().parents[3]
V1 = REPO / "ddtree_patches" / "v1"
_SHARED: dict[str, Any] = {}


def patchkit(*args: object, home: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real CLI, as a user runs it."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PATCHKIT_HOME": str(home), "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=1800)
    if check:
        assert done.returncode == 0, f"patchkit {args[0]} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _once(key: str, build: Any) -> Any:
    if key not in _SHARED:
        _SHARED[key] = build()
    return _SHARED[key]


@pytest.fixture(scope="session")
def seeded_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PATCHKIT_HOME for the session: the verify environment and the base are built once."""
    def build() -> Path:
        home = tmp_path_factory.mktemp("seeded-home")
        shared = os.environ.get("PATCHKIT_SEEDED_ENV_DIR")
        if shared:
            (home / "envs").symlink_to(Path(shared).resolve())
        return home

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
        tree = tmp_path_factory.mktemp("seeded-tree") / "tree"
        subprocess.run(["git", "clone", "-q", str(pristine_base), str(tree)], check=True)
        patchkit("apply", "--set", V1, "--target", tree, home=seeded_home)
        return tree

    return _once("tree", build)  # type: ignore[no-any-return]


def context(tree: Path, home: Path, config: dict[str, dict[str, Any]] | None = None) -> VerifyContext:
    """The verify context of v1 on ``tree`` with ``home``'s caches, ``[verify.<gate>]`` tables overridden."""
    old = os.environ.get("PATCHKIT_HOME")
    os.environ["PATCHKIT_HOME"] = str(home)
    try:
        ctx = build_context(V1, tree)
    finally:
        if old is None:
            os.environ.pop("PATCHKIT_HOME", None)
        else:
            os.environ["PATCHKIT_HOME"] = old
    if config:
        verify = dict(ctx.manifest.verify)
        for gate, table in config.items():
            verify[gate] = {**verify.get(gate, {}), **table}
        ctx = dataclasses.replace(ctx, manifest=dataclasses.replace(ctx.manifest, verify=verify))
    return ctx


def run_one(ctx: VerifyContext, gate: str) -> Any:
    """Run one registered gate in process, as the runner does (a refusal becomes a finding)."""
    from patchkit.checks.registry import GATES

    return run_gate(gate, GATES.__getitem__, ctx)
