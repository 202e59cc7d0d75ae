#!/usr/bin/env bash
# make_fa3_archive.sh [DIR] [-- patchkit bundle options]: the GPU host's optional fa3 archive.
#
# Writes DIR/fa3-sm90-bf16.tar.xz (DIR: .gpu-archives/ of this checkout) and its line in DIR/SHA256SUMS
# (added, or replaced), for go.sh's setup to unpack over the site. It is v2's `server-fa3` bundle profile
# (ddtree_patches/v2/manifest.toml) taken alone: pip downloads the profile's pinned sglang-kernel wheel,
# patchkit refuses it unless its sha256 is the trim rule's `wheel_sha256`, keeps the sm90 images of the
# translation units the rule's pattern names in sgl_kernel/flash_ops.abi3.so (every other image zeroed,
# headers intact) and packs the library with its trim record (sgl_kernel/flash_ops.abi3.so.trim.json)
# as a reproducible tar.xz (xz -9e; fixed owners, modes and times): the same wheel gives the same bytes.
# About 4 minutes and 3 GB of TMPDIR on 2 cores (the wheel is 383 MB, the library 1.12 GB unpacked).
#
# PYTHON: an interpreter with patchkit's dependencies (default: the checkout's .venv, else python3).
# Options after `--` go to `patchkit bundle`, e.g. `-- --no-index --find-links WHEEL_DIR` for a wheel
# already downloaded (its sha256 is checked all the same).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
DIR=$REPO/.gpu-archives
if [ $# -gt 0 ] && [ "$1" != -- ]; then DIR=$1; shift; fi
[ $# -eq 0 ] || { [ "$1" = -- ] && shift; }
PY=${PYTHON:-}
if [ -z "$PY" ]; then if [ -x "$REPO/.venv/bin/python" ]; then PY=$REPO/.venv/bin/python; else PY=python3; fi; fi
NAME=fa3-sm90-bf16.tar.xz

mkdir -p "$DIR"
cd "$REPO"
"$PY" -m patchkit bundle --set ddtree_patches/v2 --profile server-fa3 --trimmed-archive "$DIR/$NAME" \
  --python-version 3.12 --platform manylinux_2_34_x86_64 "$@"
cd "$DIR"
line=$(sha256sum "$NAME")
{ [ ! -f SHA256SUMS ] || grep -v "[[:space:]]\*\?$NAME\$" SHA256SUMS || true; echo "$line"; } > SHA256SUMS.new
mv SHA256SUMS.new SHA256SUMS
echo "$DIR/$NAME: $(stat -c %s "$NAME") bytes; SHA256SUMS: $line"
