"""``patchkit bundle``: an offline wheelhouse for a GPU host without network.

1. **Resolve** for the host, not for this machine: ``pip install --dry-run --report`` with the host's
   ``--python-version`` and ``--platform``, binary wheels only, and the host's packages (from its
   ``pip freeze`` or ``--have NAME==VER``) as constraints, so the resolution keeps what the host has.
2. **Keep** what the host lacks: every resolved distribution except those the host already has at the
   same version.
3. **Download** exactly those pins (``pip download --no-deps``), hash every file (sha256), check it
   against the hash the index published when there is one.
4. **Slim** (optional, ``--drop DIST:GLOB``): rewrite a wheel without members the chosen backends
   never load (for example the FA3 library of sglang-kernel when only the triton backend is used),
   its ``RECORD`` updated; the manifest keeps both hashes and the dropped members. ``--exclude DIST``
   leaves a whole distribution out. Both are checked on the host: ``install.sh`` imports the
   ``--check-import`` modules after installing. A profile's ``trim`` rules keep only some CUDA kernels
   of a library instead of dropping it (:mod:`patchkit.hostprep.kerneltrim`; ``--trimmed-archive``
   writes the trimmed libraries alone).
5. **Write** ``wheels/``, ``requirements.lock`` (pins with ``--hash``), ``bundle.json`` (the manifest)
   and ``install.sh``: the one command for the host, ``sh install.sh [PYTHON] [SITE]``, which installs
   with ``--no-index --no-deps --require-hashes --target SITE``, runs the import checks and prints the
   ``export PYTHONPATH=SITE`` line. ``--target`` leaves the host's own packages untouched: a pinned
   version the bundle carries (transformers 5.6.0 on a host with 5.17.0) shadows the host's through
   ``PYTHONPATH`` instead of replacing it for everything else on the host. ``--split-mib N`` also
   writes the bundle as parts of at most N MiB that install together (:mod:`patchkit.hostprep.parts`).

With ``--profile NAME`` the requirements come from the patch set's manifest instead of sglang's full
``Requires-Dist`` (``[bundle.profiles.NAME]``: ``requirements``, ``slim``, ``check_imports``): each
requirement is resolved on its own (``--no-deps``; the list is the whole runtime set), a host package
counts as present only when its version satisfies the requirement (otherwise the pinned version is
carried and shadows it), the profile's slim globs apply with their reasons, and the set's base wheel
is bundled only when its Python tag fits the host; otherwise (``--tree``) the patched tree's
``python/`` travels instead, the source ``patchkit smoke`` puts first on ``PYTHONPATH`` anyway.
With ``--tree-on-host`` it does not travel: the host builds the same patched tree itself (``patchkit
base fetch`` from the cached base wheel, then ``patchkit apply``), which ``patchkit smoke`` needs there
anyway, and ``install.sh`` takes that tree as its third argument. The bundle records the tree's git
tree id (content only, so the same on every machine that applied the same set to the same base) and
``install.sh`` refuses a host tree with another one.
"""

from __future__ import annotations

import base64
import csv
import fnmatch
import hashlib
import io
import json
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from patchkit import manifest as manifest_mod
from patchkit import proc
from patchkit.errors import BadInput, Failed, Location, location
from patchkit.hostprep.cudatrim import TrimRecord
from patchkit.hostprep.kerneltrim import TrimRule, rewrite_wheel, trim_members, write_archive
from patchkit.hostprep.parts import Parts, split_bundle
from patchkit.results import CommandResult

DEFAULT_REQUIREMENT = "sglang==0.5.12"
DEFAULT_CHECK_IMPORTS = ("sglang", "sglang.launch_server")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)\s*(?:[;#].*)?$")
_URL_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*\S+")


def canonical(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class HostPackages:
    """What the host already has: name -> version (None when installed from a URL or path)."""

    versions: dict[str, str | None]

    def has(self, name: str, version: str) -> bool:
        key = canonical(name)
        return key in self.versions and self.versions[key] in (None, version)


def parse_have(pin: str, where: str = "--have") -> tuple[str, str]:
    found = _PIN.match(pin)
    if not found:
        raise BadInput(f"{where}: expected NAME==VERSION, got {pin!r}")
    return canonical(found.group(1)), found.group(2)


def read_freeze(path: Path) -> dict[str, str | None]:
    """Parse ``pip freeze`` output; every line it cannot read is an error naming the line."""
    versions: dict[str, str | None] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-e ") or line.startswith("--"):
            continue  # editable checkouts and pip options are not wheels we could skip by version
        pinned, by_url = _PIN.match(line), _URL_PIN.match(line)
        if pinned:
            versions[canonical(pinned.group(1))] = pinned.group(2)
        elif by_url:
            versions[canonical(by_url.group(1))] = None
        else:
            raise BadInput(f"not a pip freeze line: {line!r}", location=location(path, number),
                           hint="use the output of `python -m pip freeze` on the host")
    return versions


@dataclass(frozen=True)
class Target:
    """The host interpreter and platform the wheels must fit."""

    python_version: str
    platforms: tuple[str, ...]
    implementation: str = "cp"

    def pip_args(self) -> list[str]:
        args = ["--python-version", self.python_version, "--implementation", self.implementation,
                "--only-binary=:all:"]
        for platform in expand_platforms(self.platforms):
            args += ["--platform", platform]
        return args


_MANYLINUX = re.compile(r"^manylinux_2_(\d+)_(\w+)$")
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def expand_platforms(platforms: tuple[str, ...]) -> tuple[str, ...]:
    """A host with glibc 2.N also runs wheels built for older glibc; pip (23.x) given ``--platform``
    takes the tag literally, so ``manylinux_2_34_x86_64`` alone would miss every ``manylinux2014`` wheel
    (tokenizers, pydantic-core, ...). Add ``manylinux_2_M`` for M <= N and the legacy aliases."""
    expanded: list[str] = []
    for platform in platforms:
        expanded.append(platform)
        found = _MANYLINUX.match(platform)
        if not found:
            continue
        newest, arch = int(found.group(1)), found.group(2)
        for minor in range(newest - 1, 4, -1):
            expanded.append(f"manylinux_2_{minor}_{arch}")
            if minor in _LEGACY_MANYLINUX:
                expanded.append(f"{_LEGACY_MANYLINUX[minor]}_{arch}")
    return tuple(dict.fromkeys(expanded))


@dataclass(frozen=True)
class Resolved:
    name: str
    version: str
    url: str | None
    index_sha256: str | None


@dataclass(frozen=True)
class SlimRule:
    """One glob over a wheel's member paths (``fnmatch``: ``*`` also crosses ``/``) and why it may go."""

    glob: str
    reason: str


@dataclass(frozen=True)
class DroppedMember:
    path: str
    size: int  # unpacked bytes
    reason: str


@dataclass(frozen=True)
class Wheel:
    """One file of the wheelhouse, as the manifest records it (sizes in bytes of the .whl file)."""

    file: str
    name: str
    version: str
    sha256: str
    size: int
    source_url: str | None
    original_sha256: str | None = None
    original_size: int | None = None
    dropped_members: tuple[DroppedMember, ...] = ()
    unmatched_globs: tuple[str, ...] = ()  # slim globs that matched nothing: a sign of a changed wheel
    trimmed_members: tuple[TrimRecord, ...] = ()  # libraries whose other CUDA kernels were zeroed


@dataclass(frozen=True)
class Profile:
    """``[bundle.profiles.NAME]`` of a patch set: the declared runtime set for one server setup."""

    name: str
    requirements: tuple[str, ...]
    slim: dict[str, tuple[SlimRule, ...]]
    check_imports: tuple[str, ...]
    trim: dict[str, tuple[TrimRule, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceTree:
    """The patched tree's ``python/`` used in place of a base wheel that does not fit the host."""

    path: str  # inside the bundle, or where install.sh's third argument points on the host
    files: int
    reason: str
    tree_id: str | None = None  # git tree id of the patched tree (None: not a git tree)
    on_host: bool = False  # True: not shipped; the host has the same tree (install.sh's third argument)


@dataclass(frozen=True)
class BundleResult(CommandResult):
    out: Path
    python_version: str
    platforms: tuple[str, ...]
    requirements: tuple[str, ...]
    wheels: tuple[Wheel, ...]
    skipped_host_packages: tuple[str, ...]
    excluded: tuple[str, ...]
    install_command: str
    profile: str | None = None
    shadowed_host_packages: tuple[str, ...] = ()  # host versions that fail a pin: the bundle's wins
    source_tree: SourceTree | None = None
    parts: Parts | None = None  # --split-mib: the bundle as parts of bounded size (OUT/parts/)


def _index_args(index_url: str | None, find_links: tuple[Path, ...], no_index: bool) -> list[str]:
    args = ["--index-url", index_url] if index_url else []
    for link in find_links:
        args += ["--find-links", str(link)]
    return args + (["--no-index"] if no_index else [])


def _conflict_lines(stdout: str) -> list[str]:
    """pip explains a resolution conflict on stdout ("The conflict is caused by: ..."); keep that part."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "conflict is caused by" in line), None)
    if start is None:
        return []
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line.rstrip())
    return block


def _pip(args: list[str], what: str) -> proc.Completed:
    done = proc.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], check=False)
    if done.returncode != 0:
        tail = "\n".join([*_conflict_lines(done.stdout), *done.stderr.strip().splitlines()[-12:]])
        raise Failed(f"pip could not {what}:\n{tail}",
                     hint="check the host's versions (--freeze/--have) against the requirement")
    return done


def resolve(requirements: tuple[str, ...], host: HostPackages, target: Target, index: list[str],
            work: Path, *, no_deps: bool = False) -> list[Resolved]:
    """Everything ``requirements`` needs on the host, with the host's own versions held fixed.

    ``no_deps``: resolve only the listed requirements themselves (a profile's complete list); the
    host's versions are then not constraints, since a profile pin may overrule them.
    """
    if not requirements:
        return []
    constraints = work / "host-constraints.txt"
    constraints.write_text("" if no_deps else "".join(f"{n}=={v}\n" for n, v in sorted(host.versions.items()) if v))
    report = work / "report.json"
    _pip(["install", "--dry-run", "--ignore-installed", "--report", str(report),
          *(["--no-deps"] if no_deps else []),
          "--target", str(work / "never-written"), *target.pip_args(), *index, "-c", str(constraints),
          *requirements], "resolve the requirements for the host")
    resolved = []
    for item in json.loads(report.read_text())["install"]:
        info = item.get("download_info", {})
        hashes = info.get("archive_info", {}).get("hashes", {})
        metadata = item["metadata"]
        resolved.append(Resolved(canonical(metadata["name"]), metadata["version"], info.get("url"),
                                 hashes.get("sha256")))
    return resolved


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _wheel_identity(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return canonical(name), version


def download(wanted: list[Resolved], target: Target, index: list[str], wheels_dir: Path) -> dict[str, Path]:
    """Download exactly the pins in ``wanted``; return name -> wheel file."""
    wheels_dir.mkdir(parents=True, exist_ok=True)
    pins = [f"{r.name}=={r.version}" for r in wanted]
    _pip(["download", "--no-deps", "--quiet", "--dest", str(wheels_dir), *target.pip_args(), *index, *pins],
         "download the wheels")
    files = {_wheel_identity(p): p for p in wheels_dir.glob("*.whl")}
    found = {}
    for item in wanted:
        path = files.get((item.name, item.version))
        if path is None:
            raise Failed(f"pip did not download {item.name}=={item.version}")
        if item.index_sha256 and sha256_of(path) != item.index_sha256:
            raise Failed(f"{path.name}: sha256 differs from the index's", hint="download again")
        found[item.name] = path
    return found


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _first_rule(name: str, rules: tuple[SlimRule, ...]) -> SlimRule | None:
    return next((rule for rule in rules if fnmatch.fnmatch(name, rule.glob)), None)


def _slim_selection(members: list[zipfile.ZipInfo], rules: tuple[SlimRule, ...], exempt: frozenset[str] = frozenset()
                    ) -> tuple[list[DroppedMember], tuple[str, ...]]:
    """The members ``rules`` drop (never ``.dist-info/`` ones, nor ``exempt``: trimmed members) and the
    globs that matched nothing (a glob matching only an exempt member counts as matched)."""
    dropped, used = [], set()
    for member in members:
        rule = None if ".dist-info/" in member.filename else _first_rule(member.filename, rules)
        if rule:
            used.add(rule.glob)
            if member.filename not in exempt:
                dropped.append(DroppedMember(member.filename, member.file_size, rule.reason))
    return dropped, tuple(rule.glob for rule in rules if rule.glob not in used)


def slim_wheel(path: Path, rules: tuple[SlimRule, ...]) -> tuple[tuple[DroppedMember, ...], tuple[str, ...]]:
    """Rewrite the wheel without members matching ``rules``, RECORD without their rows (the other rows'
    hashes stay valid: their bytes are copied unchanged), so pip installs it. Returns the dropped
    members and the globs that matched nothing. ``.dist-info/`` members are never dropped."""
    with zipfile.ZipFile(path) as source:
        members = source.infolist()
        dropped, unmatched = _slim_selection(members, rules)
        if not dropped:
            return (), unmatched
        gone = {d.path for d in dropped}
        record_name = next(m.filename for m in members if m.filename.endswith(".dist-info/RECORD"))
        rewritten = path.with_suffix(".slim")
        with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as out:
            for member in members:
                if member.filename in gone or member.filename == record_name:
                    continue
                with source.open(member) as data, out.open(member, "w", force_zip64=True) as copy:
                    shutil.copyfileobj(data, copy, 1 << 20)  # streamed: a member can be a 1 GB library
            out.writestr(record_name, _filtered_record(source.read(record_name).decode(), gone))
    rewritten.replace(path)
    return tuple(dropped), unmatched


def slim_and_trim_wheel(path: Path, sha256: str, slim: tuple[SlimRule, ...], trim: tuple[TrimRule, ...]
                        ) -> tuple[tuple[DroppedMember, ...], tuple[str, ...], tuple[TrimRecord, ...]]:
    """:func:`slim_wheel` and the trim rules in one rewrite: trimmed members replaced (and their records
    added), slimmed ones dropped; returns what slim_wheel does and the trim records."""
    if not trim:
        return (*slim_wheel(path, slim), ())
    with zipfile.ZipFile(path) as source:
        dropped, unmatched = _slim_selection(source.infolist(), slim, frozenset(rule.member for rule in trim))
    gone = {d.path for d in dropped}
    with tempfile.TemporaryDirectory(prefix="patchkit-trim-", dir=path.parent) as work:
        trimmed = trim_members(path, sha256, trim, Path(work))
        rewrite_wheel(path, trimmed, keep_member=lambda name: name not in gone)
    return tuple(dropped), unmatched, tuple(record for *_, record in trimmed)


def _filtered_record(record: str, dropped: set[str]) -> str:
    rows = [row for row in csv.reader(io.StringIO(record)) if row and row[0] not in dropped]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def parse_drop_rules(rules: tuple[str, ...]) -> dict[str, tuple[SlimRule, ...]]:
    """``DIST:GLOB`` options -> dist -> rules over wheel member paths."""
    by_dist: dict[str, list[SlimRule]] = {}
    for rule in rules:
        dist, sep, glob = rule.partition(":")
        if not sep or not dist or not glob:
            raise BadInput(f"--drop: expected DIST:GLOB, got {rule!r}")
        by_dist.setdefault(canonical(dist), []).append(SlimRule(glob, "--drop on the command line"))
    return {dist: tuple(globs) for dist, globs in by_dist.items()}


def _merge_rules(*sources: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    merged: dict[str, tuple[Any, ...]] = {}
    for source in sources:
        for dist, rules in source.items():
            merged[dist] = merged.get(dist, ()) + rules
    return merged


# ---------------------------------------------------------------- profiles from the set's manifest


def _profile_error(path: Path, text: str, table: str, key: str | None, message: str) -> BadInput:
    return BadInput(message, location=Location(str(path), manifest_mod.line_of(text, table, key)),
                    hint="fix the profile in manifest.toml (see README: offline bundle)")


def _requirement(text: str, fail) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise fail(f"not a requirement: {text!r} ({exc})") from None


PROFILE_KEYS = ("requirements", "check_imports", "slim", "trim", "extends", "reason")


def load_profile(set_manifest: manifest_mod.Manifest, name: str, _children: tuple[str, ...] = ()) -> Profile:
    """``[bundle.profiles.NAME]`` of the set; errors name the manifest's line.

    ``extends = "OTHER"`` starts from OTHER: its requirements and check_imports unless given here, its
    slim and trim rules followed by these. A member with a trim rule is trimmed, never dropped by a slim
    glob (``server-fa3`` keeps the FA3 library ``server-triton`` drops)."""
    path = set_manifest.path
    text = manifest_mod.human_part(path.read_text(encoding="utf-8"))
    profiles = set_manifest.section("bundle").get("profiles", {})
    table = f"bundle.profiles.{name}"
    if not isinstance(profiles, dict) or name not in profiles:
        known = ", ".join(sorted(profiles)) if isinstance(profiles, dict) and profiles else "none"
        raise BadInput(f"no profile {name!r} in [bundle.profiles] (known: {known})", location=Location(str(path)),
                       hint="pass one of the known --profile names")
    data: Any = profiles[name]

    def fail(key: str | None):
        return lambda message: _profile_error(path, text, table, key, f"[{table}] {message}")

    if not isinstance(data, dict):
        raise fail(None)("a profile must be a table")
    unknown = sorted(set(data) - set(PROFILE_KEYS))
    if unknown:
        raise fail(unknown[0])(f"unknown key {unknown[0]!r} (known: {', '.join(PROFILE_KEYS)})")
    parent = _parent_profile(set_manifest, name, data.get("extends"), _children, fail("extends"))
    requirements = data.get("requirements", list(parent.requirements) if parent else None)
    if not isinstance(requirements, list) or not requirements or not all(isinstance(r, str) for r in requirements):
        raise fail("requirements")("requirements must be a non-empty list of strings")
    for item in requirements:
        _requirement(item, fail("requirements"))
    checks = data.get("check_imports", list(parent.check_imports) if parent else list(DEFAULT_CHECK_IMPORTS))
    if not isinstance(checks, list) or not all(isinstance(c, str) and c for c in checks):
        raise fail("check_imports")("check_imports must be a list of module names")
    slim = _slim_table(data.get("slim", {}), _sub_fail(path, text, table, "slim", fail))
    trim = _trim_table(data.get("trim", {}), _sub_fail(path, text, table, "trim", fail))
    if parent:
        slim, trim = _merge_rules(parent.slim, slim), _merge_rules(parent.trim, trim)
    return Profile(name, tuple(requirements), slim, tuple(checks), trim)


def _sub_fail(path: Path, text: str, table: str, key: str, fail):
    """Errors of ``slim`` / ``trim``: they may sit in their own table ([T.slim]) or inline (slim = {...})."""
    header = f"{table}.{key}"
    if manifest_mod.line_of(text, header, None):
        return lambda dist: lambda message: _profile_error(path, text, header, dist, f"[{table}] {message}")
    return lambda dist: fail(key)


def _parent_profile(set_manifest: manifest_mod.Manifest, name: str, extends: Any, children: tuple[str, ...],
                    fail) -> Profile | None:
    if extends is None:
        return None
    if not isinstance(extends, str) or not extends:
        raise fail("extends must name another profile")
    if extends == name or extends in children:
        raise fail(f"extends {extends!r} makes a cycle ({' -> '.join((*children, name, extends))})")
    return load_profile(set_manifest, extends, (*children, name))


def _slim_table(slim: Any, fail) -> dict[str, tuple[SlimRule, ...]]:
    """``slim = { DIST = [{ glob = "...", reason = "..." }, ...] }``: every glob needs its reason."""
    if not isinstance(slim, dict):
        raise fail("slim")("slim must be a table of DIST = [{ glob, reason }, ...]")
    rules: dict[str, tuple[SlimRule, ...]] = {}
    for dist, entries in slim.items():
        ok = isinstance(entries, list) and all(
            isinstance(e, dict) and isinstance(e.get("glob"), str) and e["glob"]
            and isinstance(e.get("reason"), str) and e["reason"].strip() for e in entries)
        if not ok:
            raise fail(dist)(f"slim {dist!r}: every entry must be {{ glob = \"...\", reason = \"...\" }}")
        rules[canonical(dist)] = tuple(SlimRule(e["glob"], e["reason"].strip()) for e in entries)
    return rules


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _trim_table(trim: Any, fail) -> dict[str, tuple[TrimRule, ...]]:
    """``trim = { DIST = [{ member, archs, keep, reason, wheel_sha256 }, ...] }`` (see kerneltrim)."""
    if not isinstance(trim, dict):
        raise fail("trim")("trim must be a table of DIST = [{ member, archs, keep, reason }, ...]")
    rules: dict[str, tuple[TrimRule, ...]] = {}
    shape = 'every entry must be { member = "...", archs = [90], keep = "REGEX", reason = "...", wheel_sha256 = "..." }'
    for dist, entries in trim.items():
        if not isinstance(entries, list) or not entries:
            raise fail(dist)(f"trim {dist!r}: {shape}")
        parsed = []
        for entry in entries:
            ok = (isinstance(entry, dict) and set(entry) <= {"member", "archs", "keep", "reason", "wheel_sha256"}
                  and isinstance(entry.get("member"), str) and entry["member"]
                  and isinstance(entry.get("archs"), list) and entry["archs"]
                  and all(isinstance(a, int) and not isinstance(a, bool) and a > 0 for a in entry["archs"])
                  and isinstance(entry.get("keep"), str) and entry["keep"]
                  and isinstance(entry.get("reason"), str) and entry["reason"].strip()
                  and (entry.get("wheel_sha256") is None
                       or (isinstance(entry["wheel_sha256"], str) and _SHA256.match(entry["wheel_sha256"]))))
            if not ok:
                raise fail(dist)(f"trim {dist!r}: {shape} (wheel_sha256 optional: 64 lowercase hex digits)")
            try:
                re.compile(entry["keep"])
            except re.error as exc:
                raise fail(dist)(f"trim {dist!r}: keep is not a regular expression: {exc}") from None
            parsed.append(TrimRule(entry["member"], tuple(entry["archs"]), entry["keep"], entry["reason"].strip(),
                                   entry.get("wheel_sha256")))
        rules[canonical(dist)] = tuple(parsed)
    return rules


def _satisfied_by_host(requirement: Requirement, host: HostPackages) -> str | None:
    """The host's version when it satisfies ``requirement`` (any version for a URL install), else None."""
    key = canonical(requirement.name)
    if key not in host.versions:
        return None
    version = host.versions[key]
    if version is None:
        return "(url)"
    return version if requirement.specifier.contains(version, prereleases=True) else None


def split_profile(profile: Profile, host: HostPackages) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(requirements to carry, host packages that satisfy theirs, host packages a pin overrules)."""
    carry, kept, shadowed = [], [], []
    for text in profile.requirements:
        requirement = Requirement(text)
        key = canonical(requirement.name)
        have = _satisfied_by_host(requirement, host)
        if have:
            kept.append(f"{key}=={have}")
            continue
        if key in host.versions:
            shadowed.append(f"{key}=={host.versions[key]} (needs {requirement.specifier})")
        carry.append(text)
    return tuple(carry), tuple(sorted(kept)), tuple(sorted(shadowed))


def wheel_fits_python(wheel_file: str, python_version: str) -> bool:
    """Whether a wheel's Python tag (``cp311``, ``py3``, ``cp310.cp311`` ...) admits ``python_version``."""
    tags = wheel_file[:-len(".whl")].split("-")[-3].split(".")
    major, minor = python_version.split(".")[:2]
    return any(tag in (f"py{major}", f"py{major}{minor}", f"cp{major}{minor}") for tag in tags)


def check_source_tree(tree: Path) -> None:
    """Refuse a ``--tree`` without ``python/sglang/`` before anything is downloaded."""
    if not (tree / "python" / "sglang").is_dir():
        raise BadInput(f"{tree} has no python/sglang/", hint="pass --tree with a patched tree (patchkit apply)")


_SOURCE_REASON = "the pinned base wheel does not fit the host's Python; the patched tree's python/ goes first on PYTHONPATH instead"


def _source_files(python_dir: Path) -> int:
    return sum(1 for p in python_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _tree_id(tree: Path) -> str | None:
    """The patched tree's content id (``HEAD^{tree}``): independent of who applied the set, and when."""
    from patchkit import git

    if not (tree / ".git").exists():
        return None
    repo = git.open_repo(tree)
    head = repo.rev("HEAD")
    return repo.tree_of(head) if head else None


def copy_source_tree(tree: Path, out: Path) -> SourceTree:
    """Copy ``tree/python`` (without caches) to ``out/python``."""
    check_source_tree(tree)
    shutil.copytree(tree / "python", out / "python", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return SourceTree("python", _source_files(out / "python"), _SOURCE_REASON, _tree_id(tree))


def host_source_tree(tree: Path) -> SourceTree:
    """``--tree-on-host``: nothing copied; the host's own copy of the same patched tree is used."""
    check_source_tree(tree)
    tree_id = _tree_id(tree)
    if tree_id is None:
        raise BadInput(f"{tree} is not a git tree, so the host's copy could not be checked against it",
                       hint="pass the tree patchkit apply wrote, or leave --tree-on-host out to ship its python/")
    return SourceTree("TREE/python (install.sh's third argument)", _source_files(tree / "python"),
                      _SOURCE_REASON + "; the host builds the same tree (patchkit base fetch + apply)", tree_id, True)


INSTALL_SH = """#!/bin/sh
# Install this wheelhouse on the host, offline, into SITE; then check the imports.
# Usage: sh install.sh [PYTHON] [SITE] [TREE]   (SITE defaults to site/ next to this script; TREE: the
# host's patched sglang tree, needed when the bundle was built with --tree-on-host)
# --target keeps the host's own packages as they are: ours shadow them only through PYTHONPATH.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${{1:-python3}}
site=${{2:-$here/site}}
checkpath="$site"
{source_tree}# a second run (with TREE, say) skips pip when SITE already holds exactly this lock
if cmp -s "$here/requirements.lock" "$site/.patchkit-bundle.lock"; then
  echo "already installed in $site (same requirements.lock)"
elif [ -s "$here/requirements.lock" ]; then
  "$py" -m pip install --no-index --no-deps --require-hashes --no-compile --upgrade --target "$site" \\
    --find-links "$here/wheels" -r "$here/requirements.lock"
  cp "$here/requirements.lock" "$site/.patchkit-bundle.lock"
fi
mkdir -p "$site"
{checks}
echo "bundle installed into $site; imports checked: {modules}"
echo "export PYTHONPATH=$site"
{source_note}"""

_SOURCE_TREE_SH = 'checkpath="$here/python:$site"\n'
# --tree-on-host: the patched tree is the host's own (built there with patchkit, which needs this bundle
# first), so it is optional here: given, it must be the tree the bundle was built for, checked before
# anything is installed; not given, the sglang imports wait for a second run with it.
_HOST_TREE_SH = """tree=${{3:-}}
if [ -n "$tree" ]; then
  found=$(git -C "$tree" rev-parse 'HEAD^{{tree}}' 2>/dev/null || echo none)
  if [ "$found" != "{tree_id}" ]; then
    echo "install.sh: $tree has git tree $found, but this bundle was built for {tree_id}: apply the same set to the same base there" >&2; exit 2
  fi
  checkpath="$tree/python:$site"
fi
"""
_HOST_TREE_CHECKS_SH = """if [ -n "$tree" ]; then
{checks}
else
  echo "not checked yet: {modules} (sglang's source is the host's patched tree: after patchkit base fetch and patchkit apply, run sh install.sh PYTHON SITE TREE)"
fi"""
_SOURCE_NOTE_SH = ('echo "sglang comes from $here/python (the patched tree), not from a wheel: '
                   'patchkit smoke puts the target tree\'s python/ first; elsewhere use '
                   'export PYTHONPATH=$here/python:$site"\n')


def _import_checks(modules: tuple[str, ...]) -> str:
    return "\n".join(f'PYTHONPATH="$checkpath" "$py" -c "import {m}"' for m in modules)


def _install_parts(check_imports: tuple[str, ...], source: SourceTree | None) -> dict[str, str]:
    """install.sh's variable parts for how sglang's source reaches the host (wheel, shipped, host's tree)."""
    parts = {"source_tree": "", "checks": _import_checks(check_imports), "modules": " ".join(check_imports),
             "source_note": ""}
    if source is not None and not source.on_host:
        parts.update(source_tree=_SOURCE_TREE_SH, source_note=_SOURCE_NOTE_SH)
    elif source is not None:  # the sglang imports need the host's tree, which may not exist yet
        from_tree = tuple(m for m in check_imports if m.split(".")[0] == "sglang")
        others = tuple(m for m in check_imports if m not in from_tree)
        checks, modules = _import_checks(others), " ".join(others)
        if from_tree:
            checks += "\n" + _HOST_TREE_CHECKS_SH.format(checks=_import_checks(from_tree), modules=" ".join(from_tree))
            modules += f"${{tree:+ {' '.join(from_tree)}}}"
        parts.update(source_tree=_HOST_TREE_SH.format(tree_id=source.tree_id), checks=checks, modules=modules)
    return parts


def write_outputs(out: Path, wheels: list[Wheel], check_imports: tuple[str, ...], source: SourceTree | None) -> str:
    lock = "".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in sorted(wheels, key=lambda w: w.name))
    (out / "requirements.lock").write_text(lock)
    (out / "install.sh").write_text(INSTALL_SH.format(**_install_parts(check_imports, source)))
    (out / "install.sh").chmod(0o755)
    return "sh install.sh PYTHON SITE [TREE]" if source is not None and source.on_host else "sh install.sh [PYTHON] [SITE]"


@dataclass(frozen=True)
class _Plan:
    """What to resolve and how, before anything is downloaded."""

    requirements: tuple[str, ...]
    no_deps: bool
    kept: tuple[str, ...]  # host packages satisfying a profile requirement (known before resolving)
    shadowed: tuple[str, ...]
    slim: dict[str, tuple[SlimRule, ...]]
    check_imports: tuple[str, ...]
    source_tree: Path | None
    tree_on_host: bool = False
    trim: dict[str, tuple[TrimRule, ...]] = field(default_factory=dict)


def _plan_profile(profile: Profile, set_manifest: manifest_mod.Manifest, host: HostPackages, target: Target,
                  tree: Path | None, check_imports: tuple[str, ...] | None, tree_on_host: bool) -> _Plan:
    carry, kept, shadowed = split_profile(profile, host)
    if tree is not None:
        check_source_tree(tree)
    base = set_manifest.pypi
    if tree is None and base is not None:
        if not wheel_fits_python(base.wheel, target.python_version):
            raise BadInput(f"{base.wheel} does not install on Python {target.python_version}",
                           location=Location(str(set_manifest.path)),
                           hint="pass --tree PATCHED_TREE: the bundle then ships its python/ instead of the wheel")
        carry = (*carry, f"{base.package}=={base.version}")
    return _Plan(carry, True, kept, shadowed, profile.slim, check_imports or profile.check_imports, tree, tree_on_host,
                 profile.trim)


def build_bundle(*, out: Path, requirements: tuple[str, ...], freeze: Path | None, have: tuple[str, ...],
                 target: Target, index_url: str | None = None, find_links: tuple[Path, ...] = (),
                 no_index: bool = False, drop: tuple[str, ...] = (), exclude: tuple[str, ...] = (),
                 check_imports: tuple[str, ...] | None = None, profile: str | None = None,
                 set_dir: Path | None = None, tree: Path | None = None, tree_on_host: bool = False,
                 split_mib: int | None = None) -> BundleResult:
    """Resolve, download, slim, hash and write the bundle; see the module docstring.

    Without ``profile``: ``requirements`` with their full dependency closure, host versions held.
    With ``profile``: the set's ``[bundle.profiles.NAME]`` list (``requirements`` is ignored).
    """
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"{out} exists and is not empty", hint="choose another --out")
    if split_mib is not None and split_mib < 1:
        raise BadInput(f"--split-mib {split_mib}: a part must be at least 1 MiB", hint="e.g. --split-mib 60")
    if tree_on_host and tree is None:
        raise BadInput("--tree-on-host needs --tree (the patched tree the host will have)", hint="add --tree TREE")
    versions = read_freeze(freeze) if freeze else {}
    versions.update(dict(parse_have(pin) for pin in have))
    host, excluded = HostPackages(versions), {canonical(e) for e in exclude}
    if profile:
        from patchkit.paths import resolve_set

        set_manifest = manifest_mod.load(resolve_set(set_dir), with_lock=False)
        plan = _plan_profile(load_profile(set_manifest, profile), set_manifest, host, target, tree, check_imports,
                             tree_on_host)
        if tree_on_host:
            host_source_tree(tree)  # refuse a non-git tree before anything is downloaded
    elif tree is not None:
        raise BadInput("--tree only goes with --profile", hint="add --profile NAME, or leave --tree out")
    else:
        plan = _Plan(requirements, False, (), (), {}, check_imports or DEFAULT_CHECK_IMPORTS, None)
    index = _index_args(index_url, find_links, no_index)
    with tempfile.TemporaryDirectory(prefix="patchkit-bundle-") as work:
        resolved = resolve(plan.requirements, host, target, index, Path(work), no_deps=plan.no_deps)
    skipped = tuple(sorted({*plan.kept, *(f"{r.name}=={r.version}" for r in resolved if host.has(r.name, r.version))}))
    wanted = [r for r in resolved if not host.has(r.name, r.version) and r.name not in excluded]
    out.mkdir(parents=True, exist_ok=True)
    files = download(wanted, target, index, out / "wheels") if wanted else {}
    rules = _merge_rules(plan.slim, parse_drop_rules(drop))
    wheels = [_slimmed(files[item.name], item, rules.get(item.name, ()), plan.trim.get(item.name, ()))
              for item in wanted]
    source_tree = _source_for(plan, out)
    command = write_outputs(out, wheels, plan.check_imports, source_tree)
    result = BundleResult("bundle", True, out, target.python_version, target.platforms, plan.requirements,
                          tuple(wheels), skipped, tuple(sorted(excluded)), command, profile, plan.shadowed,
                          source_tree)
    (out / "bundle.json").write_text(json.dumps(result.payload(), indent=2) + "\n")
    return replace(result, parts=split_bundle(out, split_mib)) if split_mib else result


def _source_for(plan: _Plan, out: Path) -> SourceTree | None:
    if plan.source_tree is None:
        return None
    return host_source_tree(plan.source_tree) if plan.tree_on_host else copy_source_tree(plan.source_tree, out)


def _slimmed(path: Path, item: Resolved, rules: tuple[SlimRule, ...], trim: tuple[TrimRule, ...] = ()) -> Wheel:
    original_sha, original_size = sha256_of(path), path.stat().st_size
    dropped, unmatched, trimmed = slim_and_trim_wheel(path, original_sha, rules, trim)
    changed = bool(dropped or trimmed)
    return Wheel(f"wheels/{path.name}", item.name, item.version, sha256_of(path), path.stat().st_size, item.url,
                 original_sha if changed else None, original_size if changed else None, dropped, unmatched, trimmed)


# ---------------------------------------------------------------- --trimmed-archive: the trimmed members alone


@dataclass(frozen=True, kw_only=True)
class TrimmedArchiveResult(CommandResult):
    archive: Path
    sha256: str
    size: int
    profile: str
    members: tuple[TrimRecord, ...]  # each names its source wheel and that wheel's sha256
    unpack_command: str


def _pinned_version(profile: Profile, dist: str) -> str:
    """The exact version the profile pins ``dist`` to (a trim rule reads one build's layout)."""
    for text in profile.requirements:
        requirement = Requirement(text)
        if canonical(requirement.name) == dist:
            pins = [s.version for s in requirement.specifier if s.operator == "=="]
            if len(pins) == 1 and "*" not in pins[0]:
                return pins[0]
            raise BadInput(f"profile {profile.name}: {text!r} is not pinned with ==, but {dist} has trim rules",
                           hint="pin the distribution whose library is trimmed to one version")
    raise BadInput(f"profile {profile.name}: trim rules for {dist}, which its requirements do not list",
                   hint="add the distribution to the profile's requirements")


def build_trimmed_archive(*, archive: Path, profile: str, target: Target, set_dir: Path | None = None,
                          index_url: str | None = None, find_links: tuple[Path, ...] = (),
                          no_index: bool = False) -> TrimmedArchiveResult:
    """Download the profile's pinned wheels that have trim rules, check them against the rules'
    ``wheel_sha256``, trim their members and write ``archive`` (.tar.xz of the trimmed members and
    their records, paths as under SITE): for a host whose SITE holds the rest of the profile."""
    from patchkit.paths import resolve_set

    if not archive.name.endswith(".tar.xz"):
        raise BadInput(f"--trimmed-archive {archive}: the name must end in .tar.xz", hint="e.g. fa3-sm90-bf16.tar.xz")
    chosen = load_profile(manifest_mod.load(resolve_set(set_dir), with_lock=False), profile)
    if not chosen.trim:
        raise BadInput(f"profile {profile} has no trim rules: nothing for --trimmed-archive",
                       hint="name a profile with [bundle.profiles.NAME.trim], e.g. server-fa3")
    wanted = [Resolved(dist, _pinned_version(chosen, dist), None, None) for dist in chosen.trim]
    index = _index_args(index_url, find_links, no_index)
    records: list[TrimRecord] = []
    with tempfile.TemporaryDirectory(prefix="patchkit-trimmed-") as work:
        files = download(wanted, target, index, Path(work) / "wheels")
        trimmed = []
        for dist, wheel in files.items():
            trimmed += trim_members(wheel, sha256_of(wheel), chosen.trim[dist], Path(work))
            wheel.unlink()
        archive.parent.mkdir(parents=True, exist_ok=True)
        write_archive(archive, trimmed)
        records = [record for *_, record in trimmed]
    return TrimmedArchiveResult(command="bundle", ok=True, archive=archive, sha256=sha256_of(archive),
                                size=archive.stat().st_size, profile=profile, members=tuple(records),
                                unpack_command=f"tar -xJf {archive.name} -C SITE")
