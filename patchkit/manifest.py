"""``manifest.toml`` of a patch set: the one reader every command uses (apply, status, refresh, lock,
verify, smoke, bundle).

:func:`load` parses the file once and validates every table patchkit interprets, so a mistake is bad
input naming ``manifest.toml:<line>`` whichever command meets it first:

- ``[set]`` -> :class:`SetInfo`, ``[base]`` -> :class:`PypiBase` or :class:`GitBase`, ``[lock]`` ->
  :class:`Lock`, ``[smoke]`` -> :class:`SmokeProfile` (defaults filled in, paths resolved);
- ``[verify]`` and ``[bundle]`` stay raw tables (:attr:`Manifest.verify`, :attr:`Manifest.bundle`):
  each gate validates its own ``[verify.<gate>]`` table and reports a bad one as a finding, and the
  bundle profile reader validates ``[bundle.profiles.NAME]`` when a profile is asked for.

The file has a human-written part and, below :data:`LOCK_MARKER`, a ``[lock]`` part that only
``patchkit lock`` writes. Rewriting the lock never touches the part above the marker, so its comments
and layout survive.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

from patchkit import tomlfile
from patchkit.errors import BadInput, Location

MANIFEST_NAME = "manifest.toml"
LOCK_MARKER = "# ---- everything below this marker line is written by `patchkit lock`; do not edit ----"
#: post_image value of a path the series deletes.
ABSENT = "absent"
#: The commit trailer that names the set (``name@version``) on every commit ``patchkit apply`` makes.
SET_TRAILER = "Patchkit-Set"

BaseKind = Literal["pypi", "git"]

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HINT = f"fix {MANIFEST_NAME} (see README: patch-set format)"


#: What a ``[[set.proven]]`` entry may say was run: the CPU gates, the GPU smoke test, the GPU bench.
PROOF_CHECKS = ("verify", "smoke", "bench")


@dataclass(frozen=True, kw_only=True)
class Proof:
    """One ``[[set.proven]]`` entry: which check passed, on what, when (``YYYY-MM-DD``)."""

    check: str  # one of PROOF_CHECKS
    on: str  # the machine, e.g. "CPU" or "1x H200, torch 2.11.0+cu130"
    date: str


@dataclass(frozen=True, kw_only=True)
class SetInfo:
    name: str
    version: str
    description: str
    python: tuple[str, ...]
    allow_binary: tuple[str, ...] = ()  # patch files allowed to carry binary diffs
    default: bool = False  # the set commands take without --set (see patchkit.paths.default_set_dir)
    proven: tuple[Proof, ...] = ()
    caveat: str = ""  # what keeps it from being the default, said by `patchkit sets`

    @property
    def gpu_proven(self) -> bool:
        return any(p.check in ("smoke", "bench") for p in self.proven)


@dataclass(frozen=True, kw_only=True)
class PypiBase:
    package: str
    version: str
    wheel: str
    sha256: str
    layout: dict[str, str]  # wheel member prefix -> repository path prefix


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class SmokeProfile:
    """The ``[smoke]`` table of a set (every key optional), with defaults filled in and paths resolved::

        [smoke]
        prompts = "smoke/prompts.jsonl"   # relative to the set directory
        max_new_tokens = 32
        startup_timeout_s = 900           # per server, until /health answers 200
        request_timeout_s = 300           # per /generate request
        grace_period_s = 20               # SIGTERM -> SIGKILL
        server_args = [...]               # both servers: dtype, attention backend, deterministic settings
        baseline_args = []                # baseline only (no speculation)
        profile_args = [...]              # the speculative server only: --speculative-algorithm DDTREE ...
        draft_model_flag = "--speculative-draft-model-path"
    """

    set_name: str
    set_version: str
    set_dir: Path
    prompts: Path
    max_new_tokens: int = 32
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 300.0
    grace_period_s: float = 20.0
    server_args: tuple[str, ...] = ()
    baseline_args: tuple[str, ...] = ()
    profile_args: tuple[str, ...] = ()
    draft_model_flag: str = "--speculative-draft-model-path"

    @property
    def set_id(self) -> str:
        """``name@version``, the value of the ``Patchkit-Set`` commit trailer."""
        return f"{self.set_name}@{self.set_version}"


@dataclass(frozen=True, kw_only=True)
class Manifest:
    path: Path
    set: SetInfo
    base_kind: BaseKind
    pypi: PypiBase | None
    git: GitBase | None
    lock: Lock | None
    smoke: SmokeProfile
    verify: Mapping[str, Any]  # the raw [verify] table: [verify.<gate>] tables and shared keys
    bundle: Mapping[str, Any]  # the raw [bundle] table ([bundle.profiles.NAME])
    raw: dict[str, Any] = field(repr=False)  # the whole parsed file

    @property
    def set_dir(self) -> Path:
        return self.path.parent

    @property
    def label(self) -> str:
        """``name@version``: the set's identity, also its commit trailer value."""
        return f"{self.set.name}@{self.set.version}"

    def section(self, name: str) -> dict[str, Any]:
        """A top-level table this module does not interpret, or ``{}``."""
        value = self.raw.get(name, {})
        return value if isinstance(value, dict) else {}

    def verify_table(self, name: str) -> dict[str, Any]:
        """``[verify.<name>]`` (a gate's table, or ``env``), ``{}`` when absent; a non-table is bad input."""
        value = self.verify.get(name, {})
        if not isinstance(value, dict):
            line = line_of(self.path.read_text(encoding="utf-8", errors="replace"), "verify", name)
            raise BadInput(f"[verify] {name} must be a table", location=Location(str(self.path), line), hint=_HINT)
        return dict(value)

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
        self.data: dict[str, Any] = data

    def where(self, key: str | None) -> Location:
        line = line_of(self.text, self.table, key)
        if line is None and key is None:  # `smoke = 3` instead of a [smoke] table: the key's own line
            line = line_of(self.text, None, self.table)
        return Location(str(self.path), line)

    def error(self, key: str | None, message: str) -> BadInput:
        return BadInput(message, location=self.where(key), hint=_HINT)

    def string(self, key: str, pattern: re.Pattern[str] | None = None, default: str | None = None) -> str:
        value = self.data.get(key, default)
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

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"[{self.table}] {key} must be true or false")
        return value

    def positive(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise self.error(key, f"[{self.table}] {key} must be a positive number")
        return float(value)


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


def read_text(path: Path) -> str:
    """The file as UTF-8 text; other bytes are bad input naming the file and line, not a traceback."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise BadInput(
            f"{path.name} is not UTF-8 text (byte 0x{data[error.start]:02x})",
            location=Location(str(path), line),
            hint="save the file as UTF-8",
        ) from None


def load(set_dir: Path, *, with_lock: bool = True) -> Manifest:
    """Read and validate ``set_dir/manifest.toml`` (without ``with_lock``, the lock part is ignored)."""
    path = Path(set_dir) / MANIFEST_NAME
    if not path.is_file():
        raise BadInput(f"{path} not found", hint="pass --set DIR pointing at a patch set")
    text = read_text(path)
    if not with_lock:
        text = human_part(text)
    raw = tomlfile.parse(text, path, "fix the manifest and run again")
    return _validate(path, text, raw)


def _validate(path: Path, text: str, raw: dict[str, Any]) -> Manifest:
    info = _set_info(_Fields(path, text, "set", raw.get("set")))
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
    return Manifest(
        path=path,
        set=info,
        base_kind="pypi" if kind == "pypi" else "git",
        pypi=pypi,
        git=gitb,
        lock=_lock(path, text, raw["lock"]) if "lock" in raw else None,
        smoke=_smoke(_Fields(path, text, "smoke", raw.get("smoke", {})), info, path.parent),
        verify=_Fields(path, text, "verify", raw.get("verify", {})).data,
        bundle=_Fields(path, text, "bundle", raw.get("bundle", {})).data,
        raw=raw,
    )


def _set_info(f: _Fields) -> SetInfo:
    return SetInfo(
        name=f.string("name", re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")),
        version=f.string("version", re.compile(r"[0-9A-Za-z][0-9A-Za-z_.+-]*")),
        description=f.string("description"),
        python=f.strings("python"),
        allow_binary=f.strings("allow_binary"),
        default=f.boolean("default"),
        proven=_proofs(f),
        caveat=str(f.data.get("caveat", "")),
    )


def _proofs(f: _Fields) -> tuple[Proof, ...]:
    """``[[set.proven]]``: check, on, date (a TOML date or a ``YYYY-MM-DD`` string)."""
    entries = f.data.get("proven", [])
    if not isinstance(entries, list):
        raise f.error("proven", "[set] proven must be an array of tables ([[set.proven]])")
    proofs = []
    for entry in entries:
        pf = _Fields(f.path, f.text, "set.proven", entry)
        check = pf.string("check")
        if check not in PROOF_CHECKS:
            raise pf.error("check", f"[[set.proven]] check = {check!r}; expected one of {', '.join(PROOF_CHECKS)}")
        date = str(pf.data.get("date", ""))
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
            raise pf.error("date", f"[[set.proven]] date = {date!r}; expected a date like 2026-12-03")
        proofs.append(Proof(check=check, on=pf.string("on"), date=date))
    return tuple(proofs)


def _pypi(path: Path, text: str, data: Any) -> PypiBase:
    f = _Fields(path, text, "base.pypi", data)
    wheel = f.string("wheel", re.compile(r"[^/\\]+\.whl"))
    layout = f.data.get("layout")
    if not isinstance(layout, dict) or not layout or not all(_is_prefix_pair(k, v) for k, v in layout.items()):
        raise f.error(
            "layout",
            '[base.pypi] layout must map wheel prefixes to repo prefixes, e.g. { "sglang/" = "python/sglang/" }',
        )
    for prefix in (*layout.keys(), *layout.values()):
        if prefix.startswith("/") or ".." in prefix.split("/"):
            raise f.error("layout", f"[base.pypi] layout prefix {prefix!r} must be relative without '..'")
    return PypiBase(
        package=f.string("package"),
        version=f.string("version"),
        wheel=wheel,
        sha256=f.string("sha256", _HEX64),
        layout=dict(layout),
    )


def _is_prefix_pair(key: object, value: object) -> bool:
    return isinstance(key, str) and isinstance(value, str) and key.endswith("/") and value.endswith("/")


def _git(path: Path, text: str, data: Any) -> GitBase:
    f = _Fields(path, text, "base.git", data)
    return GitBase(url=f.string("url"), commit=f.string("commit", _HEX40))


def _lock(path: Path, text: str, data: Any) -> Lock:
    f = _Fields(path, text, "lock", data)
    patches = f.data.get("patches", [])
    if not isinstance(patches, list):
        raise f.error("patches", "[lock] patches must be an array of tables")
    locked = []
    for entry in patches:
        pf = _Fields(path, text, "lock.patches", entry)
        locked.append(LockedPatch(pf.string("file"), pf.string("sha256", _HEX64)))
    post = f.data.get("post_image", {})
    if not isinstance(post, dict) or not all(
        isinstance(v, str) and (v == ABSENT or _HEX64.fullmatch(v)) for v in post.values()
    ):
        raise f.error("post_image", f"[lock.post_image] values must be sha256 hex digests or {ABSENT!r}")
    return Lock(f.string("base_tree", _HEX40), tuple(locked), dict(post))


def _smoke(f: _Fields, info: SetInfo, set_dir: Path) -> SmokeProfile:
    prompts = f.string("prompts", default="smoke/prompts.jsonl")
    defaults = SmokeProfile(set_name="", set_version="", set_dir=set_dir, prompts=set_dir)
    max_new_tokens = f.positive("max_new_tokens", defaults.max_new_tokens)
    if max_new_tokens != int(max_new_tokens):
        raise f.error("max_new_tokens", "[smoke] max_new_tokens must be a whole number")
    return SmokeProfile(
        set_name=info.name,
        set_version=info.version,
        set_dir=set_dir,
        prompts=set_dir / prompts,
        max_new_tokens=int(max_new_tokens),
        startup_timeout_s=f.positive("startup_timeout_s", defaults.startup_timeout_s),
        request_timeout_s=f.positive("request_timeout_s", defaults.request_timeout_s),
        grace_period_s=f.positive("grace_period_s", defaults.grace_period_s),
        server_args=f.strings("server_args"),
        baseline_args=f.strings("baseline_args"),
        profile_args=f.strings("profile_args"),
        draft_model_flag=f.string("draft_model_flag", default=defaults.draft_model_flag),
    )


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
    old = read_text(path)
    new = human_part(old) + "\n" + LOCK_MARKER + "\n" + render_lock(lock)
    if new == old:
        return False
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(path)
    return True
