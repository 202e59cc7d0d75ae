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
   ``--check-import`` modules after installing.
5. **Write** ``wheels/``, ``requirements.lock`` (pins with ``--hash``), ``bundle.json`` (the manifest)
   and ``install.sh``: the one command for the host, ``sh install.sh [PYTHON]``, which installs with
   ``--no-index --no-deps --require-hashes`` and then runs the import checks.
"""

from __future__ import annotations

import base64
import csv
import fnmatch
import hashlib
import io
import json
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from patchkit import proc
from patchkit.errors import BadInput, Failed, location
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
        for platform in self.platforms:
            args += ["--platform", platform]
        return args


@dataclass(frozen=True)
class Resolved:
    name: str
    version: str
    url: str | None
    index_sha256: str | None


@dataclass(frozen=True)
class Wheel:
    """One file of the wheelhouse, as the manifest records it."""

    file: str
    name: str
    version: str
    sha256: str
    source_url: str | None
    original_sha256: str | None = None
    dropped_members: tuple[str, ...] = ()


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
            work: Path) -> list[Resolved]:
    """Everything ``requirements`` needs on the host, with the host's own versions held fixed."""
    constraints = work / "host-constraints.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(host.versions.items()) if v))
    report = work / "report.json"
    _pip(["install", "--dry-run", "--ignore-installed", "--report", str(report),
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


def slim_wheel(path: Path, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Rewrite the wheel without members matching ``patterns``; keep RECORD true. Returns the dropped."""
    with zipfile.ZipFile(path) as source:
        members = source.infolist()
        dropped = tuple(m.filename for m in members if any(fnmatch.fnmatch(m.filename, p) for p in patterns))
        if not dropped:
            return ()
        record_name = next(m.filename for m in members if m.filename.endswith(".dist-info/RECORD"))
        rewritten = path.with_suffix(".slim")
        with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as out:
            for member in members:
                if member.filename in dropped or member.filename == record_name:
                    continue
                out.writestr(member, source.read(member))
            out.writestr(record_name, _filtered_record(source.read(record_name).decode(), set(dropped)))
    rewritten.replace(path)
    return dropped


def _filtered_record(record: str, dropped: set[str]) -> str:
    rows = [row for row in csv.reader(io.StringIO(record)) if row and row[0] not in dropped]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def parse_drop_rules(rules: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """``DIST:GLOB`` options -> dist -> globs over wheel member paths."""
    by_dist: dict[str, list[str]] = {}
    for rule in rules:
        dist, sep, glob = rule.partition(":")
        if not sep or not dist or not glob:
            raise BadInput(f"--drop: expected DIST:GLOB, got {rule!r}")
        by_dist.setdefault(canonical(dist), []).append(glob)
    return {dist: tuple(globs) for dist, globs in by_dist.items()}


INSTALL_SH = """#!/bin/sh
# Install this wheelhouse on the host, offline; then check the imports. Usage: sh install.sh [PYTHON]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${{1:-python3}}
"$py" -m pip install --no-index --no-deps --require-hashes --find-links "$here/wheels" -r "$here/requirements.lock"
{checks}
echo "bundle installed; imports checked: {modules}"
"""


def write_outputs(out: Path, wheels: list[Wheel], check_imports: tuple[str, ...]) -> str:
    lock = "".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in sorted(wheels, key=lambda w: w.name))
    (out / "requirements.lock").write_text(lock)
    checks = "\n".join(f'"$py" -c "import {m}"' for m in check_imports)
    (out / "install.sh").write_text(INSTALL_SH.format(checks=checks, modules=" ".join(check_imports)))
    (out / "install.sh").chmod(0o755)
    return "sh install.sh"


def build_bundle(*, out: Path, requirements: tuple[str, ...], freeze: Path | None, have: tuple[str, ...],
                 target: Target, index_url: str | None = None, find_links: tuple[Path, ...] = (),
                 no_index: bool = False, drop: tuple[str, ...] = (), exclude: tuple[str, ...] = (),
                 check_imports: tuple[str, ...] = DEFAULT_CHECK_IMPORTS) -> BundleResult:
    """Resolve, download, slim, hash and write the bundle; see the module docstring."""
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"{out} exists and is not empty", hint="choose another --out")
    versions = read_freeze(freeze) if freeze else {}
    versions.update(dict(parse_have(pin) for pin in have))
    host, rules, excluded = HostPackages(versions), parse_drop_rules(drop), {canonical(e) for e in exclude}
    index = _index_args(index_url, find_links, no_index)
    with tempfile.TemporaryDirectory(prefix="patchkit-bundle-") as work:
        resolved = resolve(requirements, host, target, index, Path(work))
    skipped = tuple(sorted(f"{r.name}=={r.version}" for r in resolved if host.has(r.name, r.version)))
    wanted = [r for r in resolved if not host.has(r.name, r.version) and r.name not in excluded]
    files = download(wanted, target, index, out / "wheels")
    wheels = []
    for item in wanted:
        path = files[item.name]
        original = sha256_of(path)
        dropped = slim_wheel(path, rules.get(item.name, ()))
        wheels.append(Wheel(f"wheels/{path.name}", item.name, item.version, sha256_of(path), item.url,
                            original if dropped else None, dropped))
    command = write_outputs(out, wheels, check_imports)
    result = BundleResult("bundle", True, out, target.python_version, target.platforms, requirements,
                          tuple(wheels), skipped, tuple(sorted(excluded)), command)
    (out / "bundle.json").write_text(json.dumps(result.payload(), indent=2) + "\n")
    return result
