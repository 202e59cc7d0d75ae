"""``patchkit sets``: the shipped patch sets, their bases, what each was proven on, and the default.

What a set was proven on is declared in its manifest (``[[set.proven]]``: the CPU verify gates, the GPU
smoke test, the GPU bench, with the machine and the date), and so is the default (``[set] default =
true``): the newest set proven on a GPU, which every command takes without ``--set``.
"""

from __future__ import annotations

from dataclasses import dataclass

from patchkit import manifest as manifest_mod
from patchkit import paths
from patchkit.manifest import Proof
from patchkit.results import CommandResult


@dataclass(frozen=True, kw_only=True)
class SetRow:
    name: str  # what --set takes: the directory's name
    path: str
    label: str  # name@version, the commits' trailer
    base: str  # e.g. "sglang 0.5.17"
    python: tuple[str, ...]
    proven: tuple[Proof, ...]
    caveat: str
    default: bool


@dataclass(frozen=True, kw_only=True)
class SetsResult(CommandResult):
    root: str  # the folder the sets were found in
    sets: tuple[SetRow, ...]
    default: str  # the name of the set commands take without --set


def list_sets() -> SetsResult:
    """Every set under the first folder that holds any (see :func:`patchkit.paths.sets_roots`)."""
    found = paths.shipped_sets()
    default = paths.default_set_dir() if found else None
    rows = []
    for set_dir in found:
        man = manifest_mod.load(set_dir, with_lock=False)
        rows.append(SetRow(name=set_dir.name, path=str(set_dir), label=man.label, base=man.base_label(),
                           python=man.set.python, proven=man.set.proven, caveat=man.set.caveat,
                           default=default is not None and set_dir == default))
    return SetsResult(command="sets", ok=bool(rows), root=str(found[0].parent) if found else "",
                      sets=tuple(rows), default=default.name if default else "")


def describe(proofs: tuple[Proof, ...]) -> list[str]:
    """One line per proof (``2026-12-03 smoke: 1x H200, torch 2.11.0+cu130``), or ``not proven``."""
    return [f"{p.date} {p.check}: {p.on}" for p in proofs] or ["not proven"]
