"""Small synthetic CUDA host libraries for the trim tests: an ELF64 file whose ``.nv_fatbin`` holds one
fatbin per translation unit, with the entry layout nvcc writes (see patchkit.hostprep.cudatrim), and
the ``.nvFatBinSegment`` registration table pointing at them. Kilobytes instead of FA3's 1.12 GB."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

FATBIN_MAGIC, WRAPPER_MAGIC = 0xBA55ED50, 0x466243B1
SECTION = struct.Struct("<IIQQQQIIQQ")
ADDRESS_SHIFT = 0x200000  # the sections' load addresses differ from their file offsets, as in a real library


@dataclass(frozen=True)
class Image:
    arch: int
    compressed: bool = False
    kind: int = 2  # 1 PTX, 2 ELF


@dataclass
class Built:
    data: bytearray
    section_offset: int = 0
    section_size: int = 0
    fatbin_offsets: list[int] = field(default_factory=list)
    entry_offsets: list[list[int]] = field(default_factory=list)
    payloads: list[list[tuple[int, int]]] = field(default_factory=list)  # (offset, size) per entry
    segment_offset: int = 0

    def payload(self, unit: int, entry: int) -> bytes:
        offset, size = self.payloads[unit][entry]
        return bytes(self.data[offset:offset + size])


def _strings(*names: str) -> tuple[bytes, dict[str, int]]:
    table, at = b"\0", {}
    for name in names:
        at[name] = len(table)
        table += name.encode() + b"\0"
    return table, at


def cubin(unit: str | None, arch: int, seed: int, filler: int = 300) -> bytes:
    """A minimal ELF cubin: .strtab with nvcc's file-local symbol names of ``unit`` (none if None)."""
    symbols = b"\0_Z4mainv\0"
    if unit is not None:
        name = f"{unit}_cu"
        symbols += f"_ZN38_INTERNAL_1a2b3c4d_{len(name)}_{name}_9f8e7d6c4cute1_E\0".encode()
        symbols += f"_ZN38_INTERNAL_1a2b3c4d_{len(name)}_{name}_9f8e7d6c6kernelEv\0".encode()
    shstrtab, names = _strings(".strtab", ".shstrtab", ".text")
    code = hashlib.sha256(f"{unit}-{arch}-{seed}".encode()).digest() * (filler // 32 + 1)
    body = symbols + shstrtab + code
    shoff = 64 + len(body)
    header = bytearray(64)
    header[:16] = b"\x7fELF\x02\x01\x01" + bytes(9)
    struct.pack_into("<HHI", header, 16, 2, 190, 1)  # ET_EXEC, EM_CUDA
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 4, 2)  # e_shentsize, e_shnum, e_shstrndx
    sections = SECTION.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    sections += SECTION.pack(names[".strtab"], 3, 0, 0, 64, len(symbols), 0, 0, 1, 0)
    sections += SECTION.pack(names[".shstrtab"], 3, 0, 0, 64 + len(symbols), len(shstrtab), 0, 0, 1, 0)
    sections += SECTION.pack(names[".text"], 1, 6, 0, 64 + len(symbols) + len(shstrtab), len(code), 0, 0, 16, 0)
    return bytes(header) + body + sections


def entry(image: Image, payload: bytes) -> bytes:
    header = bytearray(64)
    compressed_size = len(payload) if image.compressed else 0
    struct.pack_into("<HHIQIIHHI", header, 0, image.kind, 0x0101, 64, len(payload), compressed_size, 0, 8, 1,
                     image.arch)
    flags = 0x11 | (0x8000 if image.compressed else 0) | (0x100000 if image.arch == 90 else 0)
    struct.pack_into("<Q", header, 40, flags)
    struct.pack_into("<Q", header, 56, len(payload) * 3 if image.compressed else 0)
    return bytes(header) + payload


def library(units: list[tuple[str | None, list[Image]]], *, padding: int = 0, wrappers: bool = True) -> Built:
    """An ELF64 host library: host code, then .nv_fatbin (one fatbin per unit, ``padding`` zero bytes
    after each), .nvFatBinSegment (one wrapper per fatbin) and the section table."""
    host_code = b"\x55\x48\x89\xe5 host code " * 40
    built = Built(bytearray())
    fatbin_section = bytearray()
    start = 64 + len(host_code)
    start += -start % 8
    for number, (unit, images) in enumerate(units):
        entries, offsets, payloads = b"", [], []
        for image in images:
            if image.compressed or image.kind == 1:
                payload = hashlib.sha256(f"packed-{unit}-{image.arch}".encode()).digest() * 9
            else:
                payload = cubin(unit, image.arch, number)
            offsets.append(start + len(fatbin_section) + 16 + len(entries))
            payloads.append((offsets[-1] + 64, len(payload)))
            entries += entry(image, payload)
        built.fatbin_offsets.append(start + len(fatbin_section))
        built.entry_offsets.append(offsets)
        built.payloads.append(payloads)
        fatbin_section += struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entries)) + entries + bytes(padding)
    segment = b"".join(struct.pack("<IIQQ", WRAPPER_MAGIC, 1, offset + ADDRESS_SHIFT, 0)
                       for offset in built.fatbin_offsets) if wrappers else b""
    shstrtab, names = _strings(".text", ".nv_fatbin", ".nvFatBinSegment", ".shstrtab")
    segment_offset = start + len(fatbin_section)
    shstrtab_offset = segment_offset + len(segment)
    shoff = shstrtab_offset + len(shstrtab)
    shoff += -shoff % 8
    header = bytearray(64)
    header[:16] = b"\x7fELF\x02\x01\x01" + bytes(9)
    struct.pack_into("<HHI", header, 16, 3, 62, 1)  # ET_DYN, x86-64
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 5 if wrappers else 4, 4 if wrappers else 3)
    sections = [SECTION.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                SECTION.pack(names[".text"], 1, 6, 64 + ADDRESS_SHIFT, 64, len(host_code), 0, 0, 16, 0),
                SECTION.pack(names[".nv_fatbin"], 1, 2, start + ADDRESS_SHIFT, start, len(fatbin_section), 0, 0, 8, 0)]
    if wrappers:
        sections.append(SECTION.pack(names[".nvFatBinSegment"], 1, 3, segment_offset + ADDRESS_SHIFT, segment_offset,
                                     len(segment), 0, 0, 8, 0))
    sections.append(SECTION.pack(names[".shstrtab"], 3, 0, 0, shstrtab_offset, len(shstrtab), 0, 0, 1, 0))
    data = bytearray(header) + host_code
    data += bytes(start - len(data)) + fatbin_section + segment + shstrtab
    data += bytes(shoff - len(data)) + b"".join(sections)
    built.data, built.section_offset, built.section_size = data, start, len(fatbin_section)
    built.segment_offset = segment_offset
    return built


#: Three archs per unit as sglang-kernel builds FA3; the second unit's sm90 image is compressed (its name
#: is read from its sm80 image), the fourth has none for sm90.
UNITS = [
    ("flash_prepare_scheduler", [Image(90), Image(80), Image(86)]),
    ("flash_fwd_hdim128_bf16_sm90", [Image(90, compressed=True), Image(80), Image(86)]),
    ("flash_fwd_hdim96_fp16_sm90", [Image(90), Image(80), Image(86)]),
    ("flash_fwd_hdim128_bf16_sm80", [Image(80), Image(86)]),
]
KEEP = "flash_fwd_hdim128_bf16_sm90|flash_prepare_scheduler"
