"""A patch set on disk: ``series``, the ``git format-patch`` files, and their integrity vs the lock.

Headers are parsed with ``git mailinfo`` (what ``git am`` uses), the exact inverse of the
``git format-patch`` output that ``patchkit refresh`` writes, so apply -> refresh round-trips
byte for byte. DEP-3 fields (``Upstream-Status:``, ``Origin:``, ...) in the description are kept
verbatim in the commit message and exposed as :attr:`Patch.fields`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from patchkit import fsutil, paths
from patchkit import manifest as manifest_mod
from patchkit.errors import BadInput, Location
from patchkit.git import Repo
from patchkit.patchset import transaction

SERIES_NAME = "series"
TRAILER_SET = "Patchkit-Set"
TRAILER_PATCH = "Patchkit-Patch"
DEP3_KEYS = ("Description", "Origin", "Bug", "Forwarded", "Applied-Upstream", "Last-Update", "Upstream-Status")
#: Accepted ``Upstream-Status`` values (the Yocto/DEP-3 vocabulary).
UPSTREAM_STATUSES = ("Pending", "Submitted", "Accepted", "Denied", "Inappropriate", "Backport", "Inactive-Upstream")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_TRAILER_BLOCK = re.compile(r"\n" + TRAILER_SET + r": [^\n]*\n" + TRAILER_PATCH + r": ([^\n]*)\n\Z")


@dataclass(frozen=True, kw_only=True)
class SeriesEntry:
    name: str
    line: int


@dataclass(frozen=True, kw_only=True)
class PatchHeader:
    author_name: str
    author_email: str
    date: str  # RFC 2822, as in the patch
    subject: str
    body: str  # description after the subject, without trailing blank lines

    def message(self) -> str:
        """The commit message ``git am`` would record."""
        return self.subject + "\n" + (f"\n{self.body}\n" if self.body else "")


@dataclass(frozen=True, kw_only=True)
class Patch:
    name: str
    path: Path
    data: bytes = field(repr=False)
    sha256: str
    header: PatchHeader
    diff: bytes = field(repr=False)  # the part git apply reads: from the first "diff --git" on
    fields: dict[str, str]  # DEP-3 fields found in the description

    @property
    def diff_text(self) -> str:
        return self.diff.decode("utf-8", "surrogateescape")


@dataclass(frozen=True, kw_only=True)
class PatchSet:
    manifest: manifest_mod.Manifest
    patches: tuple[Patch, ...]

    @property
    def set_dir(self) -> Path:
        return self.manifest.set_dir


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(Path(path).read_bytes())


# ---------------------------------------------------------------------- series
def read_series(set_dir: Path) -> tuple[SeriesEntry, ...]:
    """Patch names from ``series`` in order; ``#`` starts a comment. Errors name series:line."""
    path = Path(set_dir) / SERIES_NAME
    if not path.is_file():
        raise BadInput(f"{path} not found", hint="a patch set needs a series file (one patch name per line)")
    entries: list[SeriesEntry] = []
    for number, raw in enumerate(fsutil.read_utf8(path, "series").splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        where = Location(str(path), number)
        if len(text.split()) != 1:
            raise BadInput(
                f"series entry {text!r} has options; patchkit takes plain file names (-p1 is implied)", location=where
            )
        if not _NAME_RE.fullmatch(text):
            raise BadInput(f"series entry {text!r} must be a file name inside the set (no '/' or '..')", location=where)
        if any(e.name == text for e in entries):
            raise BadInput(f"series lists {text!r} twice", location=where)
        if not (Path(set_dir) / text).is_file():
            raise BadInput(f"series lists {text!r} but the file does not exist", location=where)
        entries.append(SeriesEntry(name=text, line=number))
    return tuple(entries)


# ---------------------------------------------------------------------- one patch file
def parse_patch(path: Path) -> Patch:
    """Read a ``git format-patch`` file: header via ``git mailinfo``, diff, DEP-3 fields."""
    return parse_patch_bytes(Path(path), Path(path).read_bytes())


def parse_patch_bytes(path: Path, data: bytes) -> Patch:
    """:func:`parse_patch` of ``data``, the bytes of ``path`` (written or about to be)."""
    where = Location(str(path), None)
    if data.split(b"\n", 1)[0].endswith(b"\r"):  # CRs inside hunks are content; in the header, a conversion
        raise BadInput(
            "patch file has CRLF line endings (converted by an editor or core.autocrlf?)",
            location=where,
            hint="restore it byte for byte, e.g. add 'ddtree_patches/** -text' to .gitattributes",
        )
    header_end = data.find(b"\ndiff --git ")
    fsutil.decode_utf8(data[: header_end if header_end >= 0 else len(data)], path, "patch header")
    with fsutil.scratch_dir("mailinfo") as tmp:
        msg, diff = tmp / "msg", tmp / "patch"
        code, out, err = Repo(tmp).run_bytes(
            "mailinfo", "-b", "-u", "--no-inbody-headers", msg, diff, input=data, check=False
        )
        if code != 0:
            raise BadInput(f"git mailinfo cannot read the patch header: {err.strip()}", location=where)
        info = out.decode("utf-8", "replace")
        body = msg.read_text(encoding="utf-8", errors="surrogateescape").strip("\n")
        diff_bytes = diff.read_bytes()
    meta = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
    missing = [k for k in ("Author", "Email", "Subject", "Date") if not meta.get(k)]
    if missing:
        raise BadInput(f"patch header lacks {', '.join(missing)}; write it in git format-patch form", location=where)
    start = diff_bytes.find(b"diff --git ")
    if start < 0:
        raise BadInput("patch contains no 'diff --git' section", location=where)
    header = PatchHeader(
        author_name=meta["Author"], author_email=meta["Email"], date=meta["Date"], subject=meta["Subject"], body=body
    )
    fields = dep3_fields(body)
    status = fields.get("Upstream-Status")
    if status is not None and status.split()[0].rstrip(",;") not in UPSTREAM_STATUSES:
        raise BadInput(f"Upstream-Status: {status!r} is not one of {', '.join(UPSTREAM_STATUSES)}", location=where)
    return Patch(
        name=Path(path).name,
        path=Path(path),
        data=data,
        sha256=sha256_bytes(data),
        header=header,
        diff=diff_bytes[start:],
        fields=fields,
    )


def dep3_fields(body: str) -> dict[str, str]:
    """DEP-3 ``Key: value`` lines found anywhere in the description."""
    found: dict[str, str] = {}
    for line in body.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in DEP3_KEYS and key not in found:
            found[key] = value.strip()
    return found


# ---------------------------------------------------------------------- commit trailers
def trailer_block(set_label: str, patch_name: str) -> str:
    return f"{TRAILER_SET}: {set_label}\n{TRAILER_PATCH}: {patch_name}\n"


def message_with_trailers(header: PatchHeader, set_label: str, patch_name: str) -> str:
    return header.message() + "\n" + trailer_block(set_label, patch_name)


def split_trailers(message: str) -> tuple[str, str | None]:
    """(message without our trailer block, patch name from the block or None)."""
    match = _TRAILER_BLOCK.search(message)
    if not match:
        return message, None
    return message[: match.start()], match.group(1)


def trailer_set(message: str) -> str | None:
    match = re.search(r"^" + TRAILER_SET + r": (\S+)$", message, re.M)
    return match.group(1) if match else None


# ---------------------------------------------------------------------- the whole set
def load_set(set_dir: Path, *, check_lock: bool = True) -> PatchSet:
    """Load manifest, series and patches; with ``check_lock``, refuse files that differ from the lock."""
    set_dir = Path(set_dir)
    transaction.recover_files(set_dir, "load")  # an interrupted refresh is finished before anyone reads
    man = manifest_mod.load(set_dir, with_lock=check_lock)
    entries = read_series(set_dir)
    if not entries:
        raise empty_series(set_dir)
    patches = tuple(parse_patch(set_dir / e.name) for e in entries)
    pset = PatchSet(manifest=man, patches=patches)
    if check_lock:
        check_integrity(pset)
    return pset


def empty_series(set_dir: Path) -> BadInput:
    """The one refusal of a series that lists no patch (apply, status, lock and verify all load sets here):
    there is nothing to apply, check or lock, and a 0-patch lock would call any base "exactly the set"."""
    path = Path(set_dir) / SERIES_NAME
    lines = len(fsutil.read_utf8(path, "series").splitlines())
    what = f"its {lines} line(s) are blank or comments" if lines else "the file is empty"
    return BadInput(
        f"the series is empty: it lists no patch ({what})",
        location=Location(str(path), max(lines, 1)),
        hint=f"list the set's patch files in it, one per line; or commit your changes on a base tree and run "
        f"`patchkit refresh --set {paths.set_argument(Path(set_dir))} --target TREE`, which writes series, patches "
        "and lock",
    )


def _relock_hint(set_dir: Path) -> str:
    return f"if the change is intended, run `patchkit lock --set {set_dir}` and commit"


def check_integrity(pset: PatchSet) -> None:
    """Series, patch hashes and lock must agree; else BadInput telling the user to run lock."""
    man = pset.manifest
    hint = _relock_hint(pset.set_dir)
    if man.lock is None:
        raise BadInput("the manifest has no [lock] section", location=Location(str(man.path)), hint=hint)
    locked = [p.file for p in man.lock.patches]
    listed = [p.name for p in pset.patches]
    if locked != listed:
        raise BadInput(_series_against_lock(listed, locked), location=Location(str(man.path)), hint=hint)
    for patch, lock_entry in zip(pset.patches, man.lock.patches, strict=True):
        if patch.sha256 != lock_entry.sha256:
            raise BadInput(
                f"{patch.name} has sha256 {patch.sha256[:12]}..., the lock says {lock_entry.sha256[:12]}...",
                location=Location(str(patch.path)),
                hint=hint,
            )


def _names(names: list[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _series_against_lock(listed: list[str], locked: list[str]) -> str:
    """How series and lock differ, in a line: which names only one of them has, or where the order parts."""
    parts = [f"series lists {len(listed)} patch(es) but the lock {len(locked)}"] if len(listed) != len(locked) \
        else [f"series and lock list {len(listed)} patch(es) each"]
    only_series = [n for n in listed if n not in locked]
    only_lock = [n for n in locked if n not in listed]
    if only_series:
        parts.append(f"not in the lock: {_names(only_series)}")
    if only_lock:
        parts.append(f"not in the series: {_names(only_lock)}")
    if not (only_series or only_lock):
        place = next(n for n, (a, b) in enumerate(zip(listed, locked, strict=True)) if a != b)
        parts.append(f"in another order: place {place + 1} is {listed[place]} in the series, "
                     f"{locked[place]} in the lock")
    return "; ".join(parts)
