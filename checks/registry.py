"""The ordered gate registry: adding a gate is one new module plus one line here.

``GATES`` maps a gate's name to its module, in pipeline order (cheap and syntactic first, expensive
last). Modules are imported lazily, on first access, so that a gate whose module fails to import is
reported by the runner as a crashed gate instead of breaking every other gate.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import cast

from patchkit.verify.api import Gate

#: name -> module path, in pipeline order.
GATE_MODULES: dict[str, str] = {
    "compile": "patchkit.checks.compile",
    "imports": "patchkit.checks.imports",
    "xref": "patchkit.checks.xref",
    "dispatch": "patchkit.checks.dispatch",
    "calls": "patchkit.checks.calls",
    "backend": "patchkit.checks.backend",
    "tests": "patchkit.checks.settests",
}


class LazyGates(Mapping[str, Gate]):
    """The registered gates, importing each module on first access."""

    def __init__(self, modules: dict[str, str]):
        self._modules = modules

    def __getitem__(self, name: str) -> Gate:
        if name not in self._modules:
            raise KeyError(name)
        return cast(Gate, importlib.import_module(self._modules[name]))  # checked statically: conformance.py

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


GATES: Mapping[str, Gate] = LazyGates(GATE_MODULES)

#: Gates whose result is a function of the tree's files, the set's files, patchkit's code, the
#: interpreter and the ``PATCHKIT_*`` variables alone, so a warm ``patchkit verify`` on an exact target
#: may replay their stored pass (patchkit.verify.reuse says what the key holds). Not ``compile``: it
#: looks for python3.X on PATH and in pyenv, which none of those inputs pins.
REUSABLE: frozenset[str] = frozenset({"imports", "xref", "dispatch", "calls", "backend", "tests"})
