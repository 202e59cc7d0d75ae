"""A set's references outside its own folder, read off its manifest.

A manifest may name folders outside the set (``[verify.tests] shared = ["../common/ddtree_utils_tests"]``,
``[verify.xref] use_paths``, ``[verify.env] stubs_dir``): the shipped sets keep the tests of the code they
share, and their CPU stubs, once, beside them. Two readers need the list: ``patchkit sets copy`` (which
copies each such folder into the copy) and verify (which reports a missing one once, before the gates:
:mod:`patchkit.verify.references`). It lives with the infrastructure so that both import it downwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchkit.manifest import Manifest, line_of

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
