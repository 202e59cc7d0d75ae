#!/usr/bin/env bash
# Fetch the pinned SGLang base, apply the patch set, run every verification gate and write a JUnit
# report. Exit status: the first failing step's (verify: 0 clean, 1 findings, 3 a gate crashed).
#
#   PATCHKIT_SET    patch-set directory (default: the newest under ddtree_patches/)
#   PATCHKIT_JUNIT  JUnit report path (default: patchkit-verify.xml)
#   PATCHKIT        the patchkit command (default: install this checkout into .venv and use it)
#   PYTHON          interpreter for that venv (default: python3)
set -uo pipefail
cd "$(dirname "$0")/.."

junit=${PATCHKIT_JUNIT:-patchkit-verify.xml}
set_args=()
[ -n "${PATCHKIT_SET:-}" ] && set_args=(--set "$PATCHKIT_SET")

if [ -z "${PATCHKIT:-}" ]; then
    "${PYTHON:-python3}" -m venv .venv && .venv/bin/pip install -q -e . || exit 2
    PATCHKIT=.venv/bin/patchkit
fi

step() {
    echo "::group::patchkit $*"
    $PATCHKIT "$@"
    local status=$?
    echo "::endgroup::"
    if [ $status -ne 0 ]; then
        echo "patchkit $1 failed with exit status $status" >&2
        exit $status
    fi
}

step base fetch "${set_args[@]}"
step apply "${set_args[@]}"
step verify "${set_args[@]}" --junit "$junit"
