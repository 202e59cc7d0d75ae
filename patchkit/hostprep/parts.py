"""``patchkit bundle --split-mib N``: a bundle too big for one transfer, as parts that install together.

The bundle folder is written as usual; then ``OUT/parts/`` gets it as one tar stream cut into
``bundle.tar.000``, ``bundle.tar.001``, ... of at most N MiB each, a list ``PARTS`` (every part's
sha256, size and name, and the sha256 of the whole stream) and ``install-parts.sh``. Each transfer
carries one part; the first also carries ``PARTS`` and ``install-parts.sh`` (its part is smaller by
:data:`RESERVED` bytes, so that transfer fits N MiB as well). On the host, with every part beside it,
``sh install-parts.sh [PYTHON] [SITE] [TREE]`` checks every part before it unpacks anything (a missing
or corrupt one is named, exit 2), joins them, checks the whole stream, unpacks ``bundle/`` beside
itself and runs the bundle's own ``install.sh`` with the same arguments.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from patchkit.errors import BadInput

MIB = 1 << 20
RESERVED = 64 << 10  # room in the first transfer for PARTS and install-parts.sh
PART_PREFIX = "bundle.tar."


@dataclass(frozen=True)
class Part:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Parts:
    folder: Path
    mib: int
    parts: tuple[Part, ...]
    sha256: str  # of the joined stream
    size: int
    install_command: str


class _PartWriter:
    """A write-only stream that cuts what it is given into part files of bounded size."""

    def __init__(self, folder: Path, limits: tuple[int, int]):
        self.folder, self.first_limit, self.limit = folder, limits[0], limits[1]
        self.parts: list[Part] = []
        self.whole = hashlib.sha256()
        self.size = 0
        self._handle: IO[bytes] | None = None
        self._digest = hashlib.sha256()
        self._written = 0

    def _open_next(self) -> None:
        self._close_part()
        self._handle = open(self.folder / f"{PART_PREFIX}{len(self.parts):03d}", "wb")  # noqa: SIM115 (closed by _close_part)
        self._digest, self._written = hashlib.sha256(), 0

    def _close_part(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self.parts.append(Part(Path(self._handle.name).name, self._written, self._digest.hexdigest()))
            self._handle = None

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            limit = self.first_limit if len(self.parts) == 0 else self.limit
            if self._handle is None or self._written >= limit:
                self._open_next()
                limit = self.first_limit if len(self.parts) == 0 else self.limit
            assert self._handle is not None
            piece = view[:limit - self._written]
            self._handle.write(piece)
            self._digest.update(piece)
            self.whole.update(piece)
            self._written += len(piece)
            self.size += len(piece)
            view = view[len(piece):]
        return len(data)

    def __enter__(self) -> _PartWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._close_part()


def _members(bundle: Path, skip: Path) -> list[Path]:
    """The bundle's files and folders but ``skip``, in a fixed order (the parts' bytes depend on it)."""
    return sorted((p for p in bundle.rglob("*") if p != skip and skip not in p.parents),
                  key=lambda p: p.relative_to(bundle).parts)


def split_bundle(bundle: Path, mib: int) -> Parts:
    """Write ``bundle/parts/`` (see the module docstring) from the bundle folder's current content."""
    if mib < 1:
        raise BadInput(f"--split-mib {mib}: a part must be at least 1 MiB", hint="e.g. --split-mib 60")
    folder = bundle / "parts"
    if folder.exists():
        raise BadInput(f"{folder} exists already", hint="choose a fresh --out")
    folder.mkdir()
    writer = _PartWriter(folder, (mib * MIB - RESERVED, mib * MIB))
    with writer, tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as archive:  # type: ignore[call-overload]
        for path in _members(bundle, folder):
            info = archive.gettarinfo(str(path), "bundle/" + path.relative_to(bundle).as_posix())
            info.uid, info.gid, info.uname, info.gname, info.mtime = 0, 0, "", "", 0
            if path.is_file():
                with open(path, "rb") as data:
                    archive.addfile(info, data)
            else:
                archive.addfile(info)
    listing = "".join(f"{p.sha256} {p.size} {p.name}\n" for p in writer.parts)
    (folder / "PARTS").write_text(f"# {len(writer.parts)} parts of at most {mib} MiB; the joined stream: "
                                  f"sha256 {writer.whole.hexdigest()} size {writer.size}\n{listing}"
                                  f"{writer.whole.hexdigest()} {writer.size} -\n")
    (folder / "install-parts.sh").write_text(INSTALL_PARTS_SH)
    (folder / "install-parts.sh").chmod(0o755)
    small = sum((folder / name).stat().st_size for name in ("PARTS", "install-parts.sh"))
    assert small <= RESERVED, "PARTS and install-parts.sh outgrew the first part's reserve"
    return Parts(folder, mib, tuple(writer.parts), writer.whole.hexdigest(), writer.size,
                 "sh install-parts.sh [PYTHON] [SITE] [TREE]")


# PARTS lines: "SHA256 SIZE NAME" per part, then "SHA256 SIZE -" for the joined stream; '#' lines are notes.
INSTALL_PARTS_SH = r"""#!/bin/sh
# Join this bundle's parts and install it: sh install-parts.sh [PYTHON] [SITE] [TREE]
# (the arguments of the bundle's install.sh). Every part is checked before anything is unpacked.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${1:-python3}
sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -c1-64
  else "$py" -c 'import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""): h.update(b)
print(h.hexdigest())' "$1"; fi
}
[ -f "$here/PARTS" ] || { echo "install-parts.sh: PARTS is missing beside this script" >&2; exit 2; }
bad=0; names=""; total=0; count=0; whole=""
while read -r sha size name; do
  case "$sha" in ''|'#'*) continue ;; esac
  [ "$name" != - ] || { whole=$sha; continue; }
  count=$((count + 1))
  if [ ! -f "$here/$name" ]; then
    echo "install-parts.sh: part $name is missing (copy it next to this script)" >&2; bad=1; continue
  fi
  got=$(sha256_of "$here/$name")
  if [ "$got" != "$sha" ]; then
    echo "install-parts.sh: part $name is corrupt: sha256 $got, expected $sha (copy it again)" >&2; bad=1; continue
  fi
  names="$names $name"; total=$((total + size))
done < "$here/PARTS"
[ -n "$whole" ] || { echo "install-parts.sh: PARTS has no line for the joined stream (SHA256 SIZE -)" >&2; bad=1; }
[ $bad = 0 ] || { echo "install-parts.sh: nothing unpacked" >&2; exit 2; }
joined="$here/.bundle.tar.joined"
(cd "$here" && cat $names) > "$joined"
got=$(sha256_of "$joined")
if [ "$got" != "$whole" ]; then
  rm -f "$joined"; echo "install-parts.sh: the joined parts have sha256 $got, expected $whole" >&2; exit 2
fi
rm -rf "$here/bundle"
tar -xf "$joined" -C "$here"
rm -f "$joined"
echo "install-parts.sh: $count parts checked and joined ($total bytes) into $here/bundle"
exec sh "$here/bundle/install.sh" "$@"
"""
