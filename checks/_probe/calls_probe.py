"""Run the declared calls into the patched tree; run by the ``calls`` gate in the isolated CPU interpreter.

Standard library only, plus the tree (and the environment's packages the tree imports). Reads a JSON
request on stdin::

    {"tree_python": "<tree>/python", "stub_paths": [...], "touched": ["<abs path>", ...],
     "imports": {"alias": "module", ...},
     "calls": [{"name", "function", "self", "free", "args", "kwargs", "expect", "raises", "not_raises"}]}

Expressions (``function``, values of ``self``/``free``/``args``/``kwargs``, ``expect``) are Python,
evaluated with the imported aliases and these helpers: ``ns(**kw)`` (a SimpleNamespace), ``mock(**kw)``
(a MagicMock with those attributes), ``new(cls, **kw)`` (an instance made without ``__init__``).
``function`` may name a nested function: ``mod.Class.method.<locals>.inner``; its free variables
come from ``free``. ``patch`` maps ``alias.attr`` to a value set for the duration of the call
(a module-level helper that needs a GPU or a process group, say). ``self`` maps dotted attribute
paths to values on a MagicMock (or on the object
that ``self = "expr"`` builds). ``expect`` expressions also see ``self``, ``result`` and ``error``.

Writes one row per call after a marker line: ok, problems, the executed lines of touched files,
and ``deps``: the tree files it tried to import, failed ones included (for the gate's cache).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import traceback
import types
import warnings
from typing import Any
from unittest import mock as _mock

try:  # in the repository (type checkers, tests)
    from patchkit.checks._probe.tracing import ImportLog, code_key, lines_run
except ImportError:  # run as a script in the isolated environment, where only its folder is known
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tracing import ImportLog, code_key, lines_run  # type: ignore[import-not-found,no-redef]

MARKER = "=== patchkit probe rows ==="


def _new(cls: Any, **attrs: Any) -> Any:
    obj = cls.__new__(cls)
    for key, value in attrs.items():
        object.__setattr__(obj, key, value)
    return obj


def _mock_of(**attrs: Any) -> _mock.MagicMock:
    m = _mock.MagicMock()
    for key, value in attrs.items():
        setattr(m, key, value)
    return m


HELPERS = {"ns": types.SimpleNamespace, "mock": _mock_of, "new": _new}


def _nested(outer: Any, path: list[str], free: dict[str, Any]) -> Any:
    """The function ``outer.<locals>.a.<locals>.b``, rebuilt from its code object with ``free``'s cells."""
    func = getattr(outer, "__func__", outer)
    code, glb = func.__code__, func.__globals__
    for name in path:
        found = [c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == name]
        if not found:
            raise LookupError(f"{code.co_name} defines no nested function {name}")
        code = found[0]
    missing = [v for v in code.co_freevars if v not in free]
    if missing:
        raise LookupError(f"declare the free variable(s) {', '.join(missing)} of {code.co_name} under `free`")
    cells = tuple(types.CellType(free[v]) for v in code.co_freevars)
    return types.FunctionType(code, glb, code.co_name, None, cells)


def _set_path(obj: Any, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        child = getattr(obj, part, None)
        if child is None:
            child = _mock.MagicMock()
            setattr(obj, part, child)
        obj = child
    setattr(obj, last, value)


def _run_call(call: dict[str, Any], env: dict[str, Any], touched: set[str],
              added: dict[str, set[int]]) -> dict[str, Any]:
    row: dict[str, Any] = {"name": call["name"], "problems": [], "executed": []}
    scope = dict(env)
    try:
        spec = call.get("self")
        self_obj: Any = None
        if isinstance(spec, str):
            self_obj = eval(spec, scope)
        elif isinstance(spec, dict):
            self_obj = _mock.MagicMock()
            for key, expr in spec.items():
                _set_path(self_obj, key, eval(expr, scope))
        scope["self"] = self_obj
        free = {k: eval(v, scope) for k, v in call.get("free", {}).items()}
        if "self" in call.get("free", {}):
            scope["self"] = free["self"]
        head, *nested = call["function"].split(".<locals>.")
        function = eval(head, scope)
        if nested:
            function = _nested(function, nested, free)
        args = [eval(a, scope) for a in call.get("args", [])]
        kwargs = {k: eval(v, scope) for k, v in call.get("kwargs", {}).items()}
        if self_obj is not None and not nested and call.get("bind_self", True):
            args = [self_obj, *args]
    except Exception:
        row["problems"].append(f"could not set up the call: {traceback.format_exc(limit=3).strip().splitlines()[-1]}")
        return row
    try:
        patches = [(eval(key.rpartition(".")[0], scope), key.rpartition(".")[2], eval(value, scope))
                   for key, value in call.get("patch", {}).items()]
        saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]  # a patch must replace something
    except Exception:
        reason = traceback.format_exc(limit=2).strip().splitlines()[-1]
        row["problems"].append(f"could not set up the patches: {reason}")
        return row
    result, error = None, None
    for obj, attr, value in patches:
        setattr(obj, attr, value)
    try:
        with lines_run(added or touched) as executed:
            try:
                result = function(*args, **kwargs)
            except Exception as exc:
                error = exc
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)
    row["executed"] = executed
    row["function"] = _function_key(function)
    scope.update(result=result, error=error)
    text = f"{type(error).__name__}: {error}" if error is not None else ""
    if error is not None:
        stack = traceback.extract_tb(error.__traceback__)
        frames = [[tb.tb_frame.f_code.co_filename, tb.tb_lineno, code_key(tb.tb_frame.f_code)]
                  for tb in _tracebacks(error.__traceback__) if tb.tb_frame.f_code.co_filename in touched]
        row["raised_at"] = frames[-1] if frames else None
        if stack:
            text += f" (at {_short(stack[-1].filename)}:{stack[-1].lineno})"
    wanted = call.get("raises")
    if wanted is not None and wanted not in text:
        row["problems"].append(f"expected an error containing {wanted!r}, got " + (text or "no error"))
    forbidden = call.get("not_raises")
    if forbidden is not None and forbidden in text:
        row["problems"].append(f"raised {text}")
    if wanted is None and forbidden is None and error is not None and not call.get("allow_error"):
        row["problems"].append(f"raised {text}")
    for expr in call.get("expect", []):
        try:
            ok = bool(eval(expr, scope))
        except Exception as exc:
            row["problems"].append(f"`{expr}` could not be evaluated: {type(exc).__name__}: {exc}")
            continue
        if not ok:
            row["problems"].append(f"`{expr}` is false{_values(expr, scope)}")
    return row


def _values(expr: str, scope: dict[str, Any]) -> str:
    """The values of the attribute chains an expectation reads, for the message."""
    import re

    shown = []
    for chain in dict.fromkeys(re.findall(r"\b(?:result|self|error)(?:\.\w+)+", expr)):
        try:
            shown.append(f"{chain} = {eval(chain, scope)!r}"[:160])
        except Exception:
            continue
    return f" ({'; '.join(shown)})" if shown else ""


def _function_key(function: Any) -> str | None:
    """The code key of the function itself, under any decorator that keeps ``__wrapped__``."""
    import inspect

    target = inspect.unwrap(getattr(function, "__func__", function))
    code = getattr(target, "__code__", None)
    return code_key(code) if code is not None else None


def _tracebacks(tb: Any) -> list[Any]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def _short(path: str) -> str:
    marker = os.sep + "sglang" + os.sep
    return "sglang" + os.sep + path.split(marker, 1)[1] if marker in path else os.path.basename(path)


def main() -> int:
    request = json.load(sys.stdin)
    sys.path.insert(0, request["tree_python"])
    for offset, extra in enumerate(request.get("stub_paths", [])):
        sys.path.insert(1 + offset, extra)
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    env: dict[str, Any] = dict(HELPERS)
    touched = set(request.get("touched", []))
    added = {path: set(lines) for path, lines in request.get("added", {}).items()}
    imports = ImportLog(request["tree_python"]).install()  # what the rows depend on, failed imports too
    try:
        for alias, module in request.get("imports", {}).items():
            env[alias] = importlib.import_module(module)
    except Exception as exc:
        frames = [[f.filename, f.lineno] for f in traceback.extract_tb(exc.__traceback__) if f.filename in touched]
        print(MARKER)
        print(json.dumps({"import_error": traceback.format_exc(limit=6), "raised_at": frames[-1] if frames else None,
                          "deps": imports.tree_files()}))
        return 0
    rows = [_run_call(call, env, touched, added) for call in request["calls"]]
    print(MARKER)
    print(json.dumps({"rows": rows, "deps": imports.tree_files()}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
