"""``patchkit smoke``: preflight, then a baseline server and a DDTREE server one after the other, each
launched, checked with the same greedy prompts and torn down; then a token-for-token comparison.

Exit codes: 0 every prompt matched and nothing failed; 1 a mismatch, a server failure or a server group
that could not be torn down; 2 preflight or bad input; 130 interrupted (servers torn down first).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from patchkit.errors import EXIT_BAD_INPUT, BadInput, Interrupted
from patchkit.results import CommandResult
from patchkit.smoke import client
from patchkit.smoke.compare import PromptComparison, ServerStats, compare, summarize
from patchkit.smoke.preflight import Preflight, run_preflight
from patchkit.smoke.prompts import Prompt, load_prompts
from patchkit.smoke.server import ServerFailed, ServerGroup, Teardown
from patchkit.smoke.setinfo import SmokeProfile, load_smoke_profile

ROLES = ("baseline", "ddtree")
SKIP_TOKENIZER_FLAG = "--skip-tokenizer-init"
#: After a failed request, how long to wait for the server to die, so the report can say it did.
EXIT_SETTLE_S = 1.0


class Status(Protocol):
    def update(self, text: str) -> None: ...


class SmokeUI(Protocol):
    """What the smoke run shows while it works; :mod:`patchkit.render` implements it with rich."""

    def status(self, text: str) -> contextlib.AbstractContextManager[Status]: ...

    def note(self, text: str) -> None: ...


class QuietUI:
    """Shows nothing (library use and tests)."""

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[Status]:
        yield self

    def update(self, text: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass


@dataclass(frozen=True)
class SmokeOptions:
    set_dir: Path
    target: Path
    gpus: int
    model: Path
    draft_model: Path
    port: int = 30000
    prompts: Path | None = None
    max_new_tokens: int | None = None
    timeout_s: float | None = None
    python: str = sys.executable
    logs: Path | None = None
    extra_args: tuple[str, ...] = ()
    preflight_only: bool = False


@dataclass(frozen=True)
class ServerRun:
    """One server's life: how it was started, how long it took, what it did, how it ended."""

    role: str
    argv: tuple[str, ...]
    log: Path
    ready_s: float | None
    stats: ServerStats
    teardown: Teardown
    failure: str | None = None
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.failure is None and self.teardown.clean


@dataclass(frozen=True)
class SmokeResult(CommandResult):
    set_id: str
    gpus: int
    preflight: Preflight
    preflight_only: bool = False
    logs: Path | None = None
    servers: tuple[ServerRun, ...] = ()
    prompts: tuple[PromptComparison, ...] = ()
    skipped_prompts: tuple[str, ...] = ()
    mismatches: int = 0
    speedup: float | None = None  # DDTREE tokens/s over baseline tokens/s (means over prompts)

    @property
    def exit_code(self) -> int:
        """A failed preflight is bad input (2), also when --preflight-only shows the whole table."""
        return EXIT_BAD_INPUT if self.preflight_only and not self.ok else super().exit_code


def default_logs_dir() -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(os.environ.get("PATCHKIT_HOME", ".patchkit")) / "logs" / f"smoke-{stamp}-{os.getpid()}"


def server_argv(role: str, opts: SmokeOptions, profile: SmokeProfile) -> tuple[str, ...]:
    """``PY -m sglang.launch_server`` with the shared, then role-specific, then extra arguments."""
    argv = [opts.python, "-m", "sglang.launch_server", "--model-path", str(opts.model),
            "--host", "127.0.0.1", "--port", str(opts.port), "--tp-size", str(max(1, opts.gpus)),
            *profile.server_args]
    if role == "baseline":
        argv += profile.baseline_args
    else:
        argv += [*profile.profile_args, profile.draft_model_flag, str(opts.draft_model)]
    return (*argv, *opts.extra_args)


def server_env(target: Path) -> dict[str, str]:
    """The patched tree's ``python/`` first on PYTHONPATH, unbuffered so the log shows progress."""
    paths = [str((target / "python").resolve()), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "PYTHONUNBUFFERED": "1"}


def _run_prompts(server: ServerGroup, prompts: tuple[Prompt, ...], max_new_tokens: int, timeout_s: float,
                 status: Status, generations: list[client.Generation]) -> None:
    """Run the prompts in order, appending to ``generations`` (kept up to a failure)."""
    for number, prompt in enumerate(prompts, start=1):
        status.update(f"{server.name}: prompt {number}/{len(prompts)} ({prompt.id})")
        try:
            generations.append(client.generate(server.base_url, prompt, max_new_tokens, timeout_s))
        except client.RequestFailed as error:
            code = server.wait_exit(EXIT_SETTLE_S)
            reason = f"{error}; the server exited with code {code}" if code is not None else str(error)
            raise server.failure(f"prompt {prompt.id!r} failed: {reason}") from error
        server.remember_descendants()


class _Phase:
    """Where a server's life is, so an interrupt can say what it interrupted."""

    def __init__(self) -> None:
        self.name = "launch"


def run_server(role: str, opts: SmokeOptions, profile: SmokeProfile, prompts: tuple[Prompt, ...],
               logs: Path, ui: SmokeUI) -> tuple[ServerRun, list[client.Generation]]:
    """Launch one server, wait for it, run the prompts, and always tear it down."""
    argv = server_argv(role, opts, profile)
    server = ServerGroup(role, argv, env=server_env(opts.target), log=logs / f"{role}.log", port=opts.port)
    phase, ready_s, generations, failure = _Phase(), None, [], None
    timeout = opts.timeout_s or profile.startup_timeout_s
    try:
        with ui.status(f"starting {role} server") as status:
            server.start()
            ready_s = server.wait_ready(timeout, lambda line: status.update(f"starting {role} server: {line}"))
            ui.note(f"{role} server ready in {ready_s:.1f}s")
            phase.name = "check"
            _run_prompts(server, prompts, opts.max_new_tokens or profile.max_new_tokens,
                         profile.request_timeout_s, status, generations)
    except ServerFailed as error:
        failure = error
    except KeyboardInterrupt:
        teardown = _teardown(server, profile, ui, role)
        raise Interrupted(f"interrupted during {phase.name} of the {role} server; "
                          f"{_teardown_words(teardown)}; logs in {logs}") from None
    teardown = _teardown(server, profile, ui, role)
    run = ServerRun(role, argv, server.log, ready_s, summarize(generations), teardown,
                    failure.message if failure else None, failure.log_tail if failure else "")
    return run, generations


def _teardown(server: ServerGroup, profile: SmokeProfile, ui: SmokeUI, role: str) -> Teardown:
    with ui.status(f"stopping {role} server"):
        teardown = server.teardown(profile.grace_period_s)
    ui.note(f"{role} server {_teardown_words(teardown)}")
    return teardown


def _teardown_words(teardown: Teardown) -> str:
    how = "SIGKILLed after SIGTERM" if teardown.sigkill_sent else "stopped by SIGTERM"
    if teardown.leftover_pids:
        return f"{how}, but processes {list(teardown.leftover_pids)} are still alive"
    return f"{how} in {teardown.seconds:.1f}s, no process left"


def usable_prompts(prompts: tuple[Prompt, ...], argv_tail: tuple[str, ...]) -> tuple[tuple[Prompt, ...], tuple[str, ...]]:
    """Text prompts cannot run on a server without a tokenizer; they are skipped, by id."""
    if SKIP_TOKENIZER_FLAG not in argv_tail:
        return prompts, ()
    kept = tuple(p for p in prompts if not p.needs_tokenizer)
    return kept, tuple(p.id for p in prompts if p.needs_tokenizer)


def preflight_or_raise(opts: SmokeOptions, profile: SmokeProfile) -> Preflight:
    preflight = run_preflight(gpus=opts.gpus, python=opts.python, ports=(opts.port,), model=opts.model,
                              draft_model=opts.draft_model, target=opts.target, set_id=profile.set_id)
    if not preflight.ok:
        reasons = "; ".join(f"{c.name}: {c.detail}" for c in preflight.failures())
        raise BadInput(f"preflight failed: {reasons}", hint="nothing was started")
    return preflight


def run_smoke(opts: SmokeOptions, ui: SmokeUI | None = None) -> SmokeResult:
    """The whole smoke test; see the module docstring for exit codes."""
    ui = ui or QuietUI()
    if opts.gpus < 0:
        raise BadInput("--gpus must be 0 (CPU stand-in) or more")
    profile = load_smoke_profile(opts.set_dir)
    all_prompts = load_prompts(opts.prompts or profile.prompts)
    prompts, skipped = usable_prompts(all_prompts, (*profile.server_args, *opts.extra_args))
    if not prompts:
        raise BadInput("no prompt can run: every prompt is text and the server skips its tokenizer")
    if opts.preflight_only:  # show every check, passing or not
        preflight = run_preflight(gpus=opts.gpus, python=opts.python, ports=(opts.port,), model=opts.model,
                                  draft_model=opts.draft_model, target=opts.target, set_id=profile.set_id)
        return SmokeResult(command="smoke", ok=preflight.ok, set_id=profile.set_id, gpus=opts.gpus,
                           preflight=preflight, preflight_only=True)
    preflight = preflight_or_raise(opts, profile)
    base = dict(command="smoke", set_id=profile.set_id, gpus=opts.gpus, preflight=preflight)
    logs = opts.logs or default_logs_dir()
    runs, outputs = [], []
    for role in ROLES:
        run, generations = run_server(role, opts, profile, prompts, logs, ui)
        runs.append(run)
        outputs.append(generations)
        if not run.ok:
            break
    comparisons = tuple(compare(p.id, b, d) for p, b, d in zip(prompts, *outputs)) if len(outputs) == 2 else ()
    mismatches = sum(not c.matched for c in comparisons)
    ok = len(runs) == 2 and all(r.ok for r in runs) and mismatches == 0 and len(comparisons) == len(prompts)
    return SmokeResult(ok=ok, logs=logs, servers=tuple(runs), prompts=comparisons, skipped_prompts=skipped,
                       mismatches=mismatches, speedup=_speedup(runs), **base)


def _speedup(runs: list[ServerRun]) -> float | None:
    if len(runs) != 2 or not all(r.stats.prompts and r.stats.tokens_per_s for r in runs):
        return None
    return runs[1].stats.tokens_per_s / runs[0].stats.tokens_per_s
