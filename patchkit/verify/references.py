"""A set's references outside its own folder, checked when verify loads the set.

A manifest may name folders outside the set (``[verify.tests] shared = ["../common/ddtree_utils_tests"]``,
``[verify.xref] use_paths``, ``[verify.env] stubs_dir``): the shipped sets keep the tests of the code they
share, and their CPU stubs, once, beside them.
A copy of a set in another folder loses them. That is one cause, so it is one finding, said before any
gate runs, with the fix; the gates that read such a folder leave out what its absence would make them
report (xref's unused-name rule, the tests gate's run), since it is the same cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchkit.manifest import Manifest, line_of
from patchkit.verify.api import Finding, Severity

SET_CHECK = "set"  # the row the load check's findings are reported under, before the gates

# (manifest table, key): the keys whose values are folders relative to the set (a list, or one folder)
FOLDER_KEYS = (("verify.tests", "shared"), ("verify.xref", "use_paths"), ("verify.env", "stubs_dir"))


@dataclass(frozen=True)
class Reference:
    table: str
    key: str
    path: str  # as the manifest writes it, relative to the set folder
    line: int | None  # the manifest's line


def outside_references(set_dir: Path, manifest: Manifest) -> list[Reference]:
    """The folders the manifest names that lie outside the set's folder."""
    text = manifest.path.read_text(encoding="utf-8", errors="replace")
    root = set_dir.resolve()
    out = []
    for table, key in FOLDER_KEYS:
        values = manifest.verify_table(table.split(".", 1)[1]).get(key, [])
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and not (set_dir / value).resolve().is_relative_to(root):
                out.append(Reference(table, key, value, line_of(text, table, key)))
    return out


def missing_references(set_dir: Path, manifest: Manifest) -> list[Reference]:
    return [ref for ref in outside_references(set_dir, manifest) if not (set_dir / ref.path).is_dir()]


def load_findings(set_dir: Path, manifest: Manifest, missing: list[Reference]) -> list[Finding]:
    """One finding per missing folder (a folder both tables name is said once), at the manifest's line."""
    seen: dict[str, Reference] = {}
    for ref in missing:
        seen.setdefault(ref.path, ref)
    return [Finding(gate=SET_CHECK, severity=Severity.ERROR, file=str(manifest.path), line=ref.line,
                    message=f"[{ref.table}] {ref.key} names {ref.path!r}, outside the set's folder, and there is no "
                    f"folder at {(set_dir / ref.path).resolve()}: the gates that read it did not judge what needs it",
                    hint=f"copy that folder to {ref.path!r} beside the set, or make a self-contained copy of the "
                    "original set: patchkit sets copy ORIGINAL DEST (its manifest then names the copy's own folder)")
            for ref in seen.values()]
