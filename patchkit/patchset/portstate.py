"""What a port remembers between runs, where it keeps it, and the locks that keep two ports apart.

``<home>/port/<set name>-<hash of its path>/`` holds ``state.json`` (written with
:func:`patchkit.fsutil.atomic_write` after every step: a kill leaves the previous step's state, never
half of one) and the work repository
``tree/``. The directory is the port's alone: whatever a kill left in it is redone from the state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from patchkit import fsutil, paths
from patchkit.errors import BadInput

PORT_DIR = "port"
STATE_NAME = "state.json"
TREE_NAME = "tree"
STATE_VERSION = 1
#: Caches a set's tests leave behind; not part of the set (never copied, never hashed).
SKIPPED_NAMES = ("__pycache__", ".pytest_cache")

Phase = Literal["replay", "stopping", "stopped", "write", "publish"]
Met = Literal["merged", "already-upstream", "conflict", "target-gone"]


@dataclass
class PatchRecord:
    """What replaying one patch gave: how it met the new base, its new commits, how a stop was resolved."""

    patch: str
    met: Met
    commits: list[str]
    resolution: str | None = None  # "resolved" or "dropped", for a conflict or a target-gone
    files: list[str] = field(default_factory=list)  # conflicting or missing files
    messages: str = ""  # git's words about the conflict
    drift: dict[str, Any] | None = None  # its part of the report, once computed (it does not change)


@dataclass
class PortState:
    src: str
    out: str
    src_digest: str  # SRC's content when the port began: a changed SRC is never overwritten
    new_manifest_text: str  # the manifest's human part with the new pin
    old_base: dict[str, str]  # commit, tree and path of the fetched old base
    new_base: dict[str, str]
    old_commits: list[list[str]]  # [patch name, commit]: the set applied to the old base
    request: dict[str, str | None] = field(default_factory=dict)  # --to, --to-git, --set-version
    phase: Phase = "replay"
    records: list[PatchRecord] = field(default_factory=list)
    stop: PatchRecord | None = None  # the patch the port stopped at
    stop_parent: str | None = None  # the commit it stopped on, N(i-1)
    dispatch: dict[str, Any] | None = None  # the dispatch scan's result, once done
    upstream: list[dict[str, Any]] | None = None  # what the new base changed in the set's files, once computed
    staging: str | None = None  # where the new set is assembled (next to --out)
    staging_digest: str | None = None
    report: dict[str, Any] | None = None  # the final report, kept for a publish that a kill interrupted
    seconds: float = 0.0  # time the port's runs took, resolution time not included
    version: int = STATE_VERSION

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PortState:
        doc = dict(doc)
        doc["records"] = [PatchRecord(**r) for r in doc.get("records", [])]
        doc["stop"] = PatchRecord(**doc["stop"]) if doc.get("stop") else None
        return cls(**doc)

    def last_commit(self) -> str:
        """The newest commit the replay recorded (the new base before the first patch)."""
        for record in reversed(self.records):
            if record.commits:
                return record.commits[-1]
        return self.new_base["commit"]


class WorkDir:
    def __init__(self, src: Path):
        self.src = src
        key = hashlib.sha256(str(src).encode()).hexdigest()[:12]
        self.path = paths.home().resolve() / PORT_DIR / f"{src.name}-{key}"
        self.state_path = self.path / STATE_NAME
        self.tree = self.path / TREE_NAME

    def load(self) -> PortState | None:
        if not self.state_path.is_file():
            return None
        try:
            doc = json.loads(self.state_path.read_text(encoding="utf-8"))
            if doc.get("version") != STATE_VERSION:
                raise ValueError(f"state version {doc.get('version')}, this patchkit writes {STATE_VERSION}")
            return PortState.from_json(doc)
        except (ValueError, TypeError, KeyError) as exc:
            raise BadInput(f"the port state {self.state_path} is unreadable ({exc})",
                           hint="run `patchkit port --abort` to drop the port and start again") from None

    def save(self, state: PortState) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write(self.state_path, json.dumps(dataclasses.asdict(state), indent=1))

    def clear(self) -> None:
        """Drop the state first (from then on there is no port), then the rest."""
        self.state_path.unlink(missing_ok=True)
        shutil.rmtree(self.path, ignore_errors=True)


def find_work(src: Path | None) -> WorkDir:
    """The work dir of ``src``'s port, or of the only port in progress when no set is named."""
    hint = "start one with `patchkit port --set DIR --to VERSION`"
    if src is not None:
        work = WorkDir(Path(src).resolve())
        if not work.state_path.is_file():
            raise BadInput(f"no port of {work.src} is in progress", hint=hint)
        return work
    found = sorted((paths.home().resolve() / PORT_DIR).glob(f"*/{STATE_NAME}"))
    sources = [json.loads(p.read_text(encoding="utf-8")).get("src", "?") for p in found]
    if not found:
        raise BadInput("no port is in progress", hint=hint)
    if len(found) > 1:
        raise BadInput(f"{len(found)} ports are in progress ({', '.join(sources)})", hint="name one with --set DIR")
    return WorkDir(Path(sources[0]))


@contextlib.contextmanager
def exclusive(src: Path, out: Path) -> Iterator[None]:
    """The port's own lock on the set and on the output: a second port is refused at once (exit 2)."""
    with contextlib.ExitStack() as stack:
        for path in sorted({src, out}):
            key = hashlib.sha256(str(path).encode()).hexdigest()[:16]
            stack.enter_context(fsutil.file_lock(paths.locks_dir() / f"port-{key}.lock", what=f"the port of {path}",
                                                 holder=f"another patchkit port (pid {os.getpid()})", wait_s=0.0))
        yield


def dir_digest(root: Path) -> str:
    """sha256 over the relative names and bytes of every file under ``root`` (test caches skipped)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_NAMES for part in rel.parts) or (path.is_dir() and not path.is_symlink()):
            continue
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        digest.update(f"{rel.as_posix()}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()
