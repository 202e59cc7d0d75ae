"""A set's references outside its own folder, checked when verify loads the set.

The references are read off the manifest by :mod:`patchkit.references` (``patchkit sets copy`` reads
them too). A copy of a set in another folder loses them. That is one cause, so it is one finding, said
before any gate runs, with the fix; the gates that read such a folder leave out what its absence would
make them report (xref's unused-name rule, the tests gate's run), since it is the same cause.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.manifest import Manifest
from patchkit.references import Reference, missing_references
from patchkit.verify.api import Finding, Severity

__all__ = ["SET_CHECK", "load_findings", "missing_references"]

SET_CHECK = "set"  # the row the load check's findings are reported under, before the gates


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
