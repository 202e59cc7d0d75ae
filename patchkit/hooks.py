"""Test hooks of the engine: ``PATCHKIT_TEST_PAUSE=step[,step...]`` makes patchkit print
``patchkit-test-pause: <step>`` on stderr and sleep there (``PATCHKIT_TEST_PAUSE_S``, default 30 s),
so a test can signal or kill a real process at a known moment. Standard library only: the
``startup`` step runs before anything else is imported.
"""

from __future__ import annotations

import os
import sys
import time

PAUSE_ENV = "PATCHKIT_TEST_PAUSE"
PAUSE_SECONDS_ENV = "PATCHKIT_TEST_PAUSE_S"

#: Signals received while held (see ``transaction.signals_held``); a held signal ends a pause early.
held_signals: list[int] = []


def pause(step: str) -> None:
    """Print a marker and sleep at ``step`` when PATCHKIT_TEST_PAUSE names it (else do nothing)."""
    if step in os.environ.get(PAUSE_ENV, "").split(","):
        sys.stderr.write(f"patchkit-test-pause: {step}\n")
        sys.stderr.flush()
        deadline = time.monotonic() + float(os.environ.get(PAUSE_SECONDS_ENV, "30"))
        while time.monotonic() < deadline and not held_signals:
            time.sleep(0.05)
