"""ruff and mypy over patchkit/ and checks/, with the settings of pyproject.toml ([tool.ruff],
[tool.mypy]), so the README's one test command also lints and type-checks. Both tools come with the
``test`` extra; their whole report is the failure message."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: pip install -e '.[test]'")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=900)


def test_ruff_finds_nothing_in_patchkit_and_checks():
    done = run_tool("ruff", "check", "--no-cache", "patchkit", "checks")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_finds_nothing_in_patchkit_and_checks():
    done = run_tool("mypy")  # the files and the strictness are pyproject's [tool.mypy]
    assert done.returncode == 0, done.stdout + done.stderr
