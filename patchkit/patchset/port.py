"""``patchkit port``: carry a patch set to a new upstream release, patch by patch, and say what moved.

1. Both bases are fetched as ``base fetch`` does (a new release's wheel is found by pip with the old
   wheel's tags). A private work repository (:mod:`patchkit.patchset.replay`) records the set
   applied to the old base as commits C1..Cn, exactly as ``apply`` makes them.
2. Patch i is replayed with git's 3-way merge (base C(i-1), ours N(i-1), theirs Ci; never fuzz).
   A clean merge becomes commit Ni; a merge that changes nothing is ``already-upstream`` and is
   dropped. A conflict, or a file the patch edits that the new base lacks (``target-gone``),
   stops the port like ``git rebase``: the work tree holds ``git cherry-pick``'s result; the user
   resolves and commits (or stages) and runs ``--continue``; ``--skip`` drops the patch;
   ``--abort`` deletes the work dir and nothing else.
3. When every patch is resolved the new set is assembled next to ``--out`` (default: the set
   itself): the set's other files copied, the manifest's pin rewritten with its comments kept,
   patches, series and lock written by ``refresh``'s own writer, and the drift report
   (:mod:`patchkit.patchset.drift`) as ``port-report.md``. One rename publishes it (an atomic
   exchange when porting in place).

Every step is recorded (:mod:`patchkit.patchset.portstate`) before the next begins, so Ctrl-C or
``kill -9`` at any point leaves SRC untouched and the next ``port`` or ``--continue`` resumes from the
last recorded step; a kill after the publishing rename is finished by the next run.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Literal

from patchkit import fsutil, paths, proc
from patchkit import manifest as manifest_mod
from patchkit.errors import EXIT_FAILED, EXIT_OK, BadInput, Interrupted, Location
from patchkit.git import Repo
from patchkit.hooks import pause
from patchkit.manifest import GitBase, Manifest, PypiBase
from patchkit.patchset import base as base_mod
from patchkit.patchset import drift, refresh, replay, transaction
from patchkit.patchset.apply import build_commits
from patchkit.patchset.drift import BaseInfo, PatchDrift, PatchStatus, PortReport
from patchkit.patchset.portstate import (
    SKIPPED_NAMES,
    PatchRecord,
    PortState,
    WorkDir,
    dir_digest,
    exclusive,
)
from patchkit.patchset.series import load_set, read_series, trailer_block
from patchkit.patchset.staging import Progress
from patchkit.patchset.transaction import signals_held
from patchkit.results import CommandResult

REPORT_NAME = "port-report.md"
#: Processes that parse the dispatch scan's files on big trees (the target machine has 2 cores).
SCAN_WORKERS = max(1, min(os.cpu_count() or 1, 4))

PortOutcome = Literal["ported", "stopped", "aborted"]
Markdown = Callable[[PortReport], str]


@dataclass(frozen=True, kw_only=True)
class StopInfo:
    patch: str
    status: PatchStatus
    files: tuple[str, ...]
    messages: str  # what git said about the merge
    tree: str  # the work tree to resolve in


@dataclass(frozen=True, kw_only=True)
class PortResult(CommandResult):
    state: PortOutcome
    src: str
    out: str
    work_dir: str | None  # while stopped
    report: PortReport | None
    stopped: StopInfo | None = None
    recovered: str | None = None  # what this run did about an interrupted earlier one
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase of this run

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILED


@dataclass(frozen=True, kw_only=True)
class Tools:
    """What the CLI hands the core: the dispatch gate's module (None: no scan; its ``scan_context`` builds
    the contexts its ``collect_sites`` scans, so the engine imports nothing of verify) and the markdown renderer."""

    dispatch: ModuleType | None = None
    markdown: Markdown | None = None


# ====================================================================== the new pin
def retarget(man: Manifest, to_version: str | None, to_git: str | None, from_git: Path | None,
             progress: Progress | None) -> Manifest:
    """The manifest pinned to the new base (without a lock): a pypi release or a git commit."""
    where = Location(str(man.path))
    if to_git is not None:
        if man.git is None:
            raise BadInput("--to-git needs a [base.git] table (url, commit) in the manifest", location=where,
                           hint="add the upstream url there first")
        commit = Repo(from_git).rev(to_git) if from_git is not None else to_git
        if commit is None or not re.fullmatch(r"[0-9a-f]{40}", commit):
            raise BadInput(f"--to-git {to_git!r} is not a full commit id" + (f" in {from_git}" if from_git else ""),
                           hint="pass 40 hex digits, or --from-git PATH to resolve a name")
        if man.base_kind == "git" and commit == man.git.commit:
            raise BadInput(f"the set is already pinned to {commit}", location=where)
        return dataclasses.replace(man, base_kind="git", git=GitBase(url=man.git.url, commit=commit), lock=None)
    assert to_version is not None
    if man.pypi is None:
        raise BadInput("--to VERSION needs a [base.pypi] table in the manifest", location=where,
                       hint="use --to-git SHA for a git base")
    if man.base_kind == "pypi" and to_version == man.pypi.version:
        raise BadInput(f"the set is already pinned to {man.pypi.package} {to_version}", location=where)
    return dataclasses.replace(man, base_kind="pypi", pypi=release_wheel(man.pypi, to_version, progress), lock=None)


def release_wheel(old: PypiBase, version: str, progress: Progress | None = None) -> PypiBase:
    """The pin of ``version``'s wheel with the old wheel's tags: from the cache, else ``pip download``."""
    distribution, *_, python_tag, abi_tag, platform_tag = old.wheel[: -len(".whl")].split("-")
    cached = paths.cache_dir() / f"{distribution}-{version}-{python_tag}-{abi_tag}-{platform_tag}.whl"
    if not cached.is_file():
        paths.cache_dir().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="download-", dir=paths.cache_dir()) as tmp:
            if progress:
                progress(f"downloading {old.package} {version} with pip")
            probe = dataclasses.replace(old, version=version, wheel=cached.name, sha256="")
            try:
                proc.run(base_mod.pip_download_command(probe, Path(tmp)))
            except proc.CommandFailed as failed:
                said = (failed.completed.stderr.strip().splitlines() or ["(nothing)"])[-1]
                raise BadInput(f"pip could not download {old.package}=={version} as {cached.name}: {said}",
                               hint="check the version (and that pip's index is reachable), or put the wheel in "
                                    f"{paths.cache_dir()}") from None
            wheels = sorted(Path(tmp).glob("*.whl"))
            if len(wheels) != 1:
                raise BadInput(f"pip download of {old.package}=={version} gave {[w.name for w in wheels]}")
            cached = paths.cache_dir() / wheels[0].name
            wheels[0].replace(cached)
    from patchkit.patchset.series import sha256_file

    return dataclasses.replace(old, version=version, wheel=cached.name, sha256=sha256_file(cached))


def new_manifest_text(text: str, new: Manifest, set_version: str | None) -> str:
    """The manifest's human part with the new pin (and ``[set] version``); comments and layout kept."""
    text = manifest_mod.human_part(text)
    edits: list[tuple[str, str, str]] = [("base", "kind", new.base_kind)]
    if new.pypi is not None and new.base_kind == "pypi":
        edits += [("base.pypi", "version", new.pypi.version), ("base.pypi", "wheel", new.pypi.wheel),
                  ("base.pypi", "sha256", new.pypi.sha256)]
    elif new.git is not None:
        edits.append(("base.git", "commit", new.git.commit))
    if set_version:
        edits.append(("set", "version", set_version))
    lines = text.splitlines(keepends=True)
    for table, key, value in edits:
        number = manifest_mod.line_of(text, table, key)
        match = re.match(r'^(\s*"?' + re.escape(key) + r'"?\s*=\s*)"[^"\n]*"(.*)$', lines[number - 1] if number else "",
                         re.S)
        if number is None or match is None:
            raise BadInput(f"cannot rewrite [{table}] {key}: it is not a `{key} = \"...\"` line of its own",
                           location=Location(str(new.path), number), hint="edit the manifest by hand")
        lines[number - 1] = f"{match.group(1)}{json.dumps(value)}{match.group(2)}"
    return drop_proofs("".join(lines))


def drop_proofs(text: str) -> str:
    """The ported set has been proven on nothing yet, and is no one's default: drop ``[[set.proven]]``
    tables and ``[set] default`` (with the comment lines right above them)."""
    kept: list[str] = []
    table = ""
    for line in text.splitlines(keepends=True):
        if re.match(r"^\s*\[", line):
            table = line.strip()
        if table == "[[set.proven]]" or (table == "[set]" and re.match(r"^default\s*=", line)):
            while kept and kept[-1].lstrip().startswith("#"):
                kept.pop()
            continue
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "".join(kept))


def pin_lines(text: str) -> set[int]:
    """Lines of the pin keys and of the set's own version (a stale-version search skips them)."""
    keys = [("base.pypi", "version"), ("base.pypi", "wheel"), ("base.pypi", "sha256"), ("base.git", "commit"),
            ("set", "version")]
    return {n for table, key in keys if (n := manifest_mod.line_of(text, table, key))}


def public_label(man: Manifest) -> str:
    """The base's label for the report; a git base cloned from a local path is named by the directory only."""
    if man.base_kind == "git" and man.git and "://" not in man.git.url and not man.git.url.startswith("git@"):
        return f"{Path(man.git.url).name}@{man.git.commit[:12]}"
    return man.base_label()


def exchange(new: Path, old: Path) -> None:
    """Swap two directories atomically (``renameat2(RENAME_EXCHANGE)``, Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise BadInput("porting a set in place needs renameat2 (Linux)", hint="pass --out DIR for a new directory")
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(old), rename_exchange) != 0:
        error = ctypes.get_errno()
        raise BadInput(f"cannot swap {new} and {old}: {os.strerror(error)}", hint="pass --out DIR for a new directory")


# ====================================================================== one run of a port
class _Port:
    """Replay from the recorded step, then stop at a patch or write and publish the new set."""

    def __init__(self, work: WorkDir, state: PortState, progress: Progress | None, tools: Tools):
        self.work, self.state, self.progress, self.tools = work, state, progress, tools
        self.repo = Repo(work.tree)
        self.src, self.out = Path(state.src), Path(state.out)
        self.pset = load_set(self.src, check_lock=False)
        self.timings: dict[str, float] = {}
        self.started = time.perf_counter()
        self.scan: drift.SiteScan | None = None
        self.scan_started = 0.0

    def say(self, text: str) -> None:
        if self.progress:
            self.progress(text)

    def save(self) -> None:
        now = time.perf_counter()
        self.state.seconds += now - self.started
        self.started = now
        self.work.save(self.state)

    def timed(self, name: str, start: float) -> None:
        self.timings[name] = round(self.timings.get(name, 0.0) + time.perf_counter() - start, 3)

    def check_src(self) -> None:
        if dir_digest(self.src) != self.state.src_digest:
            raise BadInput(f"{self.src} changed since the port began",
                           hint="run `patchkit port --abort` and port again")

    def old_commit(self, name: str) -> str:
        return dict((n, c) for n, c in self.state.old_commits)[name]

    # ---------------------------------------------------------------- after an interruption
    def recover(self) -> str | None:
        """Back to the last recorded step: a kill can leave any git step (or the staged set) half done."""
        if self.state.phase in ("replay", "stopping"):
            last = self.state.last_commit()
            if replay.tip(self.repo) != last:
                self.repo.run("update-ref", f"refs/heads/{replay.BRANCH}", last)
            replay.clear_pick(self.repo)
            if (self.repo.git_dir / "index").exists():  # the work tree was checked out for a stop
                replay.reset_work_tree(self.repo, last)
            self.state.phase, self.state.stop, self.state.stop_parent = "replay", None, None
            done, total = len(self.state.records), len(self.state.old_commits)
            return f"resumed an interrupted port after {done} of {total} patches"
        if self.state.phase == "write":
            if self.state.staging:
                shutil.rmtree(self.state.staging, ignore_errors=True)
            self.state.staging, self.state.staging_digest = None, None
            return "resumed an interrupted port while it wrote the new set"
        return None

    # ---------------------------------------------------------------- the main loop
    def run(self, recovered: str | None = None) -> PortResult:
        if self.state.phase == "publish":
            return self.publish(recovered)
        try:
            self.start_scan()
            stop = self.replay()
            self.finish_scan()
            return self.stopped(stop, recovered) if stop is not None else self.write(recovered)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; {self.src} is untouched. `patchkit port --continue --set {self.src}` "
                              "resumes, `patchkit port --abort` drops the port") from None
        finally:
            if self.scan is not None:
                self.scan.close()

    def replay(self) -> PatchRecord | None:
        """Replay the patches not recorded yet; the first that cannot merge is returned, not recorded."""
        start, total = time.perf_counter(), len(self.state.old_commits)
        try:
            for index in range(len(self.state.records), total):
                name, theirs = self.state.old_commits[index]
                self.say(f"replaying {index + 1}/{total}: {name}")
                stop = self.replay_one(index, name, theirs)
                if stop is not None:
                    return stop
                self.save()
                pause(f"port-replayed-{index + 1}")
            return None
        finally:
            self.timed("replay", start)

    def replay_one(self, index: int, name: str, theirs: str) -> PatchRecord | None:
        parent = self.state.old_commits[index - 1][1] if index else self.state.old_base["commit"]
        ours = replay.tip(self.repo)
        gone = replay.missing_targets(self.repo, parent, theirs, ours)
        if gone:
            return PatchRecord(name, "target-gone", [], files=list(gone))
        merge = replay.three_way(self.repo, parent, ours, theirs)
        if merge.conflicts:
            return PatchRecord(name, "conflict", [], files=list(merge.conflicts), messages=merge.messages)
        if merge.tree == self.repo.tree_of(ours):
            self.state.records.append(PatchRecord(name, "already-upstream", []))
        else:
            commit = replay.commit_like(self.repo, theirs, merge.tree, ours)
            replay.move_branch(self.repo, commit, ours)
            self.state.records.append(PatchRecord(name, "merged", [commit]))
        return None

    # ---------------------------------------------------------------- a stop and its resolution
    def stopped(self, stop: PatchRecord, recovered: str | None) -> PortResult:
        """Check out N(i-1) with ``git cherry-pick``'s result in the work tree, for the user to resolve."""
        start = time.perf_counter()
        ours = replay.tip(self.repo)
        self.state.phase, self.state.stop, self.state.stop_parent = "stopping", stop, ours
        self.save()
        self.say(f"checking out the work tree for {stop.patch}")
        said = replay.check_out_pick(self.repo, ours, self.old_commit(stop.patch))
        pause("port-stopping")
        self.state.phase = "stopped"
        self.save()
        self.timed("stop", start)
        status: PatchStatus = "target-gone" if stop.met == "target-gone" else "conflict"
        info = StopInfo(patch=stop.patch, status=status, files=tuple(stop.files), messages=stop.messages or said,
                        tree=str(self.work.tree))
        report = self.report(stopped=stop)
        self.save()  # what the report computed once is kept for the next run
        if self.tools.markdown:
            (self.work.path / REPORT_NAME).write_text(self.tools.markdown(report), encoding="utf-8")
        return self.result("stopped", report, recovered, stopped=info)

    def resolve(self, action: Literal["continue", "skip"]) -> None:
        """Record the user's resolution of the patch the port stopped at, then replay on."""
        stop, ours = self.state.stop, self.state.stop_parent
        assert stop is not None and ours is not None
        if action == "skip":
            replay.reset_work_tree(self.repo, ours)
            replay.move_branch(self.repo, ours, replay.tip(self.repo))
            record = dataclasses.replace(stop, resolution="dropped", commits=[])
        else:
            record = dataclasses.replace(stop, resolution="resolved", commits=self.resolution_commits(stop, ours))
            replay.clear_pick(self.repo)
        self.state.records.append(record)
        self.state.phase, self.state.stop, self.state.stop_parent = "replay", None, None
        self.save()

    def resolution_commits(self, stop: PatchRecord, ours: str) -> list[str]:
        unmerged = replay.unmerged_paths(self.repo)
        if unmerged:
            raise BadInput(f"unresolved conflicts in {', '.join(unmerged)}",
                           hint=f"edit them in {self.work.tree}, `git add` them and `git commit`, then --continue")
        head = self.repo.rev("HEAD")
        if head is None or not self.repo.ok("merge-base", "--is-ancestor", ours, head):
            raise BadInput(f"the work tree's HEAD no longer descends from {ours[:12]}",
                           hint=f"commit the resolution on branch {replay.BRANCH} in {self.work.tree}")
        if self.repo.run("rev-list", "--min-parents=2", f"{ours}..{head}"):
            raise BadInput("the resolution contains merge commits", hint="make it a linear series of commits")
        head = self.commit_staged(stop, head)
        commits = self.repo.first_parent_log(ours, head)
        if not commits:
            raise BadInput(f"nothing was committed for {stop.patch}",
                           hint="commit the resolution, or `patchkit port --skip` to drop this patch")
        marked = replay.conflict_marker_files(self.repo, ours, head)
        if marked:
            raise BadInput(f"the resolution still has conflict markers in {', '.join(marked)}",
                           hint="remove them, amend the commit, then --continue")
        binary = replay.binary_files(self.repo, ours, head)
        if binary and stop.patch not in self.pset.manifest.set.allow_binary:
            raise BadInput(f"the resolution commits binary files: {', '.join(binary[:10])}",
                           hint="remove them from the commit (`git rm --cached`, amend), then --continue")
        return self.keep_patch_name(stop.patch, ours, commits)

    def commit_staged(self, stop: PatchRecord, head: str) -> str:
        """Staged but uncommitted changes become the patch's commit, with its author and message."""
        status = self.repo.porcelain_status()
        unstaged = [line[3:] for line in status if line[1] != " " or line.startswith("??")]
        if unstaged:
            raise BadInput(f"uncommitted changes in the work tree: {', '.join(unstaged[:10])}",
                           hint=f"`git add` and `git commit` them in {self.work.tree} (or discard them), "
                                "then --continue")
        if not status:
            return head
        commit = replay.commit_like(self.repo, self.old_commit(stop.patch), self.repo.run("write-tree"), head)
        self.repo.run("update-ref", "HEAD", commit, head)
        return commit

    def keep_patch_name(self, patch: str, ours: str, commits: list[str]) -> list[str]:
        """Clean resolution messages; the first carries the patch's trailers, so its file name stays.

        ``git commit --no-edit`` after a conflict keeps git's ``# Conflicts:`` lines, after our trailers.
        """
        parent, rebuilt = ours, []
        for number, commit in enumerate(commits):
            original = self.repo.commit_message(commit)
            text = replay.clean_message(self.repo, original)
            if number == 0:
                text += "\n" + trailer_block(self.pset.manifest.label, patch)
            unchanged = text == original and parent == self.repo.run("rev-parse", f"{commit}^")
            parent = commit if unchanged else replay.commit_like(self.repo, commit, self.repo.tree_of(commit), parent,
                                                                 message=text)
            rebuilt.append(parent)
        # the replay goes on from the branch, wherever the user committed (a detached HEAD too)
        self.repo.run("update-ref", f"refs/heads/{replay.BRANCH}", parent)
        self.repo.run("symbolic-ref", "HEAD", f"refs/heads/{replay.BRANCH}")
        return rebuilt

    # ---------------------------------------------------------------- writing and publishing
    def write(self, recovered: str | None) -> PortResult:
        """Assemble the new set next to --out: the set's files, the new manifest, refresh's patches, the report."""
        start = time.perf_counter()
        self.check_src()
        staging = self.out.parent / f".{self.out.name}.port-staging"
        self.state.phase, self.state.staging = "write", str(staging)
        self.save()
        self.say("writing the new set")
        shutil.rmtree(staging, ignore_errors=True)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.src, staging, symlinks=True, ignore=shutil.ignore_patterns(*SKIPPED_NAMES))
        (staging / manifest_mod.MANIFEST_NAME).write_text(self.state.new_manifest_text, encoding="utf-8")
        commits = [c for record in self.state.records for c in record.commits]
        contents = refresh.set_contents(self.repo, staging, self.state.new_base["commit"], commits, self.progress)
        transaction.write_files(staging, contents, command="port")
        self.timed("write", start)
        report = self.report(new_names=[e.name for e in read_series(staging)])
        if self.tools.markdown:
            (staging / REPORT_NAME).write_text(self.tools.markdown(report), encoding="utf-8")
        pause("port-written")
        self.state.staging_digest = dir_digest(staging)
        self.state.report = drift.report_to_json(report)
        self.state.phase = "publish"
        self.save()
        return self.publish(recovered)

    def publish(self, recovered: str | None) -> PortResult:
        """Put the staged set in place with one rename (or exchange), then drop the work dir."""
        staging = Path(self.state.staging or "")
        published = f"the new set published at {self.out}"
        with transaction.set_lock(self.out, "port", self.progress), signals_held(published):
            if self.out.exists() and dir_digest(self.out) == self.state.staging_digest:
                recovered = recovered or "finished an interrupted port: the new set was already in place"
            elif self.out == self.src:
                self.check_src()
                exchange(staging, self.src)
                pause("port-published")
            elif self.out.exists():
                raise BadInput(f"{self.out} appeared while the port ran", hint="move it away and --continue")
            else:
                os.rename(staging, self.out)
                pause("port-published")
            shutil.rmtree(staging, ignore_errors=True)  # in place: the old set, now swapped out
            self.work.clear()
        return self.result("ported", drift.report_from_json(self.state.report or {}), recovered)

    # ---------------------------------------------------------------- the report
    def scan_cache(self) -> Path:
        """Where the site changes between these two bases, for this set's scanner settings, are kept."""
        from patchkit.index import settings_from_manifest

        assert self.tools.dispatch is not None
        declarations = self.declarations()
        key = json.dumps([self.state.old_base["tree"], self.state.new_base["tree"],
                          settings_from_manifest(self.pset.manifest).key(),
                          declarations.read_text(encoding="utf-8") if declarations.is_file() else None])
        return paths.cache_dir() / "port" / f"dispatch-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"

    def declarations(self) -> Path:
        assert self.tools.dispatch is not None
        config = self.pset.manifest.verify_table("dispatch")
        return self.src / str(config.get("declarations", self.tools.dispatch.DEFAULT_DECLARATIONS))

    def start_scan(self) -> None:
        """Start the dispatch gate's scanner on both bases (once per port: the result is recorded).

        The result is also cached by the two base trees, the scanner's settings and the declarations,
        so porting between the same releases again (after an --abort, say) does not scan again.
        """
        if self.tools.dispatch is None or self.state.dispatch is not None:
            return
        cached = self.scan_cache()
        if cached.is_file():
            self.state.dispatch = json.loads(cached.read_text(encoding="utf-8"))
            self.timings["dispatch scan"] = 0.0
            return
        man = self.pset.manifest
        roots = [drift.tree_of_commit(self.repo, base["commit"], Path(base["path"]), self.work.path / f"scan-{name}")
                 for name, base in (("old", self.state.old_base), ("new", self.state.new_base))]
        self.say("scanning the dispatch sites of both bases")
        bases = (self.state.old_base["commit"], self.state.new_base["commit"])
        contexts = [self.tools.dispatch.scan_context(root, self.src, man, commit)
                    for root, commit in zip(roots, bases, strict=True)]
        self.scan_started = time.perf_counter()
        self.scan = drift.SiteScan(self.tools.dispatch, contexts, workers=SCAN_WORKERS)

    def finish_scan(self) -> None:
        if self.scan is None or self.tools.dispatch is None:
            return
        self.say("waiting for the dispatch scan")
        old_sites, new_sites = self.scan.results()
        found = drift.dispatch_drift(self.tools.dispatch, self.declarations(), old_sites, new_sites, self.src)
        self.state.dispatch = dataclasses.asdict(found)
        cache = self.scan_cache()
        cache.parent.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write(cache, json.dumps(self.state.dispatch))
        self.timings["dispatch scan"] = round(time.perf_counter() - self.scan_started, 3)
        for name in ("old", "new"):
            shutil.rmtree(self.work.path / f"scan-{name}", ignore_errors=True)
        self.save()

    def report(self, stopped: PatchRecord | None = None, new_names: list[str] | None = None) -> PortReport:
        start = time.perf_counter()
        patches = [self.recorded_drift(index, record) for index, record in enumerate(self.state.records)]
        if stopped is not None:
            patches.append(self.patch_drift(len(patches), stopped))
        if new_names is not None:  # the names refresh gave the new patches, in series order
            names = iter(new_names)
            patches = [dataclasses.replace(p, new_patches=tuple(next(names) for _ in p.new_patches)) for p in patches]
        old_base, new_base = self.state.old_base["commit"], self.state.new_base["commit"]
        old_tip = self.state.old_commits[-1][1] if self.state.old_commits else old_base
        if self.state.upstream is None:  # the same for every report of this port: computed once
            found = drift.upstream_changes(self.repo, old_base, new_base, old_tip,
                                           replay.edited_paths(self.repo, old_base, old_tip), self.diff_config())
            self.state.upstream = [dataclasses.asdict(f) for f in found]
        upstream = drift.upstream_from_json(self.state.upstream)
        old_man, new_man = self.pset.manifest, self.new_manifest()
        old_version = old_man.pypi.version if old_man.base_kind == "pypi" and old_man.pypi else (
            old_man.git.commit if old_man.git else "")
        text = self.state.new_manifest_text
        report = PortReport(
            set=old_man.label, new_set=new_man.label,
            old_base=BaseInfo(label=public_label(old_man), commit=old_base, tree=self.state.old_base["tree"]),
            new_base=BaseInfo(label=public_label(new_man), commit=new_base, tree=self.state.new_base["tree"]),
            patches=tuple(patches), pending=tuple(n for n, _ in self.state.old_commits[len(patches):]),
            upstream=upstream,
            dispatch=drift.dispatch_from_json(self.state.dispatch) if self.state.dispatch else None,
            stale_mentions=drift.stale_mentions(text, old_version, pin_lines(text)) if old_version else (),
        )
        self.timed("report", start)
        return report

    def new_manifest(self) -> Manifest:
        with fsutil.scratch_dir("manifest") as tmp:
            (tmp / manifest_mod.MANIFEST_NAME).write_text(self.state.new_manifest_text, encoding="utf-8")
            return manifest_mod.load(tmp, with_lock=False)

    def diff_config(self) -> list[str]:
        """git's Python funcname driver for the upstream hunks' sections (never for the patches)."""
        attributes = self.work.path / "attributes"
        if not attributes.is_file():
            attributes.write_text("*.py diff=python\n", encoding="utf-8")
        return [f"core.attributesFile={attributes}"]

    def recorded_drift(self, index: int, record: PatchRecord) -> PatchDrift:
        """A replayed patch's part of the report: computed once, kept in the state (each stop reports it)."""
        if record.drift is None:
            record.drift = dataclasses.asdict(self.patch_drift(index, record))
        return drift.patch_drift_from_json(record.drift)

    def patch_drift(self, index: int, record: PatchRecord) -> PatchDrift:
        name, theirs = self.state.old_commits[index]
        parent = self.state.old_commits[index - 1][1] if index else self.state.old_base["commit"]
        old_patch = next(p for p in self.pset.patches if p.name == name)
        new_names = tuple(name for _ in record.commits)  # until refresh names them
        comparison, range_diff = None, ""
        if record.commits:
            first_parent = self.repo.run("rev-parse", f"{record.commits[0]}^")
            new_diff = self.repo.run_bytes("diff", "--full-index", "--find-renames", first_parent,
                                           record.commits[-1])[1]
            comparison = drift.compare_patch(drift.without_index_lines(old_patch.diff),
                                             drift.without_index_lines(new_diff))
            range_diff = drift.range_diff(
                self.repo, (parent, replay.without_trailers(self.repo, [theirs], parent)),
                (first_parent, replay.without_trailers(self.repo, record.commits, first_parent)))
        status: PatchStatus = comparison.status if record.met == "merged" and comparison else record.met  # type: ignore[assignment]
        return PatchDrift(
            patch=name, subject=old_patch.header.subject, status=status, resolution=record.resolution,
            new_patches=new_names, moves=comparison.moves if comparison else (),
            changes_differ=comparison.changes_differ if comparison else False,
            added=comparison.added if comparison else 0, removed=comparison.removed if comparison else 0,
            detail=_detail(record, comparison), files=tuple(record.files), range_diff=range_diff,
        )

    def result(self, state: PortOutcome, report: PortReport | None, recovered: str | None,
               stopped: StopInfo | None = None) -> PortResult:
        self.timings["total (this run)"] = round(sum(self.timings.values()), 3)
        return PortResult(command="port", ok=state != "stopped", state=state, src=str(self.src), out=str(self.out),
                          work_dir=str(self.work.path) if state == "stopped" else None, report=report,
                          stopped=stopped, recovered=recovered, timings=dict(self.timings))


def _detail(record: PatchRecord, comparison: drift.PatchComparison | None) -> str:
    if record.met == "already-upstream":
        return "its change is already in the new base: dropped"
    if record.resolution == "dropped":
        return "dropped with --skip"
    if record.met == "target-gone" and record.resolution is None:
        return f"files it edits are not in the new base: {', '.join(record.files)}"
    if record.met == "conflict" and record.resolution is None:
        return f"git's 3-way merge conflicts in {', '.join(record.files)}"
    return comparison.detail if comparison else ""


# ====================================================================== entry points
def port(src: Path, *, to_version: str | None = None, to_git: str | None = None, from_git: Path | None = None,
         out: Path | None = None, set_version: str | None = None, progress: Progress | None = None,
         tools: Tools = Tools()) -> PortResult:
    """Port the set at ``src`` to ``to_version`` (a pypi base) or ``to_git`` (a commit); see the module docstring.

    The same command again after an interruption resumes the port; a different one is refused while
    a port of ``src`` is in progress.
    """
    if (to_version is None) == (to_git is None):
        raise BadInput("pass exactly one of --to VERSION and --to-git SHA")
    src = Path(src).resolve()
    out = Path(out).resolve() if out else src
    request: dict[str, str | None] = {"to": to_version, "to_git": to_git, "set_version": set_version}
    with exclusive(src, out):
        work = WorkDir(src)
        state = work.load()
        resumed = state is not None
        timings: dict[str, float] = {}
        if state is None:
            work.clear()  # what a kill before the first saved state left
            state = _start(work, src, out, request, from_git, progress, timings)
        else:
            _check_same(work, state, out, request)
        runner = _Port(work, state, progress, tools)
        runner.timings.update(timings)
        return runner.run(runner.recover() if resumed else None)


def _check_same(work: WorkDir, state: PortState, out: Path, request: dict[str, str | None]) -> None:
    if state.phase == "stopped":
        stop = state.stop.patch if state.stop else "?"
        raise BadInput(f"a port of {state.src} is stopped at {stop}",
                       hint=f"resolve it in {work.tree} and run `patchkit port --continue`, or `patchkit port --abort`")
    if Path(state.out) != out or state.request != request:
        asked = ", ".join(f"{k}={v}" for k, v in state.request.items() if v)
        raise BadInput(f"an interrupted port of {state.src} ({asked}, --out {state.out}) is in progress",
                       hint="`patchkit port --continue` resumes it, `patchkit port --abort` drops it")


def _start(work: WorkDir, src: Path, out: Path, request: dict[str, str | None], from_git: Path | None,
           progress: Progress | None, timings: dict[str, float]) -> PortState:
    """Check the request, fetch both bases, record the set on the old one: the port's first state."""
    start = time.perf_counter()
    pset = load_set(src)
    if out != src and out.exists():
        raise BadInput(f"--out {out} already exists",
                       hint="choose a new directory, or leave --out out to port in place")
    man = pset.manifest
    new_man = retarget(man, request["to"], request["to_git"], from_git, progress)
    text = new_manifest_text((src / manifest_mod.MANIFEST_NAME).read_text(encoding="utf-8"), new_man,
                             request["set_version"])
    if progress:
        progress(f"fetching {man.base_label()} and {new_man.base_label()}")
    old = base_mod.fetch(man, progress=progress)
    assert man.lock is not None
    if old.tree != man.lock.base_tree:
        raise BadInput(f"the fetched base {old.path} has tree {old.tree[:12]}, the lock says {man.lock.base_tree[:12]}",
                       hint="remove that tree and fetch it again")
    new = base_mod.fetch(new_man, from_git=from_git, progress=progress)
    if new.tree == old.tree:
        raise BadInput(f"{new_man.base_label()} has the same files as {man.base_label()}: nothing to port")
    timings["fetch"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    if progress:
        progress("recording the set on the old base")
    repo = replay.create_work_repo(work.tree, [Path(old.path), Path(new.path)], old.commit, new.commit)
    commits = build_commits(repo, pset, old.commit, False, None)
    state = PortState(
        src=str(src), out=str(out), src_digest=dir_digest(src), new_manifest_text=text,
        old_base={"commit": old.commit, "tree": old.tree, "path": old.path},
        new_base={"commit": new.commit, "tree": new.tree, "path": new.path},
        old_commits=[[c.patch, c.commit or ""] for c in commits], request=request,
    )
    work.save(state)
    timings["setup"] = round(time.perf_counter() - start, 3)
    return state


def resume(src: Path | None, action: Literal["continue", "skip", "abort"], *, progress: Progress | None = None,
           tools: Tools = Tools()) -> PortResult:
    """``--continue`` (after the user committed a resolution), ``--skip`` (drop that patch) or ``--abort``."""
    from patchkit.patchset.portstate import find_work

    work = find_work(src)
    first = work.load()
    assert first is not None
    with exclusive(Path(first.src), Path(first.out)):
        state = work.load()  # again, under the lock
        if state is None:
            raise BadInput(f"no port of {work.src} is in progress")
        if action == "abort":
            return _abort(work, state)
        runner = _Port(work, state, progress, tools)
        if state.phase != "stopped":
            if action == "skip":
                raise BadInput("the port is not stopped at a patch", hint="`patchkit port --continue` resumes it")
            return runner.run(runner.recover())
        runner.check_src()
        runner.resolve(action)
        return runner.run()


def _abort(work: WorkDir, state: PortState) -> PortResult:
    """Delete the work dir (and a staged set); SRC and --out stay exactly as they are."""
    out, note = Path(state.out), None
    if state.phase == "publish" and out.exists() and dir_digest(out) == state.staging_digest:
        note = "the port had already been published; only its work dir was removed"
    with signals_held(f"the port of {state.src} aborted"):
        if state.staging:
            shutil.rmtree(state.staging, ignore_errors=True)
        work.clear()
    return PortResult(command="port", ok=True, state="aborted", src=state.src, out=state.out, work_dir=None,
                      report=None, recovered=note)

