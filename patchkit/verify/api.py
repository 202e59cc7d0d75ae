"""The gate API: what a verification gate is and what it may read. Gates live in ``checks/`` (one
module per gate) and are listed, in pipeline order, in ``checks.registry.GATES``.

A gate module satisfies :class:`Gate`: a ``NAME``, a one-line ``DESCRIPTION``, ``run(ctx)`` returning
findings, and ``EXAMPLES``: passing and failing examples that the test suite turns into tests.

This module imports nothing else from :mod:`patchkit.verify`, so a gate, the runner, the environments
and the cache can all depend on it without a cycle.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from patchkit.manifest import Manifest


class Severity(str, enum.Enum):
    """How much a finding weighs: an error fails its gate; warnings and info rows are reported only."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, kw_only=True)
class Finding:
    gate: str
    severity: Severity
    file: str  # path relative to the target tree root ("manifest.toml" for the set's manifest)
    line: int | None = None
    message: str
    hint: str | None = None


@dataclass(frozen=True, kw_only=True)
class Example:
    """A small input that a gate must pass (no blocking finding) or fail (a finding matching ``expect``)."""

    name: str
    files: Mapping[str, str]  # tree-relative path -> content (``@base/`` and ``@set/`` prefixes: see tests)
    passes: bool
    expect: str | None = None  # substring of a finding's message, for failing examples
    config: Mapping[str, Any] = field(default_factory=dict)  # the gate's [verify.<gate>] table


def _silent(text: str) -> None:
    """The default progress sink: gates run the same whether or not someone is watching."""


@dataclass(frozen=True, kw_only=True)
class VerifyContext:
    """Everything a gate may read. Gates never modify the target tree."""

    root: Path  # target tree root (holds python/sglang/...)
    set_dir: Path  # the patch-set directory (manifest.toml, series, patches, expectations)
    manifest: Manifest  # the set's manifest, read by the one reader
    base_commit: str  # the base's commit id: with the touched files' contents it pins every file a gate sees
    touched: tuple[str, ...]  # tree-relative paths the series touches or creates
    cache_dir: Path  # gate result cache, keyed by content hashes
    env_dir: Path  # where isolated environments are created and cached
    progress: Callable[[str], None] = field(default=_silent, compare=False, repr=False)  # slow steps say what they do
    #: the command line's settings of a gate's table, over the manifest's (``--strict-coverage``:
    #: ``{"tests": {"strict_coverage": True}}``)
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # folders outside the set that the manifest names and that are not there (set-relative, as written):
    # reported once when the set is loaded, so a gate leaves out what their absence alone would make it report
    missing_references: frozenset[str] = frozenset()

    @classmethod
    def for_tree(cls, root: Path, set_dir: Path, manifest: Manifest, base_commit: str) -> VerifyContext:
        """A context for scanning a whole tree (no touched files), with the per-user caches."""
        from patchkit import paths

        return cls(root=root, set_dir=set_dir, manifest=manifest, base_commit=base_commit, touched=(),
                   cache_dir=paths.verify_cache_dir().resolve(), env_dir=paths.envs_dir().resolve())

    def gate_config(self, gate: str) -> dict[str, Any]:
        """The manifest's ``[verify.<gate>]`` table (empty when absent), with the command line's settings."""
        return {**self.manifest.verify_table(gate), **self.overrides.get(gate, {})}


class Gate(Protocol):
    """A gate module. The members are read-only properties so that a module's constants satisfy them."""

    @property
    def NAME(self) -> str: ...

    @property
    def DESCRIPTION(self) -> str: ...

    @property
    def EXAMPLES(self) -> Sequence[Example]: ...

    def run(self, ctx: VerifyContext) -> list[Finding]: ...
