"""What the index looks for (:class:`IndexSettings`, part of every cache key) and where a set's
manifest says it."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.manifest import Manifest

FACTS_SCHEMA = 13  # bump when the facts layout or extraction logic changes

# Spec-algorithm helpers whose call is a dispatch site.
DEFAULT_HELPERS = (
    "is_dflash",
    "is_eagle",
    "is_eagle3",
    "is_standalone",
    "is_ngram",
    "is_frozen_kv_mtp",
    "is_ddtree",
    "is_dflash_family",
    "supports_spec_v2",
)
# Algorithm names that make a string comparison a dispatch site.
DEFAULT_ALGORITHM_NAMES = (
    "DFLASH",
    "DDTREE",
    "EAGLE",
    "EAGLE3",
    "NEXTN",
    "STANDALONE",
    "NGRAM",
    "FROZEN_KV_MTP",
)
DEFAULT_ENUM = "SpeculativeAlgorithm"


@dataclass(frozen=True)
class IndexSettings:
    """What the extraction looks for; part of every cache key."""

    family: str  # regex of the symbol family, e.g. "DDTREE|DDTree|ddtree"
    helpers: tuple[str, ...] = DEFAULT_HELPERS
    algorithm_names: tuple[str, ...] = DEFAULT_ALGORITHM_NAMES
    enum_name: str = DEFAULT_ENUM
    source_root: str = "python"  # tree-relative directory that is the import root
    member_enums: tuple[str, ...] = ()  # enums whose members listed in a collection make a dispatch site

    def key(self) -> str:
        raw = json.dumps([FACTS_SCHEMA, self.family, self.helpers, self.algorithm_names, self.enum_name,
                          self.source_root, self.member_enums])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def family_re(self) -> re.Pattern[str]:
        return re.compile(self.family)


def settings_from_manifest(manifest: Manifest) -> IndexSettings:
    """The index settings the set's ``[verify.xref]`` and ``[verify.dispatch]`` tables ask for."""
    verify = manifest.verify
    xref, dispatch = manifest.verify_table("xref"), manifest.verify_table("dispatch")
    return IndexSettings(
        family=xref.get("family", "DDTREE|DDTree|ddtree"),
        helpers=tuple(dispatch.get("helpers", DEFAULT_HELPERS)),
        algorithm_names=tuple(dispatch.get("algorithm_names", DEFAULT_ALGORITHM_NAMES)),
        enum_name=dispatch.get("enum", DEFAULT_ENUM),
        source_root=verify.get("source_root", "python"),
        member_enums=tuple(dispatch.get("member_enums", ())),
    )
