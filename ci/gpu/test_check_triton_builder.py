"""ci/gpu/check_triton_builder.py on a machine without a GPU: the module it tests is the one patch 0001
adds, and without CUDA it says so and fails rather than reporting timings it did not take."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from patchkit.testing import patched_tree

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "ci" / "gpu" / "check_triton_builder.py"
SET_DIR = REPO_ROOT / "ddtree_patches" / "v1"


def load_checker():
    spec = importlib.util.spec_from_file_location("check_triton_builder", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extracted_module_is_the_patched_trees_file(tmp_path):
    checker = load_checker()
    extracted = checker.extract_module(tmp_path)
    applied = Path(patched_tree(SET_DIR)) / checker.MODULE
    assert extracted.read_bytes() == applied.read_bytes()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the timings would run")
def test_without_cuda_the_timings_are_refused_not_faked(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--no-tests"], capture_output=True, text=True,
                          env={**os.environ, "HOME": str(tmp_path)}, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no CUDA device: timings skipped" in done.stdout
    assert "module under test:" in done.stdout
