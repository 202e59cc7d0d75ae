"""For mypy only: every gate module satisfies the :class:`patchkit.verify.api.Gate` protocol.

Nothing imports this module: the registry loads the gates by name at run time, and only the type
checker reads this table.
"""

from __future__ import annotations

from collections.abc import Mapping

from patchkit.checks import backend, calls, compile, dispatch, imports, settests, xref
from patchkit.verify.api import Gate

TYPED: Mapping[str, Gate] = {"compile": compile, "imports": imports, "xref": xref, "dispatch": dispatch,
                             "calls": calls, "backend": backend, "tests": settests}
