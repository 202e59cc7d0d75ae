"""Fixtures for the verify tests: real git trees and manifests in tmp_path, a private PATCHKIT_HOME."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patchkit.testing.verify import example_context
from patchkit.verify.api import VerifyContext


@pytest.fixture(autouse=True)
def no_verify_python_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's $PATCHKIT_VERIFY_PYTHON must not replace the environments under test."""
    monkeypatch.delenv("PATCHKIT_VERIFY_PYTHON", raising=False)


@pytest.fixture
def make_ctx(tmp_path: Path) -> Callable[..., VerifyContext]:
    """A VerifyContext for example-style files; ``manifest`` is merged into a complete manifest."""
    counter = iter(range(1000))

    def build(files: dict[str, str], manifest: dict[str, Any] | None = None) -> VerifyContext:
        return example_context(tmp_path / f"example{next(counter)}", files, manifest)

    return build
