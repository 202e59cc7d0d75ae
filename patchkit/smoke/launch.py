"""One server's life, shared by ``patchkit smoke`` and ``patchkit bench``: the command line, the
environment, launch, ``/health``, the work, teardown and the leftover check, and the way an interrupt
or a failed request is reported.

Both commands call :func:`serve` once per server, one server at a time, with the work to do while it is
healthy; whatever happens (a crash, a hung request, Ctrl-C), the server's process group is torn down
before :func:`serve` returns or raises.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from patchkit.errors import BadInput, Interrupted
from patchkit.manifest import Manifest
from patchkit.smoke import client
from patchkit.smoke.preflight import SERVER_ENTRY, Preflight, run_preflight, server_env
from patchkit.smoke.prompts import Prompt
from patchkit.smoke.server import ServerFailed, ServerGroup, Teardown

SKIP_TOKENIZER_FLAG = "--skip-tokenizer-init"
#: After a failed request, how long to wait for the server to die, so the report can say it did.
EXIT_SETTLE_S = 1.0


class Status(Protocol):
    def update(self, text: str) -> None: ...


class ServerUI(Protocol):
    """What a server run shows while it works; :mod:`patchkit.render` implements it with rich."""

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


@dataclass(frozen=True, kw_only=True)
class Launch:
    """Everything that is the same for every server of one run."""

    python: str
    model: Path
    draft_model: Path
    target: Path
    port: int
    gpus: int
    server_args: tuple[str, ...]
    extra_args: tuple[str, ...]
    draft_model_flag: str
    startup_timeout_s: float
    request_timeout_s: float
    grace_period_s: float
    logs: Path


#: The SGLang flag that turns its radix (prefix) cache off; smoke and bench decide it, not the set's profile.
RADIX_OFF = "--disable-radix-cache"


def radix_server_args(server_args: Sequence[str], radix_cache: bool) -> tuple[str, ...]:
    """The profile's shared server arguments with SGLang's radix cache on (the default, SGLang's own: the
    flag that turns it off is dropped, also from a profile that lists it) or off (the flag, once)."""
    kept = tuple(arg for arg in server_args if arg != RADIX_OFF)
    return kept if radix_cache else (*kept, RADIX_OFF)


def server_argv(launch: Launch, variant_args: Sequence[str], uses_draft: bool) -> tuple[str, ...]:
    """``PY -m sglang.launch_server`` with the shared, then the variant's, then the extra arguments."""
    argv = [launch.python, "-m", SERVER_ENTRY, "--model-path", str(launch.model),
            "--host", "127.0.0.1", "--port", str(launch.port), "--tp-size", str(max(1, launch.gpus)),
            *launch.server_args, *variant_args]
    if uses_draft:
        argv += [launch.draft_model_flag, str(launch.draft_model)]
    return (*argv, *launch.extra_args)


def server_arguments(argv: Sequence[str]) -> tuple[str, ...]:
    """What SGLang's parser reads of a :func:`server_argv`: everything after ``PY -m sglang.launch_server``."""
    return tuple(argv[argv.index(SERVER_ENTRY) + 1:])


def default_logs_dir(command: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(os.environ.get("PATCHKIT_HOME", ".patchkit")) / "logs" / f"{command}-{stamp}-{os.getpid()}"


def usable_prompts(prompts: tuple[Prompt, ...],
                   argv_tail: tuple[str, ...]) -> tuple[tuple[Prompt, ...], tuple[str, ...]]:
    """Text prompts cannot run on a server without a tokenizer; they are skipped, by id."""
    if SKIP_TOKENIZER_FLAG not in argv_tail:
        return prompts, ()
    kept = tuple(p for p in prompts if not p.needs_tokenizer)
    return kept, tuple(p.id for p in prompts if p.needs_tokenizer)


def preflight_or_raise(*, gpus: int, python: str, port: int, model: Path, draft_model: Path, target: Path,
                       manifest: Manifest, argvs: Sequence[Sequence[str]] = ()) -> Preflight:
    """Every preflight check; any failure is bad input (exit 2), listed in one line, nothing started.
    ``argvs``: the servers' command lines (:func:`server_argv`), parsed by SGLang's own parser."""
    preflight = run_preflight(gpus=gpus, python=python, ports=(port,), model=model, draft_model=draft_model,
                              target=target, manifest=manifest, server_argvs=[server_arguments(a) for a in argvs])
    if not preflight.ok:
        reasons = "; ".join(f"{c.name}: {c.detail}" for c in preflight.failures())
        raise BadInput(f"preflight failed: {reasons}", hint="nothing was started")
    return preflight


def request(server: ServerGroup, prompt: Prompt, max_new_tokens: int, timeout_s: float,
            sampling: dict[str, Any] | None = None) -> client.Generation:
    """One ``/generate``; a failed request is a :class:`ServerFailed` naming the prompt (and the exit
    code, if the server died)."""
    try:
        generation = client.generate(server.base_url, prompt, max_new_tokens, timeout_s, sampling=sampling)
    except client.RequestFailed as error:
        code = server.wait_exit(EXIT_SETTLE_S)
        reason = f"{error}; the server exited with code {code}" if code is not None else str(error)
        raise server.failure(f"prompt {prompt.id!r} failed: {reason}") from error
    server.remember_descendants()
    return generation


@dataclass(frozen=True, kw_only=True)
class Served:
    """How one server's life went; the work's results are collected by the work itself."""

    name: str
    argv: tuple[str, ...]
    log: Path
    ready_s: float | None
    teardown: Teardown
    failure: str | None = None
    log_tail: str = ""
    start_timed_out: bool = False  # still starting when launch.startup_timeout_s passed

    @property
    def ok(self) -> bool:
        return self.failure is None and self.teardown.clean


class _Phase:
    """Where a server's life is, so an interrupt can say what it interrupted."""

    def __init__(self) -> None:
        self.name = "launch"


def serve(name: str, argv: Sequence[str], launch: Launch, ui: ServerUI,
          work: Callable[[ServerGroup, Status], None], extra_env: Mapping[str, str] | None = None) -> Served:
    """Launch one server, wait for ``/health``, run ``work(server, status)``, and always tear it down.

    Whatever ends the work (its end, a :class:`ServerFailed` from the start or the work, which is reported
    in the result, Ctrl-C or SIGTERM, which raise :class:`Interrupted`, any other error, which is raised
    as it is), the server's whole process tree is gone before this returns or raises.
    """
    server = ServerGroup(name, argv, env={**server_env(launch.target), **(extra_env or {})},
                         log=launch.logs / f"{name}.log",
                         port=launch.port)
    phase, ready_s, failure, escaping = _Phase(), None, None, None
    try:
        with ui.status(f"starting {name} server") as status:
            server.start()
            ready_s = server.wait_ready(launch.startup_timeout_s,
                                        lambda line: status.update(f"starting {name} server: {line}"))
            ui.note(f"{name} server ready in {ready_s:.1f}s")
            phase.name = "check"
            work(server, status)
    except ServerFailed as error:
        failure = error
    except BaseException as error:  # Ctrl-C, SIGTERM or a bug: the server goes down before it is raised
        escaping = error
    teardown, interrupted = _teardown(server, launch, ui, name)
    if isinstance(escaping, KeyboardInterrupt) or (interrupted and escaping is None):
        when = f"during {phase.name} of" if escaping else "while stopping"
        raise Interrupted(f"interrupted {when} the {name} server; {teardown_words(teardown)}; "
                          f"logs in {launch.logs}") from None
    if escaping is not None:
        raise escaping
    return Served(name=name, argv=tuple(argv), log=server.log, ready_s=ready_s, teardown=teardown,
                  failure=failure.message if failure else None, log_tail=failure.log_tail if failure else "",
                  start_timed_out=bool(failure and failure.start_timed_out))


def _teardown(server: ServerGroup, launch: Launch, ui: ServerUI, name: str) -> tuple[Teardown, bool]:
    """The teardown and whether Ctrl-C or SIGTERM came meanwhile. ``server.teardown`` holds those signals
    itself; one that lands before it does (in the status line's set-up) cannot leave the tree running:
    the teardown is started again."""
    teardown: Teardown | None = None
    interrupted = False
    while teardown is None:
        try:
            with ui.status(f"stopping {name} server"):
                teardown = server.teardown(launch.grace_period_s)
        except KeyboardInterrupt:
            interrupted = True
    ui.note(f"{name} server {teardown_words(teardown)}")
    return teardown, interrupted or bool(server.interrupted_by)


def teardown_words(teardown: Teardown) -> str:
    if not teardown.sigterm_sent:
        return "never started" if teardown.exit_code is None else \
            f"had exited (code {teardown.exit_code}), no process left"
    how = "SIGKILLed after SIGTERM" if teardown.sigkill_sent else "stopped by SIGTERM"
    if teardown.leftover_pids:
        return f"{how}, but processes {list(teardown.leftover_pids)} are still alive"
    return f"{how} in {teardown.seconds:.1f}s, no process left"
