"""Resolve the target tree's own ``ServerArgs`` for a list of cases; run by the backend gate.

Runs in the isolated CPU interpreter, NOT in patchkit's environment: standard library only, plus
the target tree. Reads a JSON request on stdin::

    {"tree_python": "<tree>/python", "module": "sglang.srt.server_args",
     "probes": ["is_hopper_with_cuda_12_3", ...],
     "cases": [{"name", "probes_on": [...], "flashinfer": bool, "target": {config.json},
                "draft": {config.json} | null, "args": {ServerArgs kwargs}}]}

and writes one JSON row per case on stdout (after a marker line, so that log noise on stdout
cannot corrupt the result). Each row holds the resolved fields or the error text, plus what
``is_no_spec_infer_or_topk_one`` says and what the generic (pre-DDTREE) backend rule picks, and
(``origins``) the line of a touched file that produced each field's last value, so that a refused or
wrong value can be traced back to the added line behind it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

try:  # in the repository (type checkers, tests)
    from patchkit.checks._probe.tracing import ImportLog, Provenance, code_key, lines_run
except ImportError:  # run as a script in the isolated environment, where only its folder is known
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_probe"))
    from tracing import ImportLog, Provenance, code_key, lines_run  # type: ignore[import-not-found,no-redef]

MARKER = "=== patchkit probe rows ==="
_ADDED: dict[str, set[int]] = {}  # the request's added lines per touched file: the only lines traced
FIELDS = (
    "attention_backend", "prefill_attention_backend", "decode_attention_backend",
    "speculative_algorithm", "speculative_eagle_topk", "speculative_num_steps",
    "speculative_num_draft_tokens", "speculative_dflash_block_size", "disable_overlap_schedule",
    "page_size", "max_running_requests", "enable_mixed_chunk", "speculative_attention_mode", "tp_size",
)


def _write_config(root: str, name: str, config: dict[str, Any]) -> str:
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def _tree_module(name: str) -> ModuleType | None:
    """The target tree's module ``name``, or None where this tree has none (an older SGLang)."""
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _platform(probes: list[str], on: set[str], flashinfer: bool) -> contextlib.AbstractContextManager[Any]:
    """SGLang 0.5.23+ reads the machine through ``runtime_context.get_platform()``: a scoped
    ``override_platform`` of its facts (each named after the utils probe it calls), a CUDA machine
    with exactly the ``on`` probes true. Older trees have no such context: nothing to override."""
    runtime_context = _tree_module("sglang.srt.runtime_context")
    if runtime_context is None:  # an older tree
        return contextlib.nullcontext()
    override = getattr(runtime_context, "override_platform", None)
    table = getattr(runtime_context, "_PLATFORM_PROBES", None)
    if override is None or not isinstance(table, dict):
        return contextlib.nullcontext()
    facts: dict[str, bool] = {fact: probe in on for fact, probe in table.items()}
    facts.update(is_cuda=True, has_flashinfer=flashinfer)
    if "is_sm100_or_sm110" in facts:
        facts["is_sm100_or_sm110"] = facts.get("is_sm100", False) or facts.get("is_sm110", False)
    context: contextlib.AbstractContextManager[Any] = override(**facts)
    return context


@contextlib.contextmanager
def _hardware(module: ModuleType, probes: list[str], on: set[str], flashinfer: bool) -> Iterator[None]:
    """Monkeypatch the hardware probes imported into the server_args module (and, on trees with
    a platform context, override its facts)."""
    names = [p for p in probes if hasattr(module, p)] + ["is_flashinfer_available"]
    saved = {name: getattr(module, name) for name in names if hasattr(module, name)}
    for name in names:
        value = flashinfer if name == "is_flashinfer_available" else name in on
        setattr(module, name, (lambda v: (lambda *a, **k: v))(value))
    try:
        with _platform(probes, on, flashinfer):
            yield
    finally:
        for name, fn in saved.items():
            setattr(module, name, fn)


class _GenericView:
    """SGLang 0.5.23+: a stand-in record for the generic rule, reading the resolved record except
    for the topk and page size under test (msgspec ServerArgs refuse even object.__setattr__)."""

    _resolved_overrides = ()

    def __init__(self, args: Any, topk: Any, page_size: Any):
        self._args, self.speculative_eagle_topk, self.page_size = args, topk, page_size

    def __getattr__(self, name: str) -> Any:
        return getattr(self._args, name)


def _generic_rule_pipeline(args: Any, topk: Any, page_size: Any) -> Any:
    """The base default rule of a tree whose backend default lives in arg_groups/ (0.5.23+),
    with the set's DDTREE branch (``is_ddtree_requested``) switched off."""
    base = importlib.import_module("sglang.srt.arg_groups.model_override_base")
    saved = getattr(base, "is_ddtree_requested", None)
    if saved is not None:
        setattr(base, "is_ddtree_requested", lambda cfg: False)  # noqa: B010 - a module attribute, not typed
    try:
        return base.get_default_attn_backend(_GenericView(args, topk, page_size), base.use_mla_backend(args),
                                             base.model_config_of(args))
    except Exception as exc:  # report, do not fail the row
        return f"error: {type(exc).__name__}: {exc}"
    finally:
        if saved is not None:
            setattr(base, "is_ddtree_requested", saved)  # noqa: B010


def _generic_rule(module: ModuleType, args: Any, topk: Any, page_size: Any) -> Any:
    """The backend the generic (base) default rule picks for ``args`` with the given topk and page
    size, i.e. ignoring any DDTREE-specific default the tree may add."""
    if not hasattr(args, "_get_default_attn_backend"):
        return _generic_rule_pipeline(args, topk, page_size)
    probe = copy.copy(args)
    # SGLang 0.5.17 seals a resolved ServerArgs against attribute writes; the probe is a throwaway copy.
    object.__setattr__(probe, "speculative_eagle_topk", topk)
    object.__setattr__(probe, "page_size", page_size)
    if hasattr(type(probe), "_is_ddtree_requested"):
        object.__setattr__(probe, "_is_ddtree_requested", lambda: False)
    try:
        return probe._get_default_attn_backend(probe.use_mla_backend(), probe.get_model_config())
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"


def _topk_one(module: ModuleType, topk: Any, page_size: Any) -> bool | None:
    fn = getattr(module, "is_no_spec_infer_or_topk_one", None)
    if fn is None:  # 0.5.23+: no longer imported into server_args
        fn = getattr(_tree_module("sglang.srt.utils.common"), "is_no_spec_infer_or_topk_one", None)
    if fn is None:
        return None
    holder = type("Args", (), {"speculative_eagle_topk": topk, "page_size": page_size})()
    return bool(fn(holder))


def _paths(case: dict[str, Any], workdir: str) -> dict[str, Any]:
    kwargs = dict(case.get("args", {}))
    kwargs.setdefault("device", "cuda")
    kwargs.setdefault("skip_tokenizer_init", True)
    kwargs["model_path"] = _write_config(workdir, case["name"] + "-target", case["target"])
    if case.get("draft") is not None:
        kwargs["speculative_draft_model_path"] = _write_config(workdir, case["name"] + "-draft", case["draft"])
    return kwargs


def _pipeline(args: Any) -> bool:
    """A 0.5.23+ record: construction leaves it unresolved, and ``resolve_once`` runs the arg_groups/
    hook pipeline. Every 0.5.23 fallback below is taken only for these; older trees read as before."""
    return hasattr(args, "resolve_once")


def _resolved_source(args: Any) -> Any:
    """Where the resolved values are read: the record itself, or on 0.5.23+ (resolved values are
    declarations over the record, resolved by ``resolve_once``) its ``resolved_view``. 0.5.17 has a
    ``resolved_view`` too, but writes the resolved values into the record: it reads the record."""
    if not _pipeline(args):
        return args
    resolved_view = getattr(_tree_module("sglang.srt.arg_groups.overrides"), "resolved_view", None)
    if resolved_view is None:
        return args
    try:
        return resolved_view(args)
    except Exception:
        return args


def _fill(module: ModuleType, row: dict[str, Any], args: Any, user_topk: Any, user_page: Any) -> None:
    source = _resolved_source(args)
    for field in FIELDS:
        row[field] = getattr(source, field, None)
    if hasattr(args, "get_attention_backends"):
        row["prefill_attention_backend"], row["decode_attention_backend"] = args.get_attention_backends()
    elif _pipeline(args):  # 0.5.23+: the resolution helpers live in arg_groups/
        attention_backends_of = getattr(_tree_module("sglang.srt.arg_groups.overrides"), "attention_backends_of",
                                        None)
        with contextlib.suppress(Exception):
            if attention_backends_of is not None:
                row["prefill_attention_backend"], row["decode_attention_backend"] = attention_backends_of(source)
    try:  # "flashinfer" on an MLA model builds FlashInferMLAAttnBackend, which has no tree mask
        if _pipeline(args) and not hasattr(args, "use_mla_backend"):  # 0.5.23+
            base = importlib.import_module("sglang.srt.arg_groups.model_override_base")
            row["use_mla"] = bool(base.use_mla_backend(args))
        else:
            row["use_mla"] = bool(args.use_mla_backend())
    except Exception:
        row["use_mla"] = None
    row["topk_one_at_selection"] = _topk_one(module, user_topk, user_page)
    row["topk_one_resolved"] = _topk_one(module, row["speculative_eagle_topk"], row["page_size"])
    row["generic_rule_at_selection"] = _generic_rule(module, args, user_topk, user_page)
    row["generic_rule_resolved"] = _generic_rule(module, args, row["speculative_eagle_topk"], row["page_size"])


def _raised_at(exc: BaseException, touched: set[str]) -> list[Any] | None:
    frames: list[list[Any]] = []
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename in touched:
            frames.append([tb.tb_frame.f_code.co_filename, tb.tb_lineno, code_key(tb.tb_frame.f_code)])
        tb = tb.tb_next
    return frames[-1] if frames else None


def _construct(module: ModuleType, build: Callable[[], Any], row: dict[str, Any], kwargs: dict[str, Any],
               touched: set[str]) -> None:
    """Build ServerArgs with ``build``; fill ``row`` with its values, or the error and where it rose."""
    user_topk, user_page = kwargs.get("speculative_eagle_topk"), kwargs.get("page_size")
    traced = _ADDED or touched
    provenance = Provenance(FIELDS, traced)
    with provenance.watching(module.ServerArgs), lines_run(traced, provenance) as executed:
        try:
            args = build()
            if _pipeline(args):  # 0.5.23+: construction leaves the record unresolved
                args.resolve_once()
        except SystemExit as exc:  # argparse refusing the command line
            row["error"] = f"the command line was refused (exit {exc.code}): {row.pop('_stderr', '')}".strip()
            args = None
        except Exception as exc:  # the error text is the result of a refused case
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["raised_at"] = _raised_at(exc, touched)
            args = None
    row["executed"] = executed
    row["origins"] = provenance.origins  # where each field's last value was produced (the trace-back)
    if args is not None:
        _fill(module, row, args, user_topk, user_page)


class CommandLine:
    """SGLang's own command line (``prepare_server_args`` or the base's entry): the parser it builds,
    with where each flag is declared, and the argv for a case's ServerArgs keywords."""

    def __init__(self, module: ModuleType, entry: str):
        self.entry: Callable[[list[str]], Any] | None = getattr(module, entry, None)
        self.origin: dict[int, list[Any]] = {}  # id(action) -> [file, line of the add_argument call]
        parser = _RecordingParser(self.origin)
        module.ServerArgs.add_cli_args(parser)
        self.actions: list[argparse.Action] = list(parser._actions)
        self.by_option = {o: a for a in self.actions for o in a.option_strings}
        self.by_dest: dict[str, argparse.Action] = {}
        for a in self.actions:
            self.by_dest.setdefault(a.dest, a)

    def action_for(self, field: str) -> argparse.Action | None:
        return self.by_option.get("--" + field.replace("_", "-")) or self.by_dest.get(field)

    def argv(self, kwargs: dict[str, Any]) -> list[str] | None:
        out: list[str] = []
        for field, value in kwargs.items():
            action = self.action_for(field)
            if action is None:
                return None  # a keyword the command line cannot express
            option = action.option_strings[0]
            if isinstance(action, argparse._StoreTrueAction):
                if value:
                    out.append(option)
            elif isinstance(action, argparse._StoreFalseAction):
                if not value:
                    out.append(option)
            elif value is None:
                continue
            elif isinstance(value, (list, tuple)):
                out += [option, *map(str, value)]
            else:
                out += [option, str(value)]
        return out


class _RecordingParser(argparse.ArgumentParser):
    def __init__(self, origin: dict[int, list[Any]]):
        super().__init__(prog="probe", add_help=False)
        self._origin = origin

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        caller = sys._getframe(1)
        self._origin[id(action)] = [caller.f_code.co_filename, caller.f_lineno]
        return action


def _keyword_line(path: str, call_line: int, keyword: str | None) -> int:
    """The line of ``keyword=`` (or of the first argument) in the add_argument call at ``call_line``."""
    try:
        import ast

        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return call_line
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno == call_line and getattr(node.func, "attr", "") == "add_argument":
            for kw in node.keywords:
                if kw.arg == keyword:
                    return kw.value.lineno
            if keyword is None and node.args:
                return node.args[0].lineno
    return call_line


def _resolve(module: ModuleType, cli: CommandLine | None, case: dict[str, Any], workdir: str,
             touched: set[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"name": case["name"]}
    kwargs = _paths(case, workdir)
    with _hardware(module, case["probes"], set(case["probes_on"]), case["flashinfer"]):
        _construct(module, lambda: module.ServerArgs(**kwargs), row, kwargs, touched)
        if cli is not None and cli.entry is not None:
            row["cli"] = _through_cli(module, cli, kwargs, touched)
    return row


def _through_cli(module: ModuleType, cli: CommandLine, kwargs: dict[str, Any], touched: set[str]) -> dict[str, Any]:
    argv = cli.argv(kwargs)
    cli_row: dict[str, Any] = {}
    entry = cli.entry
    assert entry is not None
    if argv is None:
        cli_row["unavailable"] = [f for f in kwargs if cli.action_for(f) is None]
        return cli_row
    cli_row["argv"] = argv
    stderr = io.StringIO()

    def build() -> Any:
        with contextlib.redirect_stderr(stderr):
            try:
                return entry(list(argv))
            finally:
                lines = stderr.getvalue().strip().splitlines()
                cli_row["_stderr"] = lines[-1] if lines else ""  # argparse's one-line reason
                logging.disable(logging.CRITICAL)  # the entry reconfigures logging

    _construct(module, build, cli_row, kwargs, touched)
    cli_row.pop("_stderr", None)
    cli_row.pop("executed", None)
    cli_row.pop("origins", None)
    return cli_row


def _field_names(module: ModuleType) -> set[str]:
    if dataclasses.is_dataclass(module.ServerArgs):
        return {f.name for f in dataclasses.fields(module.ServerArgs)}
    # SGLang 0.5.23+: ServerArgs is a msgspec.Struct
    return set(getattr(module.ServerArgs, "__struct_fields__", ()))


def _field_defaults(module: ModuleType) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(module.ServerArgs):
        for f in dataclasses.fields(module.ServerArgs):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out
    structs = _tree_module("msgspec.structs")  # SGLang 0.5.23+: ServerArgs is a msgspec.Struct
    if structs is None:
        return out
    nodefault = importlib.import_module("msgspec").NODEFAULT
    for info in structs.fields(module.ServerArgs):
        if info.default is not nodefault:
            out[info.name] = info.default
        elif info.default_factory is not nodefault:
            out[info.name] = info.default_factory()
    return out


def _flag_rows(module: ModuleType, cli: CommandLine, request: dict[str, Any], workdir: str,
               touched: set[str]) -> list[dict[str, Any]]:
    """Every flag of the family: stores into a ServerArgs field, defaults like the field, and resolves
    the same through the command line as through ServerArgs(**kwargs) when it is given."""
    family = re.compile(request.get("flag_family") or "ddtree", re.IGNORECASE)
    samples = request.get("flag_samples", {})
    defaults = _field_defaults(module)
    fields = _field_names(module)
    base_case = request.get("flag_case")
    rows: list[dict[str, Any]] = []
    for action in cli.actions:
        options = [o for o in action.option_strings if o.startswith("--")]
        if not options or not any(family.search(o) for o in options):
            continue
        flag = options[0]
        origin = cli.origin.get(id(action), [None, None])
        row: dict[str, Any] = {"flag": flag, "dest": action.dest, "problems": [], "file": origin[0], "line": origin[1]}
        rows.append(row)
        if action.dest not in fields:
            line = _keyword_line(origin[0], origin[1], None) if origin[0] else None
            row["problems"].append([f"{flag} stores into args.{action.dest}, which is not a ServerArgs field: "
                                    "from_cli_args never reads it", line])
            continue
        if action.default != defaults.get(action.dest, dataclasses.MISSING):
            row["problems"].append([f"{flag} defaults to {action.default!r} on the command line, but "
                                    f"ServerArgs.{action.dest} defaults to {defaults.get(action.dest)!r}",
                                    _keyword_line(origin[0], origin[1], "default") if origin[0] else None])
        if flag not in samples:
            row["problems"].append([f"no sample value for {flag}: declare it under [cli] flags in the expectations",
                                    None])
            continue
        if base_case is None:
            continue
        case = dict(base_case, name=f"cli{flag}")
        sample = samples[flag]
        value = action.type(sample) if callable(action.type) else sample
        case["args"] = {**case.get("args", {}), action.dest: value}
        with_flag = _resolve(module, cli, case, workdir, touched)
        row["case"] = with_flag
    return rows


def main() -> int:
    request = json.load(sys.stdin)
    sys.path.insert(0, request["tree_python"])
    # Declared stub packages ([verify.env.stubs]) come right after the tree, before site-packages.
    for offset, extra in enumerate(request.get("stub_paths", [])):
        sys.path.insert(1 + offset, extra)
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    touched = set(request.get("touched", []))
    _ADDED.update({path: set(lines) for path, lines in request.get("added", {}).items()})
    imports = ImportLog(request["tree_python"]).install()  # what the rows depend on, failed imports too
    try:
        module = __import__(request["module"], fromlist=["ServerArgs"])
    except Exception as exc:
        print(MARKER)
        print(json.dumps({"import_error": traceback.format_exc(limit=5), "raised_at": _raised_at(exc, touched),
                          "deps": imports.tree_files()}))
        return 0
    cli: CommandLine | None = None
    if request.get("cli_entry"):
        try:
            cli = CommandLine(module, request["cli_entry"])
        except Exception:
            cli = None
    rows: list[dict[str, Any]] = []
    flags: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="patchkit-backend-") as workdir:
        for case in request["cases"]:
            case.setdefault("probes", request["probes"])
            rows.append(_resolve(module, cli, case, workdir, touched))
        if cli is not None:
            if request.get("flag_case"):
                request["flag_case"].setdefault("probes", request["probes"])
            flags = _flag_rows(module, cli, request, workdir, touched)
    print(MARKER)
    print(json.dumps({"rows": rows, "flags": flags, "cli_entry": bool(cli and cli.entry),
                      "deps": imports.tree_files()}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
