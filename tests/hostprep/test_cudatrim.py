"""The fatbin reader and trim on small synthetic host libraries (tests/hostprep/fatbins.py)."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.hostprep import cudatrim
from patchkit.hostprep.cudatrim import UnknownLayout, read_layout, trim_library
from tests.hostprep.fatbins import KEEP, UNITS, Image, library


def write(tmp_path: Path, built, name: str = "flash_ops.abi3.so") -> Path:
    path = tmp_path / name
    path.write_bytes(bytes(built.data))
    return path


def test_layout_names_every_unit_and_its_images(tmp_path):
    built = library(UNITS)
    layout = read_layout(write(tmp_path, built))
    assert [f.unit for f in layout.fatbins] == [unit for unit, _ in UNITS]
    assert [[(e.arch, e.compressed) for e in f.entries] for f in layout.fatbins] == [
        [(90, False), (80, False), (86, False)], [(90, True), (80, False), (86, False)],
        [(90, False), (80, False), (86, False)], [(80, False), (86, False)]]
    assert [f.offset for f in layout.fatbins] == built.fatbin_offsets
    assert [[(e.payload_offset, e.payload_size) for e in f.entries] for f in layout.fatbins] == built.payloads


def test_trim_zeroes_every_other_image_and_keeps_everything_else_byte_for_byte(tmp_path):
    built = library(UNITS)
    source = write(tmp_path, built)
    record = trim_library(source, tmp_path / "trimmed.so", member="sgl_kernel/flash_ops.abi3.so", archs=(90,),
                          keep=KEEP, reason="why")
    before, after = bytes(built.data), (tmp_path / "trimmed.so").read_bytes()
    assert len(after) == len(before)
    kept = {(0, 0), (1, 0)}  # the scheduler's and hdim128 bf16's sm90 images (the latter compressed)
    zeroed = [(offset, size) for unit, payloads in enumerate(built.payloads)
              for number, (offset, size) in enumerate(payloads) if (unit, number) not in kept]
    for offset, size in zeroed:
        assert after[offset:offset + size] == bytes(size)
    for unit, number in kept:
        offset, size = built.payloads[unit][number]
        assert after[offset:offset + size] == before[offset:offset + size] != bytes(size)
    outside = bytearray(before)  # host code, ELF and fatbin/entry headers, registrations: untouched
    for offset, size in zeroed:
        outside[offset:offset + size] = bytes(size)
    assert after == bytes(outside)
    assert record.kept_units == ("flash_prepare_scheduler", "flash_fwd_hdim128_bf16_sm90")
    assert (record.fatbins, record.kept_entries, record.zeroed_entries) == (4, 2, 9)
    assert record.zeroed_bytes == sum(size for _, size in zeroed)
    assert record.source_sha256 == hashlib.sha256(before).hexdigest()
    assert record.sha256 == hashlib.sha256(after).hexdigest() and record.size == len(after)


def test_zero_ranges_that_cross_the_copy_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(cudatrim, "_CHUNK", 97)  # every payload spans several chunks, ranges end mid-chunk
    built = library(UNITS)
    record = trim_library(write(tmp_path, built), tmp_path / "small.so", member="m", archs=(90,), keep=KEEP,
                          reason="r")
    monkeypatch.setattr(cudatrim, "_CHUNK", 1 << 22)
    again = trim_library(write(tmp_path, built, "again.so"), tmp_path / "big.so", member="m", archs=(90,), keep=KEEP,
                         reason="r")
    assert record.sha256 == again.sha256
    assert (tmp_path / "small.so").read_bytes() == (tmp_path / "big.so").read_bytes()


def test_zero_padding_between_fatbins_is_allowed(tmp_path):
    layout = read_layout(write(tmp_path, library(UNITS, padding=16)))
    assert len(layout.fatbins) == 4


def corrupt(built, offset: int, fmt: str, value: int) -> None:
    struct.pack_into(fmt, built.data, offset, value)


@pytest.mark.parametrize(("change", "words"), [
    (lambda b: corrupt(b, b.fatbin_offsets[1] + 4, "<H", 2), "fatbin version 2, header of 16 bytes"),
    (lambda b: corrupt(b, b.fatbin_offsets[1], "<I", 0xDEADBEEF), "magic 0xdeadbeef where a fatbin should start"),
    (lambda b: corrupt(b, b.entry_offsets[2][1] + 4, "<I", 72), "fatbin entry header of 72 bytes"),
    (lambda b: corrupt(b, b.entry_offsets[2][1], "<H", 7), "fatbin entry kind 7"),
    (lambda b: corrupt(b, b.entry_offsets[3][1] + 8, "<Q", 1 << 20), "a fatbin entry runs past its fatbin"),
    (lambda b: corrupt(b, b.fatbin_offsets[3] + 8, "<Q", 1 << 30), "a fatbin runs past .nv_fatbin"),
    (lambda b: corrupt(b, b.segment_offset + 24 + 8, "<Q", 12345), "points at 0x3039, where no fatbin starts"),
    (lambda b: corrupt(b, b.segment_offset, "<I", 1), "fatbin wrapper magic 0x1"),
])
def test_an_unknown_layout_is_refused_naming_the_offset_and_nothing_is_written(tmp_path, change, words):
    built = library(UNITS)
    change(built)
    source = write(tmp_path, built)
    with pytest.raises(UnknownLayout) as refused:
        trim_library(source, tmp_path / "out.so", member="m", archs=(90,), keep=KEEP, reason="r")
    assert words in refused.value.message and "unknown CUDA fatbin layout at byte 0x" in refused.value.message
    assert refused.value.location is not None and refused.value.location.file == str(source)
    assert "trim rule" in (refused.value.hint or "")
    assert not (tmp_path / "out.so").exists()


def test_non_zero_bytes_between_fatbins_are_refused(tmp_path):
    built = library(UNITS, padding=8)
    built.data[built.fatbin_offsets[1] - 3] = 7
    with pytest.raises(UnknownLayout, match="magic 0x"):
        read_layout(write(tmp_path, built))


def test_every_fatbin_must_be_registered_once(tmp_path):
    built = library(UNITS)
    first = bytes(built.data[built.segment_offset:built.segment_offset + 24])
    built.data[built.segment_offset + 3 * 24:built.segment_offset + 4 * 24] = first  # the 4th wrapper: the 1st again
    with pytest.raises(UnknownLayout, match=r"the fatbin at address 0x[0-9a-f]+ is not registered"):
        read_layout(write(tmp_path, built))


def test_registration_count_must_match_the_fatbins(tmp_path):
    built = library(UNITS)
    shoff, = struct.unpack_from("<Q", built.data, 0x28)
    segment_header = shoff + 3 * 64  # the section table: null, .text, .nv_fatbin, .nvFatBinSegment, .shstrtab
    assert struct.unpack_from("<Q", built.data, segment_header + 24)[0] == built.segment_offset
    struct.pack_into("<Q", built.data, segment_header + 32, 3 * 24)
    with pytest.raises(UnknownLayout, match=r"3 registered fatbins, 4 found in .nv_fatbin"):
        read_layout(write(tmp_path, built))


@pytest.mark.parametrize(("units", "words"), [
    ([("a_unit", [Image(90, compressed=True), Image(80, compressed=True)])],
     "fatbin with no translation-unit names in its uncompressed cubins"),
])
def test_a_fatbin_without_a_readable_unit_name_is_refused(tmp_path, units, words):
    with pytest.raises(UnknownLayout, match=words):
        read_layout(write(tmp_path, library(units)))


def test_a_fatbin_whose_cubins_disagree_on_the_unit_is_refused(tmp_path):
    built = library(UNITS)
    offset, size = built.payloads[0][1]  # the scheduler's sm80 cubin now names another unit
    payload = bytes(built.data[offset:offset + size])
    renamed = payload.replace(b"_26_flash_prepare_scheduler_cu", b"_26_flash_prepare_schedulex_cu")
    assert renamed != payload
    built.data[offset:offset + size] = renamed
    with pytest.raises(UnknownLayout, match=r"2 different \(flash_prepare_scheduler, flash_prepare_schedulex\)"):
        read_layout(write(tmp_path, built))


def test_not_an_elf_or_no_fatbin_section(tmp_path):
    plain = tmp_path / "plain.so"
    plain.write_bytes(b"#!/bin/sh\n" * 10)
    with pytest.raises(UnknownLayout, match="not an ELF image"):
        read_layout(plain)
    built = library(UNITS)
    section_names = built.data.index(b".nv_fatbin\0")
    built.data[section_names:section_names + 10] = b".nv_fatbiX"
    with pytest.raises(BadInput, match=r"has no .nv_fatbin section: it carries no CUDA kernels to trim"):
        read_layout(write(tmp_path, built))


def test_a_pattern_that_keeps_nothing_or_a_unit_without_the_arch_is_refused(tmp_path):
    source = write(tmp_path, library(UNITS))
    with pytest.raises(BadInput, match=r"keeps no translation unit \(of 4, e.g. flash_prepare_scheduler\)"):
        trim_library(source, tmp_path / "o.so", member="m", archs=(90,), keep="flash_fwd_hdim256.*", reason="r")
    with pytest.raises(BadInput, match=r"kept unit flash_fwd_hdim128_bf16_sm80 has no image for sm_90"):
        trim_library(source, tmp_path / "o.so", member="m", archs=(90,), keep=".*_sm80", reason="r")
    assert not (tmp_path / "o.so").exists()
