"""The ordered gate registry: adding a gate is one new module plus one line here.

``GATES`` maps a gate's name to its module, in pipeline order (cheap and syntactic first, expensive
last). Modules are imported lazily, on first access, so that a gate whose module fails to import is
reported by the runner as a crashed gate instead of breaking every other gate.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator, Mapping
from types import ModuleType

#: name -> module path, in pipeline order.
GATE_MODULES: dict[str, str] = {
    "compile": "checks.compile",
    "imports": "checks.imports",
    "xref": "checks.xref",
    "dispatch": "checks.dispatch",
    "calls": "checks.calls",
    "backend": "checks.backend",
    "tests": "checks.settests",
}


def module_exists(module: str) -> bool:
    """Whether the gate's source file is present (an import error inside it still counts as present)."""
    return importlib.util.find_spec(module) is not None


class LazyGates(Mapping[str, ModuleType]):
    """The registered gates whose modules exist, importing each on first access."""

    def __init__(self, modules: dict[str, str]):
        self._modules = modules

    def __getitem__(self, name: str) -> ModuleType:
        if name not in self._modules or not module_exists(self._modules[name]):
            raise KeyError(name)
        return importlib.import_module(self._modules[name])

    def __iter__(self) -> Iterator[str]:
        return (name for name, module in self._modules.items() if module_exists(module))

    def __len__(self) -> int:
        return sum(1 for _ in self)


GATES: Mapping[str, ModuleType] = LazyGates(GATE_MODULES)


def unavailable() -> tuple[str, ...]:
    """Registered gates whose module is not in this checkout (reported by the runner, never silent)."""
    return tuple(name for name, module in GATE_MODULES.items() if not module_exists(module))
