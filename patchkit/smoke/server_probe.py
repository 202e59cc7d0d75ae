"""The preflight's look inside the server's interpreter: run there with ``-c`` (so nothing of patchkit
is on its path) and the server's environment, standard library only.

It imports what the server needs, in order (numpy, torch, ``sglang`` from the target, the server's
entry module, the set's modules), then parses each server command line with SGLang's own
``sglang.srt.server_args.prepare_server_args``, as the server's first step does. That also resolves
the attention backends the server will get (SGLang's own default where none is named: fa3 for DFLASH
and the baseline on Hopper, triton for DDTREE), whose kernels are then checked (:func:`check_backend`):
fa3 imports ``sgl_kernel.flash_ops`` and ``sgl_kernel.flash_attn`` and, when the library was trimmed
(``flash_ops.abi3.so.trim.json`` beside it, see patchkit's bundle trim rules), must keep the kernels of
each model's head dim and dtype and of this GPU; flashinfer needs ``flashinfer``, ``nvcc`` (PATH or
CUDA_HOME) for its JIT and a writable JIT cache folder. Reads ``{"target": DIR, "needs": [...],
"modules": [...], "argvs": [[...], ...]}`` on stdin and prints one JSON document after
:data:`MARKER`: ``{"versions": {...}, "imported": N, "parsed": N, "backends": [{"server": I,
"prefill": B, "decode": B, "draft": B | null}, ...], "checked": {B: detail}, "failure": null |
{"kind": "import" | "location" | "args" | "setup" | "backend", "what": ..., "error": ...,
"missing": ...}}``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import shutil
import sys
from typing import Any

MARKER = "@@patchkit-server-probe@@"
#: How SGLang's argument checks refuse a value (argparse itself exits).
REFUSALS = (ValueError, TypeError, AssertionError)


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def import_all(modules: list[str]) -> dict[str, Any] | None:
    for name in modules:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                importlib.import_module(name)
        except BaseException as error:  # a module may also exit or raise anything at import
            missing = error.name if isinstance(error, ImportError) else None
            return {"kind": "import", "what": name, "error": one_line(error), "missing": missing}
    return None


def sglang_location(target: str) -> dict[str, Any] | None:
    sglang = importlib.import_module("sglang")
    where = os.path.realpath(os.path.dirname(sglang.__file__ or ""))
    expected = os.path.realpath(os.path.join(target, "python", "sglang"))
    if where != expected:
        return {"kind": "location", "what": "sglang", "error": f"sglang is imported from {where}, not from the "
                f"target's {expected}", "missing": None}
    return None


def argparse_error(captured: str) -> str:
    """argparse's last line (``prog: error: argument --x: invalid ...``), from ``error:`` on."""
    lines = [line for line in captured.splitlines() if line.strip()]
    last = lines[-1] if lines else "the parser exited"
    return last.split("error: ", 1)[-1]


def parse_all(argvs: list[list[str]]) -> tuple[list[Any], dict[str, Any] | None]:
    """Each command line's ServerArgs, until the first one SGLang refuses (then that failure)."""
    prepare_server_args = importlib.import_module("sglang.srt.server_args").prepare_server_args
    parsed = []
    for argv in argvs:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(captured):
                parsed.append(prepare_server_args(list(argv)))
        except SystemExit:
            return parsed, {"kind": "args", "what": " ".join(argv), "error": argparse_error(captured.getvalue()),
                            "missing": None}
        except REFUSALS as error:
            return parsed, {"kind": "args", "what": " ".join(argv), "error": one_line(error), "missing": None}
        except BaseException as error:  # not the arguments: what the server's setup needs of this host
            return parsed, {"kind": "setup", "what": " ".join(argv), "error": one_line(error), "missing": None}
    return parsed, None


# ------------------------------------------------------------------------------ attention backends


def backends_of(server_args: Any) -> dict[str, Any]:
    """The attention backends SGLang resolved for one server (its fields carry them once parsed)."""
    base = getattr(server_args, "attention_backend", None)
    speculative = getattr(server_args, "speculative_algorithm", None)
    return {"prefill": getattr(server_args, "prefill_attention_backend", None) or base,
            "decode": getattr(server_args, "decode_attention_backend", None) or base,
            "draft": getattr(server_args, "speculative_draft_attention_backend", None) if speculative else None}


def _import_error(modules: list[str]) -> str | None:
    failure = import_all(modules)
    return f"{failure['what']}: {failure['error']}" if failure else None


def _model_configs(server_args: Any, roles: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """(role, config.json) of the target model (``roles`` has prefill or decode) and the draft model
    (``roles`` has draft), where they are local folders."""
    found = []
    for role, attribute in (("model", "model_path"), ("draft model", "speculative_draft_model_path")):
        if (role == "model" and not roles & {"prefill", "decode"}) or (role == "draft model" and "draft" not in roles):
            continue
        path = getattr(server_args, attribute, None)
        config = os.path.join(str(path), "config.json") if path else ""
        if config and os.path.isfile(config):
            try:
                with open(config, encoding="utf-8") as handle:
                    found.append((role, json.load(handle)))
            except (OSError, ValueError):
                continue  # the model checks say what is wrong with it
    return found


_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16"}


def fa3_units_needed(server_args: Any, roles: set[str]) -> list[tuple[str, str]]:
    """(what, FA3 translation unit) each model on fa3 needs: flash_fwd_hdim<D>_<dtype>[_softcap]_sm90."""
    needed = []
    for role, config in _model_configs(server_args, roles):
        text = config.get("text_config") or config
        heads = text.get("num_attention_heads")
        head_dim = text.get("head_dim") or (text["hidden_size"] // heads if heads and text.get("hidden_size") else None)
        kv_dtype = str(getattr(server_args, "kv_cache_dtype", "auto") or "auto")
        dtype = str(getattr(server_args, "dtype", "auto") or "auto")
        if dtype == "auto":
            dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "")
        short = "e4m3" if "e4m3" in kv_dtype else _DTYPES.get(dtype)
        if not head_dim or not short:
            continue  # not told: the kernel is picked at run time
        softcap = "_softcap" if text.get("attn_logit_softcapping") else ""
        needed.append((f"the {role} (head dim {head_dim}, {short}{', softcap' if softcap else ''})",
                       f"flash_fwd_hdim{head_dim}_{short}{softcap}_sm90"))
    return needed


def _gpu_arch() -> int | None:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return int(major) * 10 + int(minor)
    except Exception:  # no driver, no device: nothing to compare
        return None
    return None


def fa3_trim_error(library: str, servers: list[tuple[Any, set[str]]]) -> str | None:
    """A trimmed FA3 library (patchkit bundle trim rules) must hold what these servers dispatch to."""
    record_path = library + ".trim.json"
    if not os.path.isfile(record_path):
        return None
    with open(record_path, encoding="utf-8") as handle:
        record = json.load(handle)
    kept, archs = set(record.get("kept_units", [])), [int(a) for a in record.get("archs", [])]
    where = f"{os.path.basename(library)} is trimmed ({record_path}: keeps {', '.join(sorted(kept))} for " \
            f"sm_{', sm_'.join(map(str, archs))})"
    arch = _gpu_arch()
    if arch is not None and arch not in archs:
        return f"{where}, but this GPU is sm_{arch}"
    for server_args, roles in servers:
        for what, unit in fa3_units_needed(server_args, roles):
            if unit not in kept:
                return f"{where}, but {what} needs {unit}"
    return None


def flashinfer_error() -> str | None:
    """flashinfer compiles its kernels at the first use (JIT): it needs nvcc and a writable cache."""
    missing = _import_error(["flashinfer"])
    if missing:
        return missing
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = shutil.which("nvcc") or (os.path.join(home, "bin", "nvcc") if home else None)
    if not nvcc or not os.path.isfile(nvcc):
        return "nvcc not found on PATH, nor in $CUDA_HOME/bin: flashinfer compiles its kernels with it at " \
               "the first request (put the CUDA toolkit's bin/ on PATH or set CUDA_HOME)"
    cache = flashinfer_cache_dir()
    probe = cache
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if not os.access(probe, os.W_OK):
        return f"flashinfer's JIT cache {cache} cannot be written ({probe} is not writable): set " \
               "FLASHINFER_WORKSPACE_BASE to a writable folder"
    return None


def flashinfer_cache_dir() -> str:
    """Where flashinfer's JIT writes (its own setting when it says, else its default under HOME)."""
    try:
        jit_env = importlib.import_module("flashinfer.jit.env")
        for name in ("FLASHINFER_JIT_DIR", "FLASHINFER_WORKSPACE_DIR"):
            if getattr(jit_env, name, None):
                return str(getattr(jit_env, name))
    except Exception:  # an older or newer layout: fall back to the documented default
        pass
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")
    return os.path.join(base, ".cache", "flashinfer")


def check_backend(backend: str, servers: list[tuple[Any, set[str]]]) -> tuple[str | None, str]:
    """(error or None, what was checked) for one attention backend the servers will use."""
    if backend == "fa3":
        error = _import_error(["sgl_kernel", "sgl_kernel.flash_ops", "sgl_kernel.flash_attn"])
        if error:
            return error, ""
        library = str(getattr(sys.modules["sgl_kernel.flash_ops"], "__file__", "") or "")
        error = fa3_trim_error(library, servers)
        trimmed = " (trimmed; keeps what the models need)" if os.path.isfile(library + ".trim.json") else ""
        return error, f"sgl_kernel.flash_ops and sgl_kernel.flash_attn import{trimmed}"
    if backend == "flashinfer":
        error = flashinfer_error()
        return error, f"flashinfer imports, nvcc found, JIT cache {flashinfer_cache_dir()} writable"
    return None, "nothing to import beyond the server's own modules"


def check_backends(parsed: list[Any]) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, Any] | None]:
    """Every server's backends, each distinct backend checked once (its servers together)."""
    rows = [{"server": number, **backends_of(server_args)} for number, server_args in enumerate(parsed)]
    users: dict[str, list[tuple[Any, set[str]]]] = {}
    for row, server_args in zip(rows, parsed, strict=True):
        for backend in dict.fromkeys(row[role] for role in ("prefill", "decode", "draft") if row[role]):
            roles = {role for role in ("prefill", "decode", "draft") if row[role] == backend}
            users.setdefault(str(backend), []).append((server_args, roles))
    checked: dict[str, str] = {}
    for backend, servers in users.items():
        error, detail = check_backend(backend, servers)
        if error:
            return rows, checked, {"kind": "backend", "what": backend, "error": error, "missing": None,
                                   "servers": sorted({row["server"] for row in rows
                                                      if backend in (row["prefill"], row["decode"], row["draft"])})}
        checked[backend] = detail
    return rows, checked, None


def versions(modules: list[str]) -> dict[str, str]:
    return {name: str(getattr(sys.modules[name], "__version__", "?")) for name in modules if name in sys.modules}


def main() -> None:
    request = json.loads(sys.stdin.read())
    needs: list[str] = request["needs"]
    modules: list[str] = request["modules"]
    report: dict[str, Any] = {"imported": 0, "parsed": 0, "backends": [], "checked": {}, "failure": None}
    failure = import_all(needs) or import_all(["sglang"]) or sglang_location(request["target"])
    failure = failure or import_all(modules)
    if failure is None:
        report["imported"] = len(needs) + 1 + len(modules)
        parsed, failure = parse_all(request["argvs"])
        report["parsed"] = len(parsed)
        if failure is None:
            report["backends"], report["checked"], failure = check_backends(parsed)
    report["failure"] = failure
    report["versions"] = versions(["numpy", "torch", "sglang"])
    print(MARKER + json.dumps(report))


if __name__ == "__main__":
    main()
