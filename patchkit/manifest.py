"""``manifest.toml`` of a patch set: load, validate (errors name file:line), and rewrite the lock.

The file has a human-written part (``[set]``, ``[base]`` and any tables other tools own, such as
``[verify.*]`` or ``[smoke.*]``, which are kept as opaque dicts) and, below :data:`LOCK_MARKER`, a
``[lock]`` part that only ``patchkit lock`` writes. Rewriting the lock never touches the part above
the marker, so its comments and layout survive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from patchkit.errors import BadInput, Location
from patchkit import tomlfile


MANIFEST_NAME = "manifest.toml"
LOCK_MARKER = "# ---- everything below this marker line is written by `patchkit lock`; do not edit ----"
#: post_image value of a path the series deletes.
ABSENT = "absent"

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_KNOWN_TABLES = {"set", "base", "lock"}


@dataclass(frozen=True)
class SetInfo:
    name: str
    version: str
    description: str
    python: tuple[str, ...]
    allow_binary: tuple[str, ...] = ()  # patch files allowed to carry binary diffs


@dataclass(frozen=True)
class PypiBase:
    package: str
    version: str
    wheel: str
    sha256: str
    layout: dict[str, str]  # wheel member prefix -> repository path prefix


@dataclass(frozen=True)
class GitBase:
    url: str
    commit: str


@dataclass(frozen=True)
class LockedPatch:
    file: str
    sha256: str


@dataclass(frozen=True)
class Lock:
    base_tree: str
    patches: tuple[LockedPatch, ...]
    post_image: dict[str, str]  # repo path -> sha256 of the bytes after the series, or ABSENT


@dataclass(frozen=True)
class Manifest:
    path: Path
    set: SetInfo
    base_kind: str  # "pypi" or "git"
    pypi: PypiBase | None
    git: GitBase | None
    lock: Lock | None
    raw: dict[str, Any] = field(repr=False)

    @property
    def set_dir(self) -> Path:
        return self.path.parent

    @property
    def label(self) -> str:
        return f"{self.set.name}@{self.set.version}"

    def section(self, name: str) -> dict[str, Any]:
        """A table this module does not interpret (``verify``, ``smoke``, ...), or ``{}``."""
        value = self.raw.get(name, {})
        return value if isinstance(value, dict) else {}

    def base_label(self) -> str:
        if self.base_kind == "pypi" and self.pypi:
            return f"{self.pypi.package} {self.pypi.version}"
        assert self.git is not None
        return f"{self.git.url}@{self.git.commit[:12]}"


class _Fields:
    """Typed access to one table, raising BadInput that names file:line of the offending key."""

    def __init__(self, path: Path, text: str, table: str, data: Any):
        self.path, self.text, self.table = path, text, table
        if not isinstance(data, dict):
            raise self.error(None, f"[{table}] must be a table")
        self.data = data

    def where(self, key: str | None) -> Location:
        return Location(str(self.path), line_of(self.text, self.table, key))

    def error(self, key: str | None, message: str) -> BadInput:
        return BadInput(message, location=self.where(key), hint=f"fix {MANIFEST_NAME} (see README: patch-set format)")

    def string(self, key: str, pattern: re.Pattern | None = None, required: bool = True) -> str:
        value = self.data.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or not value:
            raise self.error(key, f"[{self.table}] {key} must be a non-empty string")
        if pattern and not pattern.fullmatch(value):
            raise self.error(key, f"[{self.table}] {key} = {value!r} does not match {pattern.pattern}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"[{self.table}] {key} must be a list of strings")
        return tuple(value)


def line_of(text: str, table: str | None, key: str | None) -> int | None:
    """Best-effort 1-based line of ``key`` inside ``[table]`` (or of the table header)."""
    lines = text.splitlines()
    header = re.compile(r"^\s*\[+\s*" + re.escape(table or "") + r"\s*\]+") if table else None
    start = 0
    if header:
        found = [i for i, line in enumerate(lines) if header.match(line)]
        if not found:
            return None
        start = found[0]
        if key is None:
            return start + 1
    key_re = re.compile(r'^\s*"?' + re.escape(key or "") + r'"?\s*=')
    for i in range(start, len(lines)):
        if i > start and lines[i].lstrip().startswith("[") and header and not header.match(lines[i]):
            break
        if key and key_re.match(lines[i]):
            return i + 1
    return start + 1 if header else None


def load(set_dir: Path, *, with_lock: bool = True) -> Manifest:
    """Read and validate ``set_dir/manifest.toml`` (without ``with_lock``, the lock part is ignored)."""
    path = Path(set_dir) / MANIFEST_NAME
    if not path.is_file():
        raise BadInput(f"{path} not found", hint="pass --set DIR pointing at a patch set")
    text = path.read_text(encoding="utf-8")
    if not with_lock:
        text = human_part(text)
    raw = tomlfile.parse(text, path, "fix the manifest and run again")
    return _validate(path, text, raw)


def _validate(path: Path, text: str, raw: dict[str, Any]) -> Manifest:
    set_fields = _Fields(path, text, "set", raw.get("set"))
    info = SetInfo(
        name=set_fields.string("name", re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")),
        version=set_fields.string("version", re.compile(r"[0-9A-Za-z][0-9A-Za-z_.+-]*")),
        description=set_fields.string("description"),
        python=set_fields.strings("python"),
        allow_binary=set_fields.strings("allow_binary"),
    )
    base = _Fields(path, text, "base", raw.get("base"))
    kind = base.string("kind")
    if kind not in ("pypi", "git"):
        raise base.error("kind", f'[base] kind = {kind!r}; expected "pypi" or "git"')
    pypi = _pypi(path, text, base.data["pypi"]) if "pypi" in base.data else None
    gitb = _git(path, text, base.data["git"]) if "git" in base.data else None
    if kind == "pypi" and pypi is None:
        raise base.error("kind", 'kind = "pypi" needs a [base.pypi] table')
    if kind == "git" and gitb is None:
        raise base.error("kind", 'kind = "git" needs a [base.git] table')
    lock = _lock(path, text, raw["lock"]) if "lock" in raw else None
    return Manifest(path, info, kind, pypi, gitb, lock, raw)


def _pypi(path: Path, text: str, data: Any) -> PypiBase:
    f = _Fields(path, text, "base.pypi", data)
    wheel = f.string("wheel", re.compile(r"[^/\\]+\.whl"))
    layout = data.get("layout")
    if (
        not isinstance(layout, dict)
        or not layout
        or not all(
            isinstance(k, str) and isinstance(v, str) and k.endswith("/") and v.endswith("/") for k, v in layout.items()
        )
    ):
        raise f.error(
            "layout",
            '[base.pypi] layout must map wheel prefixes to repo prefixes, e.g. { "sglang/" = "python/sglang/" }',
        )
    for prefix in (*layout.keys(), *layout.values()):
        if prefix.startswith("/") or ".." in prefix.split("/"):
            raise f.error("layout", f"[base.pypi] layout prefix {prefix!r} must be relative without '..'")
    return PypiBase(f.string("package"), f.string("version"), wheel, f.string("sha256", _HEX64), dict(layout))


def _git(path: Path, text: str, data: Any) -> GitBase:
    f = _Fields(path, text, "base.git", data)
    return GitBase(f.string("url"), f.string("commit", _HEX40))


def _lock(path: Path, text: str, data: Any) -> Lock:
    f = _Fields(path, text, "lock", data)
    patches = data.get("patches", [])
    if not isinstance(patches, list):
        raise f.error("patches", "[lock] patches must be an array of tables")
    locked = []
    for entry in patches:
        pf = _Fields(path, text, "lock.patches", entry)
        locked.append(LockedPatch(pf.string("file"), pf.string("sha256", _HEX64)))
    post = data.get("post_image", {})
    if not isinstance(post, dict) or not all(
        isinstance(v, str) and (v == ABSENT or _HEX64.fullmatch(v)) for v in post.values()
    ):
        raise f.error("post_image", f"[lock.post_image] values must be sha256 hex digests or {ABSENT!r}")
    return Lock(f.string("base_tree", _HEX40), tuple(locked), dict(post))


# ---------------------------------------------------------------------- writing the lock part
def human_part(text: str) -> str:
    """Everything above the lock marker line (the whole file when there is no marker)."""
    index = text.find(LOCK_MARKER)
    head = text if index < 0 else text[:index]
    return head.rstrip("\n") + "\n"


def render_lock(lock: Lock) -> str:
    """The TOML text of the lock part (deterministic: series order, sorted post-image)."""
    doc = {
        "lock": {
            "base_tree": lock.base_tree,
            "patches": [{"file": p.file, "sha256": p.sha256} for p in lock.patches],
            "post_image": dict(sorted(lock.post_image.items())),
        }
    }
    return tomli_w.dumps(doc)


def write_lock(set_dir: Path, lock: Lock) -> bool:
    """Rewrite only the part below the marker; return True if the file changed."""
    path = Path(set_dir) / MANIFEST_NAME
    old = path.read_text(encoding="utf-8")
    new = human_part(old) + "\n" + LOCK_MARKER + "\n" + render_lock(lock)
    if new == old:
        return False
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(path)
    return True
