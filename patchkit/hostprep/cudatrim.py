"""Keep only some CUDA kernels of a host library: zero the other device images, every header intact.

A CUDA extension (``sgl_kernel/flash_ops.abi3.so``, FA3: 1.12 GB, 1.03 GB of it device code) carries
its device code in the ELF section ``.nv_fatbin``: one *fatbin* per CUDA translation unit (TU), back
to back, each holding one *entry* per target architecture (an ELF cubin, possibly compressed, or PTX).
A server needs few of them (Hopper, bf16, its head dims). :func:`trim_library` copies the library with
the payload of every other entry overwritten by zeros: sizes, offsets, the ELF headers and every
fatbin and entry header stay as they were, so the host code and the CUDA runtime's registration table
(``.nvFatBinSegment``, one 24-byte wrapper per fatbin) still point at valid headers, and the zeros
compress to nothing. With CUDA's lazy module loading (the default since 12.2) a module is loaded when
one of its kernels is first launched, so a dropped kernel fails at its launch ("device kernel image is
invalid"); the trim record (:class:`TrimRecord`, written beside the library) names what was kept, so
``patchkit smoke``'s preflight can refuse a model that needs a dropped kernel before the server starts.

The layout read here (what nvcc and the CUDA 12 toolkit write, little-endian):

- fatbin header, 16 bytes: ``u32 magic 0xBA55ED50, u16 version 1, u16 header size 16, u64 size of
  the entries that follow``; fatbins follow each other, zero padding allowed between them;
- entry header, 64 bytes: ``u16 kind (1 PTX, 2 ELF), u16, u32 header size 64, u64 payload size,
  u32 compressed size, u32, u16, u16, u32 arch (90 = sm_90)`` at 0..31, ``u64 flags`` at 40
  (0x2000 / 0x8000: compressed), ``u64 uncompressed size`` at 56; the payload follows the header;
- the TU's name: nvcc mangles file-local symbols as ``_INTERNAL_<hash>_<n>_<file name, '.' as '_'>``
  where ``<n>`` is the length of the name (``..._27_flash_prepare_scheduler_cu...``); it is read from
  the string tables of the fatbin's uncompressed ELF cubins (a compressed sm90 cubin shares its
  fatbin, hence its name, with an uncompressed sm80 one).

Everything relied on is checked; anything else (a version, header size or kind not listed above, an
entry running past its fatbin, non-zero bytes between fatbins, a fatbin whose cubins disagree on, or
lack, a TU name, a registration table that does not point at the fatbins found) is refused as an
unknown layout, naming the file and the offset, before anything is written.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from patchkit.errors import BadInput, Location

FATBIN_MAGIC = 0xBA55ED50
FATBIN_VERSION = 1
FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
ENTRY_HEADER_SIZE = 64
ENTRY_PREFIX = struct.Struct("<HHIQIIHHI")  # kind, ?, header size, payload, compressed size, ?, ?, ?, arch
ENTRY_FLAGS_AT, ENTRY_UNCOMPRESSED_AT = 40, 56
KIND_PTX, KIND_ELF = 1, 2
FLAGS_COMPRESSED = 0x2000 | 0x8000  # LZ4 (CUDA 11.x) / zstd (CUDA 12.8+)
WRAPPER = struct.Struct("<IIQQ")  # __fatBinC_Wrapper_t: magic, version, fatbin pointer, unused
WRAPPER_MAGIC = 0x466243B1
SHT_STRTAB = 3
_INTERNAL = re.compile(rb"_INTERNAL_[0-9a-f]+_(\d+)_")
_CHUNK = 1 << 22


class UnknownLayout(BadInput):
    """The library is not laid out as this module knows; nothing was written."""


def _unknown(path: Path, offset: int, what: str) -> UnknownLayout:
    return UnknownLayout(f"unknown CUDA fatbin layout at byte {offset:#x}: {what}", location=Location(str(path)),
                         hint="this library was not built the way the trim rule expects (another wheel "
                              "version or CUDA toolkit?); check the wheel, or drop the trim rule")


@dataclass(frozen=True)
class Section:
    name: str
    kind: int  # sh_type
    offset: int  # in the file
    size: int
    address: int  # virtual address when loaded


@dataclass(frozen=True)
class Entry:
    """One device image of a fatbin: its header at ``offset``, its payload right after it."""

    offset: int
    kind: int
    arch: int
    flags: int
    payload_offset: int
    payload_size: int

    @property
    def compressed(self) -> bool:
        return bool(self.flags & FLAGS_COMPRESSED)


@dataclass(frozen=True)
class Fatbin:
    index: int
    offset: int  # of its header, in the file
    size: int  # header and entries
    unit: str  # the translation unit, e.g. flash_fwd_hdim128_bf16_sm90 (from flash_fwd_hdim128_bf16_sm90.cu)
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Layout:
    path: Path
    section: Section  # .nv_fatbin
    fatbins: tuple[Fatbin, ...]


# ------------------------------------------------------------------------------------------------ ELF


def _read_at(handle: BinaryIO, offset: int, size: int) -> bytes:
    handle.seek(offset)
    return handle.read(size)


def elf_sections(handle: BinaryIO, path: Path, base: int = 0, limit: int | None = None) -> list[Section]:
    """The section headers of the ELF64 little-endian image at ``base`` (a host library, or a cubin
    inside one: ``limit`` is then its size, and every section must lie inside it)."""
    ident = _read_at(handle, base, 64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF":
        raise _unknown(path, base, "not an ELF image")
    if ident[4] != 2 or ident[5] != 1:
        raise _unknown(path, base, "not a 64-bit little-endian ELF image")
    shoff, = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    end = limit
    if shnum == 0:
        return []
    if shentsize != 64 or shstrndx >= shnum or (end is not None and shoff + shnum * 64 > end):
        raise _unknown(path, base, f"ELF section table ({shnum} x {shentsize} bytes at {shoff:#x}) out of place")
    table = _read_at(handle, base + shoff, shnum * 64)
    raw = [struct.unpack_from("<IIQQQQIIQQ", table, i * 64) for i in range(shnum)]
    for _name, kind, _flags, _addr, offset, size, *_ in raw:
        if end is not None and kind != 8 and offset + size > end:  # 8: SHT_NOBITS occupies no bytes
            raise _unknown(path, base + offset, "an ELF section runs past its image")
    names = _read_at(handle, base + raw[shstrndx][4], raw[shstrndx][5])

    def name_of(at: int) -> str:
        stop = names.find(b"\0", at)
        return names[at:stop if stop >= 0 else len(names)].decode("ascii", "replace")

    return [Section(name_of(name), kind, base + offset, size, address)
            for name, kind, _flags, address, offset, size, *_ in raw]


def _section(sections: list[Section], name: str) -> Section | None:
    return next((s for s in sections if s.name == name), None)


# ------------------------------------------------------------------------------------------------ fatbins


def _entries(handle: BinaryIO, path: Path, start: int, end: int) -> Iterator[Entry]:
    at = start
    while at < end:
        header = _read_at(handle, at, ENTRY_HEADER_SIZE)
        if len(header) < ENTRY_HEADER_SIZE:
            raise _unknown(path, at, "a fatbin entry header is cut short")
        kind, _, header_size, payload, *_, arch = ENTRY_PREFIX.unpack_from(header)
        if kind not in (KIND_PTX, KIND_ELF):
            raise _unknown(path, at, f"fatbin entry kind {kind} (known: 1 PTX, 2 ELF)")
        if header_size != ENTRY_HEADER_SIZE:
            raise _unknown(path, at, f"fatbin entry header of {header_size} bytes (known: {ENTRY_HEADER_SIZE})")
        if at + header_size + payload > end:
            raise _unknown(path, at, "a fatbin entry runs past its fatbin")
        flags, = struct.unpack_from("<Q", header, ENTRY_FLAGS_AT)
        yield Entry(at, kind, arch, flags, at + header_size, payload)
        at += header_size + payload


def _unit_names(handle: BinaryIO, path: Path, entry: Entry) -> set[str]:
    """TU names in the string tables of one uncompressed ELF cubin (see the module docstring)."""
    found = set()
    for section in elf_sections(handle, path, entry.payload_offset, entry.payload_size):
        if section.kind != SHT_STRTAB:
            continue
        data = _read_at(handle, section.offset, section.size)
        for match in _INTERNAL.finditer(data):
            length = int(match.group(1))
            name = data[match.end():match.end() + length].decode("ascii", "replace")
            if len(name) == length:
                found.add(name[:-3] if name.endswith("_cu") else name)
    return found


def _unit_of(handle: BinaryIO, path: Path, offset: int, entries: list[Entry]) -> str:
    names: set[str] = set()
    for entry in entries:
        if entry.kind == KIND_ELF and not entry.compressed:
            names |= _unit_names(handle, path, entry)
    if len(names) != 1:
        what = "no" if not names else f"{len(names)} different ({', '.join(sorted(names))})"
        raise _unknown(path, offset, f"fatbin with {what} translation-unit names in its uncompressed cubins")
    return names.pop()


def read_layout(path: Path) -> Layout:
    """Every fatbin of the library's ``.nv_fatbin``, with its TU name and entries; checked as above."""
    with open(path, "rb") as handle:
        sections = elf_sections(handle, path)
        section = _section(sections, ".nv_fatbin")
        if section is None:
            raise BadInput(f"{path.name} has no .nv_fatbin section: it carries no CUDA kernels to trim",
                           location=Location(str(path)), hint="check the trim rule's member")
        fatbins = _walk(handle, path, section)
        _check_registrations(handle, path, _section(sections, ".nvFatBinSegment"), section, fatbins)
    return Layout(path, section, tuple(fatbins))


def _walk(handle: BinaryIO, path: Path, section: Section, *, names: bool = True) -> list[Fatbin]:
    """The fatbins of ``section``; ``names=False`` skips the TU names (a trimmed library's zeroed
    cubins have no string tables left to read them from)."""
    fatbins: list[Fatbin] = []
    at, end = section.offset, section.offset + section.size
    while at < end:
        if _read_at(handle, at, min(8, end - at)).strip(b"\0") == b"":
            at += 8  # zero padding between fatbins (8-byte alignment)
            continue
        header = _read_at(handle, at, FATBIN_HEADER.size)
        if len(header) < FATBIN_HEADER.size or at + FATBIN_HEADER.size > end:
            raise _unknown(path, at, "non-zero bytes after the last fatbin")
        magic, version, header_size, size = FATBIN_HEADER.unpack(header)
        if magic != FATBIN_MAGIC:
            raise _unknown(path, at, f"magic {magic:#x} where a fatbin should start (known: {FATBIN_MAGIC:#x})")
        if version != FATBIN_VERSION or header_size != FATBIN_HEADER.size:
            raise _unknown(path, at, f"fatbin version {version}, header of {header_size} bytes (known: 1, 16)")
        if at + header_size + size > end:
            raise _unknown(path, at, "a fatbin runs past .nv_fatbin")
        entries = list(_entries(handle, path, at + header_size, at + header_size + size))
        unit = _unit_of(handle, path, at, entries) if names else ""
        fatbins.append(Fatbin(len(fatbins), at, header_size + size, unit, tuple(entries)))
        at += header_size + size
    return fatbins


def _check_registrations(handle: BinaryIO, path: Path, segment: Section | None, section: Section,
                         fatbins: list[Fatbin]) -> None:
    """The runtime registers each fatbin through a wrapper in ``.nvFatBinSegment``: there must be one
    per fatbin found, each pointing at one (a pointer left to a relocation reads 0 and is not compared)."""
    if segment is None:
        return
    if segment.size % WRAPPER.size:
        raise _unknown(path, segment.offset,
                       f".nvFatBinSegment of {segment.size} bytes: not {WRAPPER.size}-byte wrappers")
    table = _read_at(handle, segment.offset, segment.size)
    starts = [section.address + fatbin.offset - section.offset for fatbin in fatbins]
    count = segment.size // WRAPPER.size
    if count != len(fatbins):
        raise _unknown(path, segment.offset, f"{count} registered fatbins, {len(fatbins)} found in .nv_fatbin")
    pointers = []
    for i in range(count):
        magic, _version, pointer, _ = WRAPPER.unpack_from(table, i * WRAPPER.size)
        if magic != WRAPPER_MAGIC:
            raise _unknown(path, segment.offset + i * WRAPPER.size, f"fatbin wrapper magic {magic:#x}")
        if pointer and pointer not in starts:
            raise _unknown(path, segment.offset + i * WRAPPER.size,
                           f"fatbin wrapper {i} points at {pointer:#x}, where no fatbin starts")
        pointers.append(pointer)
    if all(pointers) and sorted(pointers) != sorted(starts):
        missed = sorted(set(starts) - set(pointers))
        raise _unknown(path, segment.offset, f"the fatbin at address {missed[0]:#x} is not registered "
                                             "(another is registered twice)")


# ------------------------------------------------------------------------------------------------ trimming


@dataclass(frozen=True)
class TrimRecord:
    """What a trim kept, written as JSON beside the trimmed library (``<member>.trim.json``)."""

    member: str  # path inside the wheel, as installed under SITE
    reason: str
    archs: tuple[int, ...]
    keep: str  # the TU-name pattern (a full match keeps the TU's entries for ``archs``)
    source_sha256: str  # the library as the wheel shipped it
    source_size: int
    sha256: str  # the trimmed library
    size: int
    fatbins: int
    kept_units: tuple[str, ...]
    kept_entries: int
    zeroed_entries: int
    zeroed_bytes: int
    wheel: str | None = None  # the source wheel's file name and sha256, when trimmed from a wheel
    wheel_sha256: str | None = None


@dataclass(frozen=True)
class TrimPlan:
    kept_units: tuple[str, ...]
    kept_entries: int
    zeroed: tuple[tuple[int, int], ...]  # (file offset, size), ascending


def plan_trim(layout: Layout, archs: tuple[int, ...], keep: str) -> TrimPlan:
    """Keep the entries for ``archs`` of every TU whose name fully matches ``keep``; zero the rest.
    A pattern that keeps nothing, or a kept TU without an entry for each arch, is refused."""
    pattern = re.compile(keep)
    kept_units, kept_entries, zeroed = [], 0, []
    for fatbin in layout.fatbins:
        keep_unit = pattern.fullmatch(fatbin.unit) is not None
        if keep_unit:
            kept_units.append(fatbin.unit)
            missing = sorted(set(archs) - {e.arch for e in fatbin.entries})
            if missing:
                raise BadInput(f"{layout.path.name}: kept unit {fatbin.unit} has no image for sm_{missing[0]}",
                               location=Location(str(layout.path)), hint="fix the trim rule's archs")
        for entry in fatbin.entries:
            if keep_unit and entry.arch in archs:
                kept_entries += 1
            elif entry.payload_size:
                zeroed.append((entry.payload_offset, entry.payload_size))
    if not kept_units:
        raise BadInput(f"{layout.path.name}: the pattern {keep!r} keeps no translation unit "
                       f"(of {len(layout.fatbins)}, e.g. {layout.fatbins[0].unit if layout.fatbins else 'none'})",
                       location=Location(str(layout.path)), hint="fix the trim rule's keep pattern")
    return TrimPlan(tuple(kept_units), kept_entries, tuple(zeroed))


def _zeroed_copy(source: Path, target: Path, zeroed: tuple[tuple[int, int], ...]) -> tuple[str, str]:
    """Copy ``source`` to ``target`` with ``zeroed`` ranges overwritten by zeros, in one pass;
    returns (sha256 of source, sha256 of target)."""
    before, after = hashlib.sha256(), hashlib.sha256()
    ranges, index = list(zeroed), 0
    with open(source, "rb") as reader, open(target, "wb") as writer:
        position = 0
        while chunk := reader.read(_CHUNK):
            before.update(chunk)
            buffer = bytearray(chunk)
            end = position + len(chunk)
            while index < len(ranges) and ranges[index][0] < end:
                start, size = ranges[index]
                low, high = max(start, position), min(start + size, end)
                buffer[low - position:high - position] = bytes(high - low)
                if start + size > end:
                    break  # the range goes on into the next chunk
                index += 1
            after.update(buffer)
            writer.write(buffer)
            position = end
    return before.hexdigest(), after.hexdigest()


def trim_library(source: Path, target: Path, *, member: str, archs: tuple[int, ...], keep: str,
                 reason: str) -> TrimRecord:
    """Write ``target``: ``source`` with every device image outside (``keep``, ``archs``) zeroed. The
    written file is read back: its layout must equal the source's (same fatbins, entries, names)."""
    layout = read_layout(source)
    plan = plan_trim(layout, archs, keep)
    source_sha, sha = _zeroed_copy(source, target, plan.zeroed)
    if _shape(read_layout_headers(target, layout.section)) != _shape(layout.fatbins):
        raise BadInput(f"{target}: the trimmed library's fatbin headers differ from the source's",
                       hint="a bug in patchkit's trim: report it")
    return TrimRecord(member, reason, archs, keep, source_sha, source.stat().st_size, sha, target.stat().st_size,
                      len(layout.fatbins), plan.kept_units, plan.kept_entries, len(plan.zeroed),
                      sum(size for _, size in plan.zeroed))


def read_layout_headers(path: Path, section: Section) -> list[Fatbin]:
    """The fatbins of ``section`` (located in the source) by their headers only, without TU names."""
    with open(path, "rb") as handle:
        return _walk(handle, path, section, names=False)


def _shape(fatbins: tuple[Fatbin, ...] | list[Fatbin]) -> list[tuple[int, int, tuple[Entry, ...]]]:
    return [(f.offset, f.size, f.entries) for f in fatbins]
