"""For mypy only: every gate module satisfies the :class:`patchkit.verify.api.Gate` protocol.

Nothing imports this module. It lives apart from the registry, which loads the gates by name at run
time, because ``prefixes`` imports the registry to run the other gates on each prefix: the registry
naming the gate modules for the type checker would close an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping

from patchkit.checks import backend, calls, compile, dispatch, imports, prefixes, settests, xref
from patchkit.verify.api import Gate

TYPED: Mapping[str, Gate] = {"compile": compile, "imports": imports, "xref": xref, "dispatch": dispatch,
                             "calls": calls, "backend": backend, "tests": settests, "each-prefix": prefixes}
