"""The ordered gate registry: adding a gate is one new module plus one line here."""

from __future__ import annotations

from types import ModuleType

# name -> gate module, in pipeline order (cheap and syntactic first, expensive last).
GATES: dict[str, ModuleType] = {}
