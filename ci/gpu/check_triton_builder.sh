#!/usr/bin/env bash
# The DDTree tree builder's Triton fast path on a GPU host, in one command:
#   ci/gpu/check_triton_builder.sh [--tree PATCHED_TREE] [--no-tests] [--no-bench] [...]
# Runs the set's tests with CUDA (tests/integration left out), then times
# build_ddtree_tree_from_topk with Triton on vs off; see check_triton_builder.py.
# PYTHON picks the interpreter (default python3): it needs torch (CUDA), triton, numpy, pytest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "${PYTHON:-python3}" "$here/check_triton_builder.py" "$@"
