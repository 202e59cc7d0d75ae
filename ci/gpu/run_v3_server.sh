#!/usr/bin/env bash
# The v3 set's (SGLang 0.5.23) real-server check in one command, on a GPU host with torch 2.14.1
# (CUDA 13) and network access to PyPI:
#
#   ci/gpu/run_v3_server.sh [--model M --draft-model D] [-- server args]
#
# It does NOT run on the H200 test host: 0.5.23 pins sglang-kernel 0.4.10, a CUDA 13 build against
# torch 2.14.1, which fails to load beside that host's torch 2.11 (undefined symbol
# c10::cuda::CUDAErrorLogCapture), and the host has no network and no room for torch 2.14.
#
# Steps: a venv under $OUT with sglang 0.5.23's own requirements (the wheel's Requires-Dist, so
# torch==2.14.1, sglang-kernel==0.4.10, flashinfer-python==0.7.2, transformers==5.19.0) and patchkit;
# the base tree fetched and the set applied (patchkit apply); then ci/gpu/run_v2_server.py with the
# v3 prompts: baseline, DFLASH, DDTREE and DDTREE without the overlap scheduler, every greedy output
# compared with the baseline's token for token. Without --model/--draft-model the tiny test models
# are written first (patchkit testmodels). Logs and summary.json go to $OUT when set.
# PYTHON picks the interpreter that makes the venv (default python3; 3.11-3.13).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
base_py="${PYTHON:-python3}"
out="${OUT:-$repo/.patchkit/logs/v3-server-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
venv="$out/venv"
if [ ! -x "$venv/bin/python" ]; then
    "$base_py" -m venv "$venv"
    "$venv/bin/pip" install -q "sglang==0.5.23" -e "$repo" > "$out/pip.log" 2>&1
fi
py="$venv/bin/python"
"$py" - <<'PY'
import sys, torch
major_minor = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if major_minor < (2, 14) or not torch.cuda.is_available():
    sys.exit(f"run_v3_server: needs torch >= 2.14 with CUDA (sglang 0.5.23's kernels); got torch "
             f"{torch.__version__}, cuda available: {torch.cuda.is_available()}")
PY
export PATCHKIT_HOME="$out/home"
tree="$PATCHKIT_HOME/trees/sglang-0.5.23"
(cd "$repo" && "$py" -m patchkit base fetch --set ddtree_patches/v3 --dest "$tree" \
    && "$py" -m patchkit apply --set ddtree_patches/v3 --target "$tree") > "$out/apply.log" 2>&1
args=("$@")
if ! printf '%s\n' "${args[@]}" | grep -qx -- '--model'; then
    (cd "$repo" && "$py" -m patchkit testmodels --out "$out/testmodels") > "$out/testmodels.log" 2>&1
    args=(--model "$out/testmodels/target" --draft-model "$out/testmodels/draft" "${args[@]}")
fi
OUT="$out" exec "$py" "$here/run_v2_server.py" --python "$py" --target "$tree" \
    --prompts "$repo/ddtree_patches/v3/smoke/prompts.jsonl" "${args[@]}"
