#!/usr/bin/env bash
# The DDTree bench of a GPU host in one command:  ci/gpu/run_bench.sh [options] [-- server args]
# Runs ci/gpu/run_bench.py (see its docstring) with NVLink multicast kept off in NCCL, PyTorch and NVSHMEM.
# PYTHON picks the interpreter (default python3); everything else is passed through.
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python3}"
exec "$py" "$here/run_bench.py" --python "$py" "$@"
