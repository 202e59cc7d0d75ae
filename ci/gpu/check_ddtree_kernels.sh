#!/usr/bin/env bash
# The DDTree round's fused kernels on a GPU host, in one command:
#   PATCHKIT_TARGET=DIR ci/gpu/check_ddtree_kernels.sh [--tree DIR] [--no-tests] [--no-bench] [--no-sweep] [...]
# DIR holds python/sglang/srt/speculative/ddtree_utils.py (without it: the file the set's patch adds).
# Preflight of every fused entry point, the set's tests on CUDA (tests/integration left out), then
# benchmarks/ddtree_hot_path.py; logs, the benchmark's markdown + JSON and summary.json go under
# $OUT when set. Well within 8 minutes; see check_ddtree_kernels.py.
# PYTHON picks the interpreter (default python3): it needs torch (CUDA), triton, numpy, pytest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec "${PYTHON:-python3}" "$here/check_ddtree_kernels.py" "$@"
