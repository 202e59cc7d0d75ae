"""each-prefix: every prefix of the series (patches 1..k) applies, compiles, imports and cross-references.

A set should read like an upstream PR: bisectable, each patch a working state. ``patchkit verify
--each-prefix`` runs this after the gates. It stages the set's own patches on the tree's base in a
scratch index (objects in a quarantine, so the target's repository is not written), materialises
each prefix into one scratch checkout (only the files a patch changes are rewritten between
prefixes), and runs the ``compile``, ``imports`` and ``xref`` gates on it, with xref's rules for
unused names off (a helper may land before its first caller). A finding is reported once, at the
first prefix where it appears, naming that patch and the last prefix it is still present in.

This is a runner option, not a registered gate: a set that is not meant to be bisectable (v1's
0005 imports ``ddtree_info``, which only 0008 adds) still passes ``patchkit verify``. It runs as a
gate (:class:`EachPrefix`) over the registry it is handed, like the runner itself.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from patchkit.git import Repo, init_repo, quarantine
from patchkit.patchset.series import load_set
from patchkit.patchset.staging import StagedPatch, stage_series
from patchkit.verify.api import Example, Finding, Gate, Severity, VerifyContext

NAME = "each-prefix"
DESCRIPTION = "every prefix of the series applies, compiles, imports and cross-references"
PREFIX_GATES = ("compile", "imports", "xref")


@dataclass(frozen=True)
class Prefix:
    number: int  # 1-based: the prefix holding patches 1..number
    patch: str  # the prefix's last patch
    tree: str  # its git tree id
    touched: tuple[str, ...]  # files patches 1..number touch that exist in it


def staged_prefixes(repo: Repo, base: str, set_dir: Path) -> list[Prefix]:
    pset = load_set(set_dir, check_lock=False)
    staged: list[StagedPatch] = list(stage_series(repo, base, pset))
    out, touched = [], set()
    for number, step in enumerate(staged, 1):
        touched |= set(step.touched)
        present = set(repo.ls_tree(step.tree, sorted(touched))) if touched else set()
        out.append(Prefix(number, step.patch.name, step.tree, tuple(sorted(touched & present))))
    return out


@contextmanager
def scratch_checkout(repo: Repo, objects: list[Path], base: str) -> Iterator[Repo]:
    """A throwaway repository whose HEAD is ``base`` (objects borrowed, nothing copied) and whose
    work tree is then moved from prefix to prefix."""
    with tempfile.TemporaryDirectory(prefix="patchkit-prefix-") as tmp:
        scratch = init_repo(Path(tmp) / "tree")
        alternates = scratch.objects_dir / "info" / "alternates"
        alternates.parent.mkdir(parents=True, exist_ok=True)
        alternates.write_text("".join(f"{path}\n" for path in objects))
        scratch.run("update-ref", "HEAD", base)
        scratch.run("read-tree", base)
        scratch.run("checkout-index", "-a", "-f")
        yield scratch


def move_to(scratch: Repo, old_tree: str, new_tree: str) -> None:
    """Rewrite only the files that differ between two trees."""
    diff = scratch.run_bytes("diff-tree", "-r", "-z", "--no-renames", old_tree, new_tree)[1].split(b"\0")
    rows = [r.decode("utf-8", "surrogateescape") for r in diff if r]
    for meta, path in zip(rows[0::2], rows[1::2], strict=True):
        _, mode, _, blob, status = meta.lstrip(":").split()
        target = scratch.path / path
        if status.startswith("D"):
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(scratch.blob_bytes(blob))
        target.chmod(0o755 if mode == "100755" else 0o644)


def _gate_findings(ctx: VerifyContext, gates: Mapping[str, Gate]) -> list[Finding]:
    out: list[Finding] = []
    for name in PREFIX_GATES:
        if name in gates:
            out += [f for f in gates[name].run(ctx) if f.severity == Severity.ERROR]
    return out


class EachPrefix:
    """The check as a gate over ``gates`` (the registry the command hands the runner)."""

    NAME = NAME
    DESCRIPTION = DESCRIPTION
    EXAMPLES: Sequence[Example] = ()  # exercised on real series in tests/verify/test_each_prefix.py

    def __init__(self, gates: Mapping[str, Gate]):
        self.gates = gates

    def run(self, ctx: VerifyContext) -> list[Finding]:
        return run(ctx, self.gates)


def run(ctx: VerifyContext, gates: Mapping[str, Gate]) -> list[Finding]:
    repo = Repo(ctx.root)
    base = ctx.base_commit
    verify = {**ctx.manifest.verify}
    verify["xref"] = {**ctx.manifest.verify_table("xref"), "check_unused": False}
    manifest = dataclasses.replace(ctx.manifest, verify=verify)
    first: dict[tuple[str, str], tuple[Prefix, Finding]] = {}
    last: dict[tuple[str, str], Prefix] = {}
    with quarantine(repo) as q:
        prefixes = staged_prefixes(q.repo, base, ctx.set_dir)
        base_tree = repo.tree_of(base)
        with scratch_checkout(repo, [q.objects, repo.objects_dir], base) as scratch:
            previous = base_tree
            for prefix in prefixes:
                move_to(scratch, previous, prefix.tree)
                previous = prefix.tree
                sub = dataclasses.replace(ctx, root=scratch.path, touched=prefix.touched, manifest=manifest)
                for finding in _gate_findings(sub, gates):
                    key = (finding.file, finding.message)
                    first.setdefault(key, (prefix, finding))
                    last[key] = prefix
    total = len(prefixes)
    findings = [Finding(gate=NAME, severity=Severity.INFO, file="series", line=None,
                        message=f"{total} prefixes checked with {', '.join(PREFIX_GATES)}")]
    for key, (prefix, finding) in first.items():
        end = last[key]
        span = (f"prefixes {prefix.number}-{end.number} of {total}" if end.number != prefix.number
                else f"prefix {prefix.number} of {total}")
        fixed = f"; fixed by {prefixes[end.number].patch}" if end.number < total else "; still in the full series"
        findings.append(Finding(gate=NAME, severity=Severity.ERROR, file=finding.file, line=finding.line,
                                message=f"after {prefix.patch} ({span}{fixed}): [{finding.gate}] {finding.message}",
                                hint="reorder the series or move the change into the patch that needs it, so that "
                                "every prefix builds"))
    return findings

