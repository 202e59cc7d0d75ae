"""What a verification gate is. Gates live in ``checks/`` (one module per gate) and are listed,
in pipeline order, in ``checks.registry.GATES``.

A gate module satisfies :class:`Gate`: a ``NAME``, a one-line ``DESCRIPTION``, ``run(ctx)`` returning
findings, and ``EXAMPLES``: passing and failing examples that the test suite turns into tests.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    gate: str
    severity: Severity
    file: str  # path relative to the target tree root
    line: int | None
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class Example:
    """A small input that a gate must pass (``findings == 0``) or fail (a finding matching ``expect``)."""

    name: str
    files: dict[str, str]  # tree-relative path -> content
    passes: bool
    expect: str | None = None  # substring of a finding's message, for failing examples
    config: dict[str, Any] = field(default_factory=dict)


class Gate(Protocol):
    NAME: str
    DESCRIPTION: str
    EXAMPLES: tuple[Example, ...]

    def run(self, ctx: Any) -> list[Finding]: ...


def tree_path(root: Path, rel: str) -> Path:
    return root / rel


@dataclass(frozen=True)
class VerifyContext:
    """Everything a gate may read. Gates never modify the target tree."""

    root: Path  # target tree root (holds python/sglang/...)
    set_dir: Path  # the patch-set directory (manifest.toml, series, patches, expectations)
    manifest: dict[str, Any]  # the parsed manifest.toml
    touched: tuple[str, ...]  # tree-relative paths the series touches or creates
    cache_dir: Path  # gate result cache, keyed by content hashes
    env_dir: Path  # where isolated environments are created and cached

    def gate_config(self, gate: str) -> dict[str, Any]:
        """The manifest's ``[verify.<gate>]`` table (empty when absent)."""
        return dict(self.manifest.get("verify", {}).get(gate, {}))

    def isolated_python(self) -> Path:
        """The interpreter of the isolated CPU environment pinned in ``[verify.env]`` (created on demand)."""
        from patchkit.verify.envs import ensure_env  # lazy: building an env is the slow path

        return ensure_env(self.manifest.get("verify", {}).get("env", {}), self.env_dir)
