"""The preflight's look inside the server's interpreter: run there with ``-c`` (so nothing of patchkit
is on its path) and the server's environment, standard library only.

It imports what the server needs, in order (numpy, torch, ``sglang`` from the target, the server's
entry module, the set's modules), then parses each server command line with SGLang's own
``sglang.srt.server_args.prepare_server_args``, as the server's first step does. Reads
``{"target": DIR, "needs": [...], "modules": [...], "argvs": [[...], ...]}`` on stdin and prints one JSON document
after :data:`MARKER`: ``{"versions": {...}, "imported": N, "parsed": N, "failure": null | {"kind":
"import" | "location" | "args" | "setup", "what": ..., "error": ..., "missing": ...}}``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
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


def parse_all(argvs: list[list[str]]) -> tuple[int, dict[str, Any] | None]:
    prepare_server_args = importlib.import_module("sglang.srt.server_args").prepare_server_args
    for number, argv in enumerate(argvs):
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(captured):
                prepare_server_args(list(argv))
        except SystemExit:
            return number, {"kind": "args", "what": " ".join(argv), "error": argparse_error(captured.getvalue()),
                            "missing": None}
        except REFUSALS as error:
            return number, {"kind": "args", "what": " ".join(argv), "error": one_line(error), "missing": None}
        except BaseException as error:  # not the arguments: what the server's setup needs of this host
            return number, {"kind": "setup", "what": " ".join(argv), "error": one_line(error), "missing": None}
    return len(argvs), None


def versions(modules: list[str]) -> dict[str, str]:
    return {name: str(getattr(sys.modules[name], "__version__", "?")) for name in modules if name in sys.modules}


def main() -> None:
    request = json.loads(sys.stdin.read())
    needs: list[str] = request["needs"]
    modules: list[str] = request["modules"]
    report: dict[str, Any] = {"imported": 0, "parsed": 0, "failure": None}
    failure = import_all(needs) or import_all(["sglang"]) or sglang_location(request["target"])
    failure = failure or import_all(modules)
    if failure is None:
        report["imported"] = len(needs) + 1 + len(modules)
        report["parsed"], failure = parse_all(request["argvs"])
    report["failure"] = failure
    report["versions"] = versions(["numpy", "torch", "sglang"])
    print(MARKER + json.dumps(report))


if __name__ == "__main__":
    main()
