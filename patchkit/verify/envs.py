"""Isolated Python environments for the gates that run the patched tree (imports, tests, backend).

An environment is declared in the manifest's ``[verify.env]`` table::

    [verify.env]
    python = "3.11"                       # base interpreter version (default: the running one)
    packages = ["torch==2.13.0", "numpy==2.4.6", ...]   # exact pins, installed with pip
    pip_args = []                         # extra pip arguments, e.g. an extra index
    stubs_dir = "../common/stubs"         # set-relative folder of stub packages (optional)

    [verify.env.stubs]                    # every stub package, with the reason it is needed
    torchvision = "PyPI torchvision does not load beside torch 2.13.0+cpu; sglang only needs ..."

:func:`ensure_env` creates the venv once and caches it under ``env_root/<hash of the spec>``; a file
lock makes concurrent runs wait for one creator instead of racing. A half-built environment (no
marker file) is removed and rebuilt. ``$PATCHKIT_VERIFY_PYTHON`` replaces the environment with a given
interpreter (reported, never silent).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from patchkit import proc
from patchkit.errors import BadInput, Failed
from patchkit.verify.api import Finding, Severity, VerifyContext
from patchkit.verify.cache import key_of

MARKER = "patchkit-env.json"
RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"
OVERRIDE = "PATCHKIT_VERIFY_PYTHON"


# ---------------------------------------------------------------- interpreters


def reports_version(executable: str, version: str) -> bool:
    """True when ``executable`` runs and is Python ``version`` (pyenv shims exist but may refuse)."""
    try:
        done = proc.run([executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], check=False,
                        timeout=20)
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def candidate_interpreters(version: str) -> list[str]:
    """``$PATCHKIT_PYTHON_3_X``, then ``python3.X`` on PATH, then pyenv installs of that version."""
    override = os.environ.get(f"PATCHKIT_PYTHON_{version.replace('.', '_')}")
    found = [override] if override else []
    on_path = shutil.which(f"python{version}")
    if on_path:
        found.append(on_path)
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found += sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}"))
    return found


@cache
def find_interpreter(version: str) -> str | None:
    """An interpreter for ``version``: the running one, or the first candidate that answers truthfully."""
    if version == RUNNING:
        return sys.executable
    return next((exe for exe in candidate_interpreters(version) if reports_version(exe, version)), None)


# ---------------------------------------------------------------- environments


def validated(spec: dict[str, Any]) -> dict[str, Any]:
    """The parts of ``[verify.env]`` that define the environment, checked; bad input otherwise."""
    packages = spec.get("packages")
    if not isinstance(packages, list) or not packages or not all(isinstance(p, str) for p in packages):
        raise BadInput("[verify.env] packages must be a non-empty list of pinned requirement strings",
                       hint='e.g. packages = ["torch==2.13.0", "numpy==2.4.6"]')
    pip_args = spec.get("pip_args", [])
    if not isinstance(pip_args, list) or not all(isinstance(a, str) for a in pip_args):
        raise BadInput("[verify.env] pip_args must be a list of strings")
    return {"python": str(spec.get("python", RUNNING)), "packages": packages, "pip_args": pip_args}


def env_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


@contextmanager
def file_lock(path: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[None]:
    """An exclusive advisory lock held for the block (released if the process dies); ``on_wait`` is
    called once when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pip_step(line: str) -> str | None:
    """The lines of pip's output worth showing as progress ("Collecting torch==2.13.0", ...)."""
    line = line.strip()
    return line if line.startswith(("Collecting", "Downloading", "Installing", "Building", "Successfully")) else None


def create_env(env_dir: Path, spec: dict[str, Any], progress: Callable[[str], None]) -> None:
    """Build the venv in place; the marker is written last, so a crash leaves no 'ready' env."""
    version = spec["python"]
    base = find_interpreter(version)
    if base is None:
        raise BadInput(f"[verify.env] wants Python {version}, which is not installed here",
                       hint=f"install python{version} or set PATCHKIT_PYTHON_{version.replace('.', '_')}")
    start = time.monotonic()
    progress(f"creating the [verify.env] environment (Python {version}, {len(spec['packages'])} packages)")
    proc.run([base, "-m", "venv", env_dir], timeout=600)

    def on_line(line: str) -> None:
        step = _pip_step(line)
        if step:
            progress(f"[verify.env] {step}")

    try:
        proc.stream([env_python(env_dir), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar",
                     "off", *spec["pip_args"], *spec["packages"]], on_line, timeout=3600)
    except proc.CommandFailed as error:
        raise Failed(f"could not create the verify environment: {error.message}",
                     hint="check the pins in [verify.env] packages") from None
    (env_dir / MARKER).write_text(json.dumps({"spec": spec, "seconds": round(time.monotonic() - start, 1)}))


def ensure_env(spec: dict[str, Any], env_root: Path, progress: Callable[[str], None] = lambda text: None) -> Path:
    """The python of the cached venv for ``spec`` (``[verify.env]``), creating it on first use."""
    spec = validated(spec)
    key = key_of("env", spec)[:16]
    env_dir = env_root / key
    if (env_dir / MARKER).is_file():
        return env_python(env_dir)
    waiting = "waiting for the [verify.env] environment: another patchkit run is creating it"
    with file_lock(env_root / f"{key}.lock", lambda: progress(waiting)):
        if not (env_dir / MARKER).is_file():  # another process may have built it while we waited
            if env_dir.exists():  # a half-built env from a crashed run
                shutil.rmtree(env_dir)
            create_env(env_dir, spec, progress)
    return env_python(env_dir)


# ---------------------------------------------------------------- what the gates use


@dataclass(frozen=True)
class Interpreter:
    """The interpreter a gate runs the tree with, and why that one (reported as an info finding)."""

    python: str
    note: str
    spec_key: str  # part of cache keys: results depend on the environment


def verify_interpreter(ctx: VerifyContext) -> Interpreter:
    """``$PATCHKIT_VERIFY_PYTHON``, else the ``[verify.env]`` venv, else the running interpreter."""
    override = os.environ.get(OVERRIDE)
    if override:
        return Interpreter(override, f"ran with ${OVERRIDE}={override} instead of the [verify.env] environment",
                           override)
    spec = ctx.manifest.verify_table("env")
    if not spec:
        return Interpreter(sys.executable, "no [verify.env] in the manifest: ran with the running interpreter",
                           sys.executable)
    python = ensure_env(spec, ctx.env_dir, ctx.progress)
    return Interpreter(str(python), "ran in the [verify.env] environment", key_of("env", validated(spec)))


def _manifest_finding(gate: str, severity: Severity, message: str, file: str = "manifest.toml",
                      hint: str | None = None) -> Finding:
    return Finding(gate=gate, severity=severity, file=file, message=message, hint=hint)


def stubs(ctx: VerifyContext, gate: str) -> tuple[Path | None, list[Finding]]:
    """The declared stub folder (or None) and findings: each stub reported, undeclared ones refused."""
    env = ctx.manifest.verify_table("env")
    declared: dict[str, str] = dict(env.get("stubs", {}))
    if "stubs_dir" not in env:
        if declared:
            return None, [_manifest_finding(gate, Severity.ERROR, "[verify.env.stubs] declared without stubs_dir")]
        return None, []
    folder = ctx.set_dir / env["stubs_dir"]
    present = {p.stem if p.suffix == ".py" else p.name for p in folder.glob("*") if not p.name.startswith((".", "__"))}
    findings = [_manifest_finding(gate, Severity.INFO, f"stub {name!r} in use: {declared[name]}")
                for name in sorted(present & declared.keys())]
    findings += [_manifest_finding(gate, Severity.ERROR, f"stub {name!r} is not declared", f"{env['stubs_dir']}/{name}",
                                   "declare it with its reason under [verify.env.stubs], or remove it")
                 for name in sorted(present - declared.keys())]
    findings += [_manifest_finding(gate, Severity.ERROR, f"declared stub {name!r} is missing from {env['stubs_dir']}")
                 for name in sorted(declared.keys() - present)]
    return folder, findings
