#!/usr/bin/env bash
# The v2 set's real-server check in one command (see run_v2_server.py's docstring):
#   ci/gpu/run_v2_server.sh --target TREE [--model M --draft-model D] [-- server args]
# Without --model/--draft-model it writes the tiny test models first (patchkit testmodels).
# Logs and summary.json go to $OUT when set. PYTHON picks the interpreter (default python3).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${PYTHON:-python3}"
out="${OUT:-$repo/.patchkit/logs/v2-server-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
args=("$@")
if ! printf '%s\n' "${args[@]}" | grep -qx -- '--model'; then
    (cd "$repo" && "$py" -m patchkit testmodels --out "$out/testmodels") > "$out/testmodels.log" 2>&1
    args=(--model "$out/testmodels/target" --draft-model "$out/testmodels/draft" "${args[@]}")
fi
OUT="$out" exec "$py" "$here/run_v2_server.py" --python "$py" "${args[@]}"
