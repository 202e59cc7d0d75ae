"""The one subprocess wrapper. Every non-git process patchkit starts goes through :func:`run`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import Failed


@dataclass(frozen=True)
class Completed:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandFailed(Failed):
    """A process exited non-zero; the message carries command, code, stdout and stderr."""

    def __init__(self, done: Completed):
        tail = lambda s: "\n".join(s.strip().splitlines()[-20:])  # noqa: E731
        super().__init__(
            f"command failed with exit code {done.returncode}: {' '.join(done.args)}\n"
            f"stdout:\n{tail(done.stdout)}\nstderr:\n{tail(done.stderr)}"
        )
        self.completed = done


def run(
    args: Sequence[str | os.PathLike],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
    input: str | None = None,
) -> Completed:
    """Run a command to completion, capturing text output. ``env`` is added to os.environ."""
    argv = tuple(str(a) for a in args)
    full_env = {**os.environ, **env} if env else None
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=full_env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    done = Completed(argv, proc.returncode, proc.stdout, proc.stderr)
    if check and done.returncode != 0:
        raise CommandFailed(done)
    return done
