"""A bundle profile's ``trim`` rules: keep some CUDA kernels of a wheel's library (see :mod:`cudatrim`).

``[bundle.profiles.NAME.trim]`` maps a distribution to rules ``{ member, archs, keep, wheel_sha256,
reason }``: the wheel member (a host library) keeps the device images for ``archs`` of the
translation units whose name fully matches the regular expression ``keep``; every other image is
zeroed. ``wheel_sha256`` pins the wheel the rule was written for (a trim reads the library's layout,
so another build is refused before anything is written). The trimmed library travels either

- inside the wheel (``patchkit bundle --profile NAME``): the member replaced, its ``RECORD`` row
  rehashed, and the trim record added as ``<member>.trim.json`` (a ``RECORD`` row of its own), so pip
  installs it and the site holds the record beside the library; or
- alone (``--trimmed-archive FILE``): a ``.tar.xz`` of the trimmed members and their records, paths as
  installed under SITE, for a host whose SITE holds the rest of the profile already (ci/gpu/host's
  ``fa3-sm90-bf16.tar.xz``). It is reproducible: fixed owners, modes and times, entries in rule order.
"""

from __future__ import annotations

import base64
import calendar
import csv
import hashlib
import io
import json
import lzma
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from patchkit.errors import BadInput, Location
from patchkit.hostprep.cudatrim import TrimRecord, trim_library
from patchkit.results import to_jsonable

RECORD_SUFFIX = ".trim.json"


@dataclass(frozen=True)
class TrimRule:
    member: str
    archs: tuple[int, ...]
    keep: str
    reason: str
    wheel_sha256: str | None = None


def record_json(record: TrimRecord) -> bytes:
    """The trim record as written beside the library (stable: the archive's bytes depend on it)."""
    return (json.dumps(to_jsonable(record), indent=2) + "\n").encode()


def check_wheel(wheel: Path, sha256: str, rules: tuple[TrimRule, ...]) -> None:
    """Refuse a wheel other than the one the rules were written for."""
    for rule in rules:
        if rule.wheel_sha256 and rule.wheel_sha256 != sha256:
            raise BadInput(f"{wheel.name} has sha256 {sha256}, but the trim rule for {rule.member} was written "
                           f"for {rule.wheel_sha256}", location=Location(str(wheel)),
                           hint="bundle the pinned wheel, or check the new one's layout and update wheel_sha256")


def _extract(source: zipfile.ZipFile, member: str, target: Path) -> zipfile.ZipInfo:
    try:
        info = source.getinfo(member)
    except KeyError:
        raise BadInput(f"{source.filename}: no member {member} to trim",
                       hint="fix the trim rule's member (unzip -l the wheel)") from None
    with source.open(info) as data, open(target, "wb") as copy:
        shutil.copyfileobj(data, copy, 1 << 22)
    return info


def trim_members(wheel: Path, sha256: str, rules: tuple[TrimRule, ...], work: Path
                 ) -> list[tuple[TrimRule, zipfile.ZipInfo, Path, TrimRecord]]:
    """Each rule's member taken out of ``wheel`` and trimmed into ``work``: (rule, zip entry, trimmed
    file, record)."""
    check_wheel(wheel, sha256, rules)
    done = []
    with zipfile.ZipFile(wheel) as source:
        for number, rule in enumerate(rules):
            original, trimmed = work / f"member-{number}", work / f"member-{number}.trimmed"
            info = _extract(source, rule.member, original)
            record = trim_library(original, trimmed, member=rule.member, archs=rule.archs, keep=rule.keep,
                                  reason=rule.reason)
            original.unlink()
            done.append((rule, info, trimmed, replace(record, wheel=wheel.name, wheel_sha256=sha256)))
    return done


def _record_row(name: str, data_sha256: bytes, size: int) -> list[str]:
    digest = base64.urlsafe_b64encode(data_sha256).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(size)]


def _file_digest(path: Path) -> bytes:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.digest()


def rewrite_wheel(wheel: Path, trimmed: list[tuple[TrimRule, zipfile.ZipInfo, Path, TrimRecord]],
                  keep_member: Callable[[str], bool] = lambda name: True) -> None:
    """Rewrite ``wheel`` with the trimmed members in place of the originals and their records added;
    ``RECORD`` rows rehashed for those, unchanged for every other member. ``keep_member`` (a profile's
    slim rules) may drop other members at the same time; their rows go too."""
    replaced = {info.filename: (path, record) for _rule, info, path, record in trimmed}
    rewritten = wheel.with_suffix(".trim")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as out:
        record_name = next(m.filename for m in source.infolist() if m.filename.endswith(".dist-info/RECORD"))
        rows = {row[0]: row for row in csv.reader(io.StringIO(source.read(record_name).decode())) if row}
        for member in source.infolist():
            name = member.filename
            if name == record_name or (name not in replaced and not keep_member(name)):
                rows.pop(name, None)
                continue
            if name in replaced:
                path, record = replaced[name]
                with open(path, "rb") as data, out.open(member, "w", force_zip64=True) as copy:
                    shutil.copyfileobj(data, copy, 1 << 22)
                rows[name] = _record_row(name, _file_digest(path), path.stat().st_size)
                extra = record_json(record)
                side = zipfile.ZipInfo(name + RECORD_SUFFIX, member.date_time)
                side.external_attr = 0o644 << 16
                out.writestr(side, extra)
                rows[side.filename] = _record_row(side.filename, hashlib.sha256(extra).digest(), len(extra))
                continue
            with source.open(member) as data, out.open(member, "w", force_zip64=True) as copy:
                shutil.copyfileobj(data, copy, 1 << 22)
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([*rows.values(), [record_name, "", ""]])
        out.writestr(record_name, buffer.getvalue())
    rewritten.replace(wheel)


def _tar_info(name: str, size: int, mode: int, date_time: tuple[int, ...]) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.uid, info.gid, info.uname, info.gname = size, mode, 0, 0, "", ""
    info.mtime = calendar.timegm((*date_time[:6], 0, 0, 0))  # a zip time has no zone: read as UTC
    return info


def write_archive(path: Path, trimmed: list[tuple[TrimRule, zipfile.ZipInfo, Path, TrimRecord]]) -> None:
    """``path`` (.tar.xz, xz -9e): each trimmed member and its record, at its path under SITE. Owners,
    modes and times are fixed (times: the wheel member's), so the same wheel gives the same bytes."""
    partial = path.with_name(path.name + ".partial")
    with lzma.open(partial, "wb", preset=9 | lzma.PRESET_EXTREME) as packed, \
            tarfile.open(fileobj=packed, mode="w|", format=tarfile.USTAR_FORMAT) as archive:
        for _rule, info, file, record in trimmed:
            with open(file, "rb") as data:
                archive.addfile(_tar_info(info.filename, file.stat().st_size, 0o755, info.date_time), data)
            extra = record_json(record)
            archive.addfile(_tar_info(info.filename + RECORD_SUFFIX, len(extra), 0o644, info.date_time),
                            io.BytesIO(extra))
    partial.replace(path)
