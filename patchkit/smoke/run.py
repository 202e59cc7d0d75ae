"""``patchkit smoke``: preflight, then a baseline server and a DDTREE server one after the other, each
launched, checked with the same greedy prompts and torn down; then a token-for-token comparison.

Exit codes: 0 every prompt matched and nothing failed; 1 a mismatch, a server failure or a server group
that could not be torn down; 2 preflight or bad input; 130 interrupted (servers torn down first).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from patchkit import manifest as manifest_mod
from patchkit.errors import EXIT_BAD_INPUT, BadInput
from patchkit.manifest import SmokeProfile
from patchkit.results import CommandResult
from patchkit.smoke import client
from patchkit.smoke.compare import PromptComparison, ServerStats, compare, summarize
from patchkit.smoke.launch import (
    Launch,
    QuietUI,
    ServerUI,
    Status,
    default_logs_dir,
    preflight_or_raise,
    radix_server_args,
    request,
    serve,
    server_arguments,
    server_argv,
    usable_prompts,
)
from patchkit.smoke.preflight import Preflight, run_preflight
from patchkit.smoke.prompts import Prompt, load_prompts
from patchkit.smoke.server import ServerGroup, Teardown

ROLES = ("baseline", "ddtree")
SmokeUI = ServerUI  # the live view of a run (spinner and notes), shared with patchkit bench

__all__ = ["ROLES", "QuietUI", "ServerRun", "SmokeOptions", "SmokeResult", "SmokeUI", "run_smoke"]


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
    radix_cache: bool = True  # SGLang's radix cache in both servers (False: --disable-radix-cache)
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


def smoke_launch(opts: SmokeOptions, profile: SmokeProfile, logs: Path) -> Launch:
    return Launch(python=opts.python, model=opts.model, draft_model=opts.draft_model, target=opts.target,
                  port=opts.port, gpus=opts.gpus, server_args=radix_server_args(profile.server_args, opts.radix_cache),
                  extra_args=opts.extra_args,
                  draft_model_flag=profile.draft_model_flag,
                  startup_timeout_s=opts.timeout_s or profile.startup_timeout_s,
                  request_timeout_s=profile.request_timeout_s, grace_period_s=profile.grace_period_s, logs=logs)


def role_argv(role: str, launch: Launch, profile: SmokeProfile) -> tuple[str, ...]:
    """The baseline gets ``baseline_args``; the DDTREE server ``profile_args`` and the draft model."""
    if role == "baseline":
        return server_argv(launch, profile.baseline_args, uses_draft=False)
    return server_argv(launch, profile.profile_args, uses_draft=True)


def _run_prompts(server: ServerGroup, prompts: tuple[Prompt, ...], max_new_tokens: int, timeout_s: float,
                 status: Status, generations: list[client.Generation]) -> None:
    """Run the prompts in order, appending to ``generations`` (kept up to a failure)."""
    for number, prompt in enumerate(prompts, start=1):
        status.update(f"{server.name}: prompt {number}/{len(prompts)} ({prompt.id})")
        generations.append(request(server, prompt, max_new_tokens, timeout_s))


def run_server(role: str, launch: Launch, profile: SmokeProfile, prompts: tuple[Prompt, ...],
               max_new_tokens: int, ui: ServerUI) -> tuple[ServerRun, list[client.Generation]]:
    """Launch one server, run the prompts, and always tear it down."""
    generations: list[client.Generation] = []
    served = serve(role, role_argv(role, launch, profile), launch, ui, lambda server, status: _run_prompts(
        server, prompts, max_new_tokens, launch.request_timeout_s, status, generations))
    run = ServerRun(role, served.argv, served.log, served.ready_s, summarize(generations), served.teardown,
                    served.failure, served.log_tail)
    return run, generations


def run_smoke(opts: SmokeOptions, ui: ServerUI | None = None) -> SmokeResult:
    """The whole smoke test; see the module docstring for exit codes."""
    ui = ui or QuietUI()
    if opts.gpus < 0:
        raise BadInput("--gpus must be 0 (CPU stand-in) or more")
    manifest = manifest_mod.load(opts.set_dir, with_lock=False)
    profile = manifest.smoke
    all_prompts = load_prompts(opts.prompts or profile.prompts)
    prompts, skipped = usable_prompts(all_prompts, (*profile.server_args, *opts.extra_args))
    if not prompts:
        raise BadInput("no prompt can run: every prompt is text and the server skips its tokenizer")
    logs = opts.logs or default_logs_dir("smoke")
    launch = smoke_launch(opts, profile, logs)
    argvs = [role_argv(role, launch, profile) for role in ROLES]
    if opts.preflight_only:  # show every check, passing or not
        preflight = run_preflight(gpus=opts.gpus, python=opts.python, ports=(opts.port,), model=opts.model,
                                  draft_model=opts.draft_model, target=opts.target, manifest=manifest,
                                  server_argvs=[server_arguments(argv) for argv in argvs])
        return SmokeResult(command="smoke", ok=preflight.ok, set_id=profile.set_id, gpus=opts.gpus,
                           preflight=preflight, preflight_only=True)
    preflight = preflight_or_raise(gpus=opts.gpus, python=opts.python, port=opts.port, model=opts.model,
                                   draft_model=opts.draft_model, target=opts.target, manifest=manifest, argvs=argvs)
    max_new_tokens = opts.max_new_tokens or profile.max_new_tokens
    runs, outputs = [], []
    for role in ROLES:
        run, generations = run_server(role, launch, profile, prompts, max_new_tokens, ui)
        runs.append(run)
        outputs.append(generations)
        if not run.ok:
            break
    # strict=False: a server that crashed mid-run still has its answered prompts compared
    pairs = zip(prompts, *outputs, strict=False) if len(outputs) == 2 else ()
    comparisons = tuple(compare(p.id, b, d) for p, b, d in pairs)
    mismatches = sum(not c.matched for c in comparisons)
    ok = len(runs) == 2 and all(r.ok for r in runs) and mismatches == 0 and len(comparisons) == len(prompts)
    return SmokeResult(ok=ok, logs=logs, servers=tuple(runs), prompts=comparisons, skipped_prompts=skipped,
                       mismatches=mismatches, speedup=_speedup(runs), command="smoke", set_id=profile.set_id,
                       gpus=opts.gpus, preflight=preflight)


def _speedup(runs: list[ServerRun]) -> float | None:
    if len(runs) != 2 or not all(r.stats.prompts and r.stats.tokens_per_s for r in runs):
        return None
    return runs[1].stats.tokens_per_s / runs[0].stats.tokens_per_s
