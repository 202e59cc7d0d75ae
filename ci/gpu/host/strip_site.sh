#!/usr/bin/env bash
# strip_site.sh SITE_ARCHIVE OUT_ARCHIVE: the GPU host's site.tar.xz with the debug info of its shared objects
# removed (strip --strip-debug: symbols, dynamic tables and code are kept, so imports and calls are unchanged).
# xgrammar's libxgrammar_bindings.so ships with debug info (53.4 MB -> 3.0 MB stripped); without it the site
# archive leaves room for the fa3 archive in one 64 MiB transfer. Deterministic: names sorted, owners and
# times fixed.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SITE_ARCHIVE OUT_ARCHIVE" >&2; exit 2; }
src=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
out=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/site"
tar -xJf "$src" -C "$work/site"
find "$work/site" -name '*.so*' -type f -print0 | while IFS= read -r -d '' f; do
  if file "$f" | grep -q 'with debug_info'; then
    before=$(stat -c %s "$f"); strip --strip-debug "$f"; echo "stripped ${f#"$work"/site/}: $before -> $(stat -c %s "$f") bytes"
  fi
done
tar -C "$work/site" --sort=name --mtime='2026-12-03 00:00:00' --owner=0 --group=0 --numeric-owner -cf - . \
  | xz -9 -T2 > "$out.partial"
mv "$out.partial" "$out"
echo "$out: $(stat -c %s "$out") bytes, sha256 $(sha256sum "$out" | cut -c1-64)"
