"""Preflight: everything that can be checked before a server starts. Any failure is bad input (exit 2).

GPUs are listed with ``nvidia-smi``; where it is missing, with torch in the server's interpreter. In the
server's interpreter, with the server's environment, :mod:`patchkit.smoke.server_probe` imports what
the server needs (numpy, torch, ``sglang`` from the target, its entry module and the set's modules),
parses every server command line with SGLang's own parser, and checks the kernels of the attention
backends SGLang resolved for each server (named or SGLang's default: fa3 for DFLASH on Hopper): fa3's
``sgl_kernel.flash_ops`` (and, for a trimmed library, that it keeps the models' kernels), flashinfer's
JIT prerequisites. A failure names the module, the argument or the backend, and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchkit import proc
from patchkit.errors import PatchkitError
from patchkit.git import open_repo
from patchkit.manifest import Manifest
from patchkit.patchset import state
from patchkit.smoke.server_probe import MARKER

GPU_QUERY = ("nvidia-smi", "--query-gpu=index,name,memory.free,memory.total", "--format=csv,noheader,nounits")
TORCH_QUERY = (
    "import json, torch\n"
    "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
    "out = []\n"
    "for i in range(n):\n"
    "    free, total = torch.cuda.mem_get_info(i)\n"
    "    out.append([i, torch.cuda.get_device_name(i), free // 2**20, total // 2**20])\n"
    "print(json.dumps(out))\n"
)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    free_mib: int
    total_mib: int


@dataclass(frozen=True)
class Check:
    """One preflight check: what was checked, whether it passed, and the detail either way."""

    name: str
    ok: bool
    detail: str
    # "attention backends": the servers (their places in the run) whose backend's kernels do not load
    servers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Preflight:
    checks: tuple[Check, ...]
    gpus: tuple[GpuInfo, ...]
    gpu_source: str | None

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def failures(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.ok)


def _parse_nvidia_smi(text: str) -> list[GpuInfo]:
    gpus = []
    for line in text.strip().splitlines():
        index, name, free, total = (part.strip() for part in line.split(","))
        gpus.append(GpuInfo(int(index), name, int(free), int(total)))
    return gpus


def list_gpus(python: str) -> tuple[list[GpuInfo], str | None]:
    """Visible GPUs and how they were found ('nvidia-smi', 'torch', or None if neither works)."""
    if shutil.which(GPU_QUERY[0]):
        done = proc.run(GPU_QUERY, check=False, timeout=60)
        if done.returncode == 0:
            return _parse_nvidia_smi(done.stdout), "nvidia-smi"
    done = proc.run((python, "-c", TORCH_QUERY), check=False, timeout=120)
    if done.returncode == 0 and done.stdout.strip():
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        return [GpuInfo(int(i), str(n), int(f), int(t)) for i, n, f, t in rows], "torch"
    return [], None


#: A GPU with less free memory than this share of its total is held by someone else (perhaps a server a
#: killed run left behind); a server started there would run out of memory, so preflight refuses.
MIN_FREE_SHARE = 0.5


def visible(gpus: list[GpuInfo], cuda_visible: str | None) -> list[GpuInfo]:
    """nvidia-smi lists every GPU; keep those CUDA_VISIBLE_DEVICES exposes, in its order."""
    if cuda_visible is None or not all(part.strip().isdigit() for part in cuda_visible.split(",") if part.strip()):
        return gpus  # unset, or UUIDs: take nvidia-smi's list as it is
    by_index = {g.index: g for g in gpus}
    return [by_index[int(p)] for p in cuda_visible.split(",") if p.strip() and int(p) in by_index]


def check_gpus(wanted: int, python: str) -> tuple[Check, list[GpuInfo], str | None]:
    gpus, source = list_gpus(python)
    if source is None:
        return Check("gpus", False, "no GPU found: nvidia-smi and torch.cuda both unavailable"), [], None
    if source == "nvidia-smi":
        gpus = visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    listing = ", ".join(f"{g.index}: {g.name} ({g.free_mib} MiB free of {g.total_mib})" for g in gpus)
    if len(gpus) < wanted:
        return Check("gpus", False, f"{wanted} GPUs wanted, {len(gpus)} visible ({listing or 'none'})"), gpus, source
    busy = [g for g in gpus[:wanted] if g.free_mib < MIN_FREE_SHARE * g.total_mib]
    if busy:
        names = ", ".join(f"GPU {g.index} has {g.free_mib} of {g.total_mib} MiB free" for g in busy)
        return Check("gpus", False, f"{names}; another process holds it (see nvidia-smi)"), gpus, source
    return Check("gpus", True, f"{len(gpus)} visible via {source}: {listing}"), gpus, source


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` (SO_REUSEADDR, as uvicorn binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def check_port(port: int) -> Check:
    if not 0 < port < 65536:
        return Check("port", False, f"port {port} is out of range")
    if not port_free(port):
        return Check("port", False, f"port {port} is already in use; pass --port with a free port")
    return Check("port", True, f"port {port} is free")


def check_model_dir(name: str, path: Path) -> Check:
    config = path / "config.json"
    if not path.is_dir():
        return Check(name, False, f"{path} is not a directory")
    if not config.is_file():
        return Check(name, False, f"{config} not found")
    try:
        json.loads(config.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return Check(name, False, f"{config} is not valid JSON: {error}")
    return Check(name, True, f"{path} has a config.json")


def check_target(target: Path, manifest: Manifest) -> Check:
    """The target holds the set's patch commits on top of its base (the engine's one definition)."""
    set_id = manifest.label
    package = target / "python" / "sglang"
    if not package.is_dir():
        return Check("target", False, f"{package} not found; pass --target with an SGLang tree")
    try:
        patched = state.patched_by(open_repo(target), manifest)
    except PatchkitError as error:
        return Check("target", False, f"cannot tell whether {target} is patched by {set_id}: {error.message}")
    if not patched:
        return Check("target", False, f"{target} is not patched by {set_id}; run patchkit apply first")
    return Check("target", True, f"{target} is patched by {set_id}")


def check_python(python: str) -> Check:
    found = shutil.which(python)
    if not found:
        return Check("python", False, f"interpreter {python} not found; pass --python")
    return Check("python", True, found)


def server_env(target: Path) -> dict[str, str]:
    """The patched tree's ``python/`` first on PYTHONPATH, unbuffered so the log shows progress."""
    paths = [str((target / "python").resolve()), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "PYTHONUNBUFFERED": "1"}


#: What every SGLang server imports first, before ``sglang`` itself.
SERVER_NEEDS = ("numpy", "torch")
#: The module ``python -m`` runs (see :func:`patchkit.smoke.launch.server_argv`).
SERVER_ENTRY = "sglang.launch_server"
PROBE = Path(__file__).with_name("server_probe.py")
PROBE_TIMEOUT_S = 600.0


def set_modules(target: Path, manifest: Manifest) -> list[str]:
    """The target's modules that the set adds or changes (the server imports them to run the set)."""
    source_root = str(manifest.verify.get("source_root", "python")).strip("/") + "/"
    try:
        touched = state.touched(open_repo(target), manifest)
    except PatchkitError:
        return []  # the target check says why
    names = []
    for rel in touched:
        if rel.startswith(source_root) and rel.endswith(".py") and (target / rel).is_file():
            parts = rel[len(source_root):-3].split("/")
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(set(names))


def _import_fix(python: str, failure: dict[str, Any]) -> str:
    missing = failure.get("missing")
    if missing:
        top = str(missing).split(".")[0]
        return f"install {top} into that interpreter (`{python} -m pip install {top}`), or pass --python " \
               "with the interpreter the server should run in"
    return "its import fails there: check the versions of the packages it needs (`patchkit verify --gate " \
           "imports` checks the tree's imports on CPU), or pass --python"


def check_server(python: str, target: Path, manifest: Manifest,
                 argvs: Sequence[Sequence[str]]) -> list[Check]:
    """Import what the server needs and parse its command lines, in ``python`` with the server's
    environment (see the module docstring): a "server imports" row, then a "server args" row."""
    request = {"target": str(target.resolve()), "needs": list(SERVER_NEEDS),
               "modules": [SERVER_ENTRY, *set_modules(target, manifest)], "argvs": [list(a) for a in argvs]}
    try:
        done = proc.run((python, "-c", PROBE.read_text()), input=json.dumps(request), env=server_env(target),
                        check=False, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [Check("server imports", False, f"{python} did not import what the server needs in "
                      f"{PROBE_TIMEOUT_S:.0f}s; check that interpreter (or pass --python)")]
    except OSError as error:  # found, but the system cannot run it (a broken #! line, not executable)
        return [Check("server imports", False, f"{python} cannot be run: {error.strerror or error}; pass --python "
                      "with a working interpreter")]
    found = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    if not found:
        said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return [Check("server imports", False, f"{python} could not run the check: "
                      f"{said[-1] if said else f'exit {done.returncode}'}; pass --python with a working interpreter")]
    report = json.loads(found[-1][len(MARKER):])
    failure = report.get("failure")
    if failure and failure["kind"] == "import":
        return [Check("server imports", False, f"{python} cannot import {failure['what']} ({failure['error']}); "
                      + _import_fix(python, failure))]
    if failure and failure["kind"] == "location":
        return [Check("server imports", False, f"{failure['error']}: the server would run that one; uninstall "
                      f"it from {python} or pass --python with another interpreter")]
    shown = ", ".join(f"{name} {version}" for name, version in report.get("versions", {}).items())
    imported = Check("server imports", True, f"{report['imported']} module(s) import in {python} ({shown})")
    if failure and failure["kind"] == "backend":
        return [imported, parsed_ok(report), backend_refusal(python, argvs, failure)]
    if failure and failure["kind"] == "setup":
        return [imported, Check("server args", False, f"SGLang cannot set up a server with these arguments here: "
                                f"{failure['error']}; the server would stop the same way (check the host, or the "
                                "arguments after `--`)")]
    if failure:
        return [imported, Check("server args", False, f"SGLang refuses the server arguments: {failure['error']}; "
                                "fix that argument (after `--`, or in the set's [smoke] profile)")]
    return [imported, parsed_ok(report), backends_ok(argvs, report)]


def parsed_ok(report: dict[str, Any]) -> Check:
    return Check("server args", True, f"SGLang's parser accepts the {report['parsed']} server command line(s)")


def server_label(number: int, argvs: Sequence[Sequence[str]]) -> str:
    """"server 2 (DFLASH)": the server's place in the run and its algorithm."""
    argv = list(argvs[number]) if number < len(argvs) else []
    algorithm = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--speculative-algorithm"),
                     next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--speculative-algorithm=")),
                          "baseline"))
    return f"server {number + 1} ({algorithm})"


def _backend_roles(row: dict[str, Any]) -> str:
    if row["prefill"] == row["decode"] and row.get("draft") in (None, row["prefill"]):
        return str(row["prefill"]) + (" (target and draft)" if row.get("draft") else "")
    parts = [f"{role} {row[role]}" for role in ("prefill", "decode", "draft") if row.get(role)]
    return ", ".join(parts)


#: What to do when a backend's kernels do not load, by backend.
BACKEND_FIXES = {
    "fa3": "install FA3 into that interpreter's sgl_kernel (a GPU-host bundle built with --profile server-fa3, or "
           "ci/gpu/host's fa3-sm90-bf16.tar.xz unpacked over the site), or pass --attention-backend triton",
    "flashinfer": "fix that on the host, or pass another --attention-backend (e.g. triton)",
}


def backend_refusal(python: str, argvs: Sequence[Sequence[str]], failure: dict[str, Any]) -> Check:
    servers = ", ".join(server_label(n, argvs) for n in failure.get("servers", []))
    fix = BACKEND_FIXES.get(str(failure["what"]), "pass another --attention-backend")
    return Check("attention backends", False, f"{servers or 'a server'} would run the {failure['what']} attention "
                 f"backend, whose kernels cannot load in {python}: {failure['error']}; {fix}",
                 servers=tuple(int(n) for n in failure.get("servers", [])))


def backends_ok(argvs: Sequence[Sequence[str]], report: dict[str, Any]) -> Check:
    rows = report.get("backends") or []
    if not any(row.get("prefill") or row.get("decode") for row in rows):
        return Check("attention backends", True, "SGLang did not say which backend it picks (not checked)")
    chosen = "; ".join(f"{server_label(row['server'], argvs)}: {_backend_roles(row)}" for row in rows)
    checked = "; ".join(f"{name}: {detail}" for name, detail in (report.get("checked") or {}).items())
    return Check("attention backends", True, f"{chosen}. {checked}")


def run_preflight(*, gpus: int, python: str, ports: tuple[int, ...], model: Path, draft_model: Path,
                  target: Path, manifest: Manifest, server_argvs: Sequence[Sequence[str]] = ()) -> Preflight:
    """Run every check (not stopping at the first failure, so one run shows every problem).

    ``server_argvs``: the server command lines the run will launch, after ``PY -m sglang.launch_server``."""
    checks = [check_python(python), *(check_port(p) for p in ports), check_model_dir("model", model),
              check_model_dir("draft-model", draft_model), check_target(target, manifest)]
    if checks[0].ok and (target / "python" / "sglang").is_dir():
        checks += check_server(python, target, manifest, server_argvs)
    found: list[GpuInfo] = []
    source = None
    if gpus > 0:
        gpu_check, found, source = check_gpus(gpus, python)
        checks.insert(0, gpu_check)
    else:
        checks.insert(0, Check("gpus", True, "--gpus 0: CPU stand-in mode, GPU checks skipped"))
    return Preflight(tuple(checks), tuple(found), source)
