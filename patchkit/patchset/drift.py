"""What moved when a patch set was carried to a new base: the facts of ``patchkit port``'s report.

Three comparisons, each a pure function of git objects or diff text:

* :func:`compare_patch`: the old patch against the one the port produced: the same hunks at the
  same lines (``clean``), the same hunks moved (``offset``, with the lines per hunk), or different
  context or grouping (``context-changed``, and whether the +/- lines themselves changed).
* :func:`upstream_changes`: what the new base changed in the files the set edits. Each upstream
  hunk is marked *near* when it overlaps a region the set's own hunks cover (those lines showed up
  as offsets, context changes or conflicts) or *silent* otherwise: the lines the set did not touch,
  where a patch can go wrong without any conflict.
* :func:`site_changes`: dispatch sites (from the dispatch gate's scanner, run on both bases by
  :class:`SiteScan`) that appeared, vanished or changed their expression, and whether the set
  declares them.

The report's types (:class:`PortReport` and its parts) and their JSON round trip live here too.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import multiprocessing
import multiprocessing.pool
import re
import signal
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from unidiff.patch import PatchSet as UnifiedDiff

from patchkit.git import Repo, temp_index_env
from patchkit.manifest import Manifest

PatchStatus = Literal["clean", "offset", "context-changed", "conflict", "already-upstream", "target-gone"]
SiteChangeKind = Literal["appeared", "vanished", "changed"]
#: The statuses that stop a port until the user resolves the patch.
STOPPING: tuple[PatchStatus, ...] = ("conflict", "target-gone")
_INDEX_LINE = re.compile(rb"^index [0-9a-f]+\.\.[0-9a-f]+( \d+)?$", re.M)


# ---------------------------------------------------------------------- one patch, old vs new
@dataclass(frozen=True, kw_only=True)
class HunkMove:
    """A hunk of the old patch and where the new patch has it (pre-image lines of each base)."""

    file: str
    old_line: int
    new_line: int
    delta: int = field(init=False)  # new_line - old_line (a field, so --json has it)

    def __post_init__(self) -> None:
        object.__setattr__(self, "delta", self.new_line - self.old_line)


@dataclass(frozen=True, kw_only=True)
class PatchComparison:
    status: PatchStatus  # clean, offset or context-changed
    moves: tuple[HunkMove, ...]
    changes_differ: bool  # the +/- lines themselves differ, not only context or position
    added: int  # +/- lines in the new patch that the old one lacks
    removed: int  # ... and the other way round
    detail: str


@dataclass(frozen=True)
class _Hunk:
    file: str
    start: int  # pre-image start line
    lines: tuple[tuple[str, str], ...]  # (line type, text) for context, + and - lines

    @property
    def changes(self) -> tuple[tuple[str, str], ...]:
        return tuple(line for line in self.lines if line[0] != " ")


def _hunks(diff_text: str) -> tuple[dict[str, tuple[str, ...]], list[_Hunk]]:
    """Per file its header facts (added, removed, renamed from) and every hunk, in order."""
    headers: dict[str, tuple[str, ...]] = {}
    hunks: list[_Hunk] = []
    for pfile in UnifiedDiff(diff_text):
        facts: tuple[str, ...] = ("added",) if pfile.is_added_file else ("removed",) if pfile.is_removed_file else ()
        if pfile.is_rename:
            facts += (f"renamed from {pfile.source_file[2:]}",)
        headers[pfile.path] = facts
        for hunk in pfile:
            lines = tuple((line.line_type, line.value) for line in hunk if line.line_type in " +-")
            hunks.append(_Hunk(pfile.path, hunk.source_start, lines))
    return headers, hunks


def without_index_lines(diff: bytes) -> bytes:
    """The diff with its ``index a..b`` lines dropped: blob ids change with any edit elsewhere in a file."""
    return _INDEX_LINE.sub(b"", diff)


def compare_patch(old_diff: bytes, new_diff: bytes) -> PatchComparison:
    """Classify the new form of a patch against the old one (both the ``diff --git`` part)."""
    old_headers, old_hunks = _hunks(old_diff.decode("utf-8", "surrogateescape"))
    new_headers, new_hunks = _hunks(new_diff.decode("utf-8", "surrogateescape"))
    old_lines = Counter(c for h in old_hunks for c in h.changes)
    new_lines = Counter(c for h in new_hunks for c in h.changes)
    added, removed = sum((new_lines - old_lines).values()), sum((old_lines - new_lines).values())
    same_shape = old_headers == new_headers and [(h.file, h.lines) for h in old_hunks] == [
        (h.file, h.lines) for h in new_hunks
    ]
    if same_shape:
        moves = tuple(HunkMove(file=o.file, old_line=o.start, new_line=n.start)
                      for o, n in zip(old_hunks, new_hunks, strict=True))
        moved = [m for m in moves if m.delta]
        status: PatchStatus = "offset" if moved else "clean"
        detail = _describe_moves(moved) if moved else ""
        return PatchComparison(status=status, moves=moves, changes_differ=False, added=0, removed=0, detail=detail)
    changes_differ = _changes_by_file(old_hunks) != _changes_by_file(new_hunks) or old_headers != new_headers
    moves = _matched_moves(old_hunks, new_hunks)
    detail = _describe_difference(old_headers, new_headers, old_hunks, new_hunks, changes_differ, added, removed)
    return PatchComparison(
        status="context-changed", moves=moves, changes_differ=changes_differ, added=added, removed=removed,
        detail=detail,
    )


def _changes_by_file(hunks: Sequence[_Hunk]) -> dict[str, tuple[tuple[str, str], ...]]:
    found: dict[str, tuple[tuple[str, str], ...]] = {}
    for hunk in hunks:
        found[hunk.file] = found.get(hunk.file, ()) + hunk.changes
    return found


def _matched_moves(old_hunks: Sequence[_Hunk], new_hunks: Sequence[_Hunk]) -> tuple[HunkMove, ...]:
    """Old hunks paired with the first unused new hunk of the same file and the same +/- lines."""
    unused = list(new_hunks)
    moves = []
    for old in old_hunks:
        match = next((n for n in unused if n.file == old.file and n.changes == old.changes), None)
        if match is not None:
            unused.remove(match)
            moves.append(HunkMove(file=old.file, old_line=old.start, new_line=match.start))
    return tuple(moves)


def _describe_moves(moves: Sequence[HunkMove]) -> str:
    return ", ".join(f"{m.file}:{m.old_line} {m.delta:+d}" for m in moves)


def _describe_difference(
    old_headers: dict[str, tuple[str, ...]], new_headers: dict[str, tuple[str, ...]],
    old_hunks: Sequence[_Hunk], new_hunks: Sequence[_Hunk],
    changes_differ: bool, added: int, removed: int,
) -> str:
    parts = []
    gone = sorted(set(old_headers) - set(new_headers))
    if gone:
        parts.append(f"no longer changes {', '.join(gone)}")
    extra = sorted(set(new_headers) - set(old_headers))
    if extra:
        parts.append(f"now also changes {', '.join(extra)}")
    if len(old_hunks) != len(new_hunks):
        parts.append(f"{len(old_hunks)} hunks became {len(new_hunks)}")
    parts.append(f"its +/- lines changed (+{added}/-{removed})" if changes_differ else "same +/- lines, new context")
    return "; ".join(parts)


# ---------------------------------------------------------------------- upstream changes in the set's files
@dataclass(frozen=True, kw_only=True)
class UpstreamHunk:
    """One hunk of ``git diff -U0 old-base new-base`` in a file the set edits (old-base lines)."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    section: str  # the enclosing function or class, from the hunk header
    near_set: bool  # overlaps a region the set's own hunks cover


@dataclass(frozen=True, kw_only=True)
class UpstreamFile:
    path: str  # as in the old base
    change: str  # "modified", "deleted", "renamed to <path>"
    added: int
    removed: int
    hunks: tuple[UpstreamHunk, ...]

    @property
    def silent(self) -> tuple[UpstreamHunk, ...]:
        """The upstream hunks in lines the set did not touch."""
        return tuple(h for h in self.hunks if not h.near_set)


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


def _ranges(diff_text: str) -> list[tuple[int, int, int, int, str]]:
    """(old start, old count, new start, new count, section) of every hunk header in ``diff_text``."""
    found = []
    for line in diff_text.splitlines():
        match = _HUNK_HEADER.match(line)
        if match:
            a, b, c, d, section = match.groups()
            found.append((int(a), int(b if b is not None else 1), int(c), int(d if d is not None else 1), section))
    return found


def _overlaps(start: int, count: int, regions: Iterable[tuple[int, int]]) -> bool:
    """Whether old-base lines ``[start, start+count)`` (an insertion after ``start`` when count is 0) meet a region."""
    low, high = (start, start + count) if count else (start, start + 1)
    return any(low < r_start + r_count and r_start < high for r_start, r_count in regions)


def upstream_changes(
    repo: Repo, old_base: str, new_base: str, set_tip: str, paths: Iterable[str], diff_config: Sequence[str] = ()
) -> tuple[UpstreamFile, ...]:
    """What ``old_base..new_base`` changed in ``paths`` (files the set edits), hunk by hunk.

    ``set_tip`` is the set applied to the old base; its hunks define the regions the set covers.
    ``diff_config`` are ``-c`` settings for git (a funcname driver, so sections name functions).
    """
    wanted = sorted(set(paths))
    if not wanted:
        return ()
    config = [arg for setting in diff_config for arg in ("-c", setting)]
    fates = _fates(repo, old_base, new_base, wanted)
    files = []
    for path in wanted:
        fate = fates.get(path)
        if fate is None:
            continue  # unchanged upstream
        if fate == "deleted":
            files.append(UpstreamFile(path=path, change="deleted", added=0, removed=0, hunks=()))
            continue
        new_path = fate
        upstream = repo.run(*config, "diff", "-U0", "--no-color", "--no-ext-diff", f"{old_base}:{path}",
                            f"{new_base}:{new_path}")
        ours = repo.run("diff", "-U3", "--no-color", "--no-ext-diff", "--no-renames", old_base, set_tip, "--", path)
        regions = [(a, b) for a, b, _, _, _ in _ranges(ours)]
        hunks = tuple(
            UpstreamHunk(old_start=a, old_count=b, new_start=c, new_count=d, section=s.strip(),
                         near_set=_overlaps(a, b, regions))
            for a, b, c, d, s in _ranges(upstream)
        )
        added = sum(1 for line in upstream.splitlines() if line.startswith("+") and not line.startswith("+++"))
        removed = sum(1 for line in upstream.splitlines() if line.startswith("-") and not line.startswith("---"))
        change = "modified" if new_path == path else f"renamed to {new_path}"
        files.append(UpstreamFile(path=path, change=change, added=added, removed=removed, hunks=hunks))
    return tuple(files)


def _fates(repo: Repo, old_base: str, new_base: str, paths: Sequence[str]) -> dict[str, str]:
    """For each changed path: its path in the new base (itself, or where git saw it renamed) or ``deleted``."""
    out = repo.run_bytes("diff", "--name-status", "-z", "-M", old_base, new_base)[1].decode("utf-8", "surrogateescape")
    fields = out.split("\0")
    wanted = set(paths)
    fates: dict[str, str] = {}
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        if status.startswith(("R", "C")):
            source, target = fields[i + 1], fields[i + 2]
            i += 3
            if status.startswith("R") and source in wanted:
                fates[source] = target
            continue
        path = fields[i + 1]
        i += 2
        if path in wanted:
            fates[path] = "deleted" if status == "D" else path
    return fates


# ---------------------------------------------------------------------- dispatch sites
@dataclass(frozen=True, kw_only=True)
class SiteChange:
    kind: SiteChangeKind
    file: str
    scope: str
    expr: str  # the new expression (the old one for a vanished site)
    old_expr: str | None  # for a changed site
    line: int | None  # in the new base (the old base for a vanished site)
    declared: bool  # the set's dispatch declarations name the site (by its old identity when vanished/changed)


@dataclass(frozen=True, kw_only=True)
class DispatchDrift:
    old_sites: int
    new_sites: int
    changes: tuple[SiteChange, ...]
    declarations: str | None  # the set's declarations file, relative to the set

    def count(self, kind: SiteChangeKind) -> int:
        return sum(1 for c in self.changes if c.kind == kind)


def site_changes(old_sites: Sequence[Any], new_sites: Sequence[Any], declared: set[tuple[str, str, str, int]]
                 ) -> tuple[SiteChange, ...]:
    """Sites (objects with ``key``, ``file``, ``scope``, ``expr``, ``line``) that appeared, vanished or changed.

    A site is identified as the dispatch gate does (file, scope, expression, occurrence), so a moved
    line is no change. A vanished and an appeared site in the same file and scope are paired, in
    order, as one changed site (the expression was edited).
    """
    old_by_key = {s.key: s for s in old_sites}
    new_by_key = {s.key: s for s in new_sites}
    vanished = [s for s in old_sites if s.key not in new_by_key]
    appeared = [s for s in new_sites if s.key not in old_by_key]
    changes: list[SiteChange] = []
    for site in appeared:
        partner = next((v for v in vanished if (v.file, v.scope) == (site.file, site.scope)), None)
        if partner is not None:
            vanished.remove(partner)
            changes.append(SiteChange(kind="changed", file=site.file, scope=site.scope, expr=site.expr,
                                      old_expr=partner.expr, line=site.line, declared=partner.key in declared))
        else:
            changes.append(SiteChange(kind="appeared", file=site.file, scope=site.scope, expr=site.expr,
                                      old_expr=None, line=site.line, declared=site.key in declared))
    changes += [
        SiteChange(kind="vanished", file=s.file, scope=s.scope, expr=s.expr, old_expr=None, line=s.line,
                   declared=s.key in declared)
        for s in vanished
    ]
    return tuple(sorted(changes, key=lambda c: (c.file, c.line or 0, c.kind)))


# ---------------------------------------------------------------------- range-diff
def range_diff(repo: Repo, old_range: tuple[str, str], new_range: tuple[str, str]) -> str:
    """``git range-diff`` of the old patch's commit range against the new one (messages and diffs)."""
    status, out, err = repo.run_bytes(
        "range-diff", "--no-color", "--creation-factor=999", f"{old_range[0]}..{old_range[1]}",
        f"{new_range[0]}..{new_range[1]}", check=False,
    )
    text = out.decode("utf-8", "surrogateescape").rstrip("\n")
    return text if status == 0 else f"(git range-diff failed: {err.strip()})"


def stale_mentions(manifest_text: str, old_version: str, skip_lines: set[int]) -> tuple[tuple[int, str], ...]:
    """Lines of the manifest's human part that still name the old base version (besides the pin)."""
    pattern = re.compile(r"(?<![\w.])" + re.escape(old_version) + r"(?![\w]|\.\d)")
    return tuple(
        (number, line.strip())
        for number, line in enumerate(manifest_text.splitlines(), start=1)
        if number not in skip_lines and pattern.search(line)
    )


# ---------------------------------------------------------------------- the dispatch scan on both bases
def _ignore_sigint() -> None:
    """Scan processes leave Ctrl-C to patchkit (which ends them) and die with it (Linux)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


#: Above this many bytes of candidate files, facts are parsed in worker processes.
PARALLEL_SCAN_BYTES = 512 * 1024


def _warm_facts(batch: list[tuple[str, str]], manifest: Manifest, cache_dir: Path) -> int:
    """Parse ``(root, rel)`` files into the gates' facts cache (keyed by content: the scan then only reads)."""
    from patchkit.index import PyIndex, settings_from_manifest  # lazy: the index parses with ast

    settings = settings_from_manifest(manifest)
    indexes: dict[str, PyIndex] = {}
    for root, rel in batch:
        indexes.setdefault(root, PyIndex(Path(root), settings, cache_dir)).load(rel)
    return len(batch)


def _balanced(files: list[tuple[str, str, int]], workers: int) -> list[list[tuple[str, str]]]:
    """``(root, rel, size)`` files in ``workers`` batches of about equal bytes, largest files first."""
    batches: list[list[tuple[str, str]]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for root, rel, size in sorted(files, key=lambda f: -f[2]):
        lightest = loads.index(min(loads))
        batches[lightest].append((root, rel))
        loads[lightest] += size
    return [b for b in batches if b]


def _distinct_candidates(contexts: list[Any]) -> list[tuple[str, str, int]]:
    """``(root, rel, size)`` of every file the scanner will parse, one per distinct content."""
    from patchkit.index import scan, settings_from_manifest  # lazy: the index parses with ast

    seen: set[str] = set()
    files = []
    for ctx in contexts:
        for rel in scan(ctx.root, settings_from_manifest(ctx.manifest)).dispatch:
            data = (ctx.root / rel).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest not in seen:
                seen.add(digest)
                files.append((str(ctx.root), rel, len(data)))
    return files


class SiteScan:
    """The dispatch gate's scanner (``collect_sites``) on several trees.

    Parsing is the cost on a cold cache, so on trees the size of SGLang's the
    candidate files of all trees, each distinct content once, are parsed into the gates' facts cache
    by worker processes in batches of equal bytes, next to the replay; ``collect_sites`` then only
    reads facts. Small trees are scanned in-process when the results are asked for.
    """

    def __init__(self, dispatch: ModuleType, contexts: list[Any], *, workers: int):
        self.dispatch, self.contexts = dispatch, contexts
        self.pool: multiprocessing.pool.Pool | None = None
        self.warming: list[multiprocessing.pool.AsyncResult[int]] = []
        files = _distinct_candidates(contexts)
        if workers > 1 and sum(size for _, _, size in files) > PARALLEL_SCAN_BYTES:
            self.pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_ignore_sigint)
            manifest, cache_dir = contexts[0].manifest, contexts[0].cache_dir
            self.warming = [self.pool.apply_async(_warm_facts, (batch, manifest, cache_dir))
                            for batch in _balanced(files, workers)]

    def results(self) -> list[list[Any]]:
        for job in self.warming:
            job.get()
        if self.pool is None:
            return [self.dispatch.collect_sites(ctx) for ctx in self.contexts]
        reading = [self.pool.apply_async(self.dispatch.collect_sites, (ctx,)) for ctx in self.contexts]
        return [job.get() for job in reading]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def tree_of_commit(repo: Repo, commit: str, fetched: Path, scratch: Path) -> Path:
    """A directory holding ``commit``'s files: the fetched tree when it is exactly that, else an export."""
    tree = Repo(fetched)
    if tree.rev("HEAD") == commit and not tree.porcelain_status():
        return fetched
    scratch.mkdir(parents=True, exist_ok=True)
    index = scratch.parent / f".{scratch.name}.index"
    env = temp_index_env(index)
    repo.run("read-tree", commit, env=env)
    repo.run(f"--work-tree={scratch}", "checkout-index", "-a", "-f", env=env)
    index.unlink(missing_ok=True)
    return scratch


def dispatch_drift(dispatch: ModuleType, declarations: Path, old_sites: list[Any], new_sites: list[Any],
                   set_dir: Path) -> DispatchDrift:
    """The site changes, each marked by whether the set's declarations file names it."""
    found, _ = dispatch.load_declarations(declarations)
    changes = site_changes(old_sites, new_sites, {d.key for d in found})
    rel = str(declarations.relative_to(set_dir)) if declarations.is_file() else None
    return DispatchDrift(old_sites=len(old_sites), new_sites=len(new_sites), changes=changes, declarations=rel)


# ---------------------------------------------------------------------- the report
@dataclass(frozen=True, kw_only=True)
class BaseInfo:
    label: str
    commit: str
    tree: str


@dataclass(frozen=True, kw_only=True)
class PatchDrift:
    """How one patch of the old set fared on the new base."""

    patch: str  # file name in the old set
    subject: str
    status: PatchStatus
    resolution: str | None  # conflict / target-gone: "resolved" or "dropped" (None while stopped there)
    new_patches: tuple[str, ...]  # its file names in the new set (empty when dropped)
    moves: tuple[HunkMove, ...]  # where each hunk went (pre-image lines in the old and the new tree)
    changes_differ: bool  # the +/- lines changed, not only context or position
    added: int
    removed: int
    detail: str
    files: tuple[str, ...]  # the conflicting or missing files, when it stopped
    range_diff: str


@dataclass(frozen=True, kw_only=True)
class PortReport:
    set: str
    new_set: str
    old_base: BaseInfo
    new_base: BaseInfo
    patches: tuple[PatchDrift, ...]
    pending: tuple[str, ...]  # patches not replayed yet (the port stopped before them)
    upstream: tuple[UpstreamFile, ...]
    dispatch: DispatchDrift | None
    stale_mentions: tuple[tuple[int, str], ...]  # manifest lines that still name the old base version

    def count(self, status: PatchStatus) -> int:
        return sum(1 for p in self.patches if p.status == status)


def report_to_json(report: PortReport) -> dict[str, Any]:
    return dataclasses.asdict(report)


def dispatch_from_json(doc: dict[str, Any]) -> DispatchDrift:
    return DispatchDrift(old_sites=doc["old_sites"], new_sites=doc["new_sites"],
                         changes=tuple(SiteChange(**c) for c in doc["changes"]), declarations=doc["declarations"])


def patch_drift_from_json(doc: dict[str, Any]) -> PatchDrift:
    moves = tuple(HunkMove(file=m["file"], old_line=m["old_line"], new_line=m["new_line"]) for m in doc["moves"])
    return PatchDrift(**{**doc, "new_patches": tuple(doc["new_patches"]), "files": tuple(doc["files"]),
                         "moves": moves})


def upstream_from_json(files: list[dict[str, Any]]) -> tuple[UpstreamFile, ...]:
    return tuple(UpstreamFile(**{**u, "hunks": tuple(UpstreamHunk(**h) for h in u["hunks"])}) for u in files)


def report_from_json(doc: dict[str, Any]) -> PortReport:
    """The inverse of :func:`report_to_json` (a published port keeps its report in the state file)."""
    patches = tuple(patch_drift_from_json(p) for p in doc["patches"])
    upstream = upstream_from_json(doc["upstream"])
    return PortReport(
        set=doc["set"], new_set=doc["new_set"], old_base=BaseInfo(**doc["old_base"]),
        new_base=BaseInfo(**doc["new_base"]), patches=patches, pending=tuple(doc["pending"]), upstream=upstream,
        dispatch=dispatch_from_json(doc["dispatch"]) if doc.get("dispatch") else None,
        stale_mentions=tuple((int(n), str(line)) for n, line in doc["stale_mentions"]),
    )
