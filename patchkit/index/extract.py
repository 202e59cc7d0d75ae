"""The facts of one module: its source parsed once with ``ast`` and walked once, each node handed to
every visitor in :data:`VISITORS` (in that order, before the node's children)."""

from __future__ import annotations

import ast
import sys
from typing import Any

from patchkit.index.settings import IndexSettings
from patchkit.index.visitors.bindings import Bindings
from patchkit.index.visitors.calls import Calls
from patchkit.index.visitors.definitions import Definitions
from patchkit.index.visitors.dispatch import DispatchSites
from patchkit.index.visitors.imports import Imports
from patchkit.index.visitors.names import Names
from patchkit.index.visitors.predicates import Predicates
from patchkit.index.visitors.references import References
from patchkit.index.visitors.selfflow import SelfFlow
from patchkit.index.walk import ModuleWalk, Visitor

#: The order matters where two visitors handle one node: a helper's predicate is read before its
#: function opens a scope (Definitions), and a definition's own name is recorded inside it (Names).
VISITORS: tuple[type[Visitor], ...] = (Predicates, Definitions, Names, Imports, Bindings, References, Calls,
                                       DispatchSites, SelfFlow)



def extract_facts(data: bytes, modname: str, is_package: bool, settings: IndexSettings) -> dict[str, Any]:
    """The facts of one module's source (raises SyntaxError when it does not parse)."""
    source = data.decode("utf-8", errors="replace")
    tree = ast.parse(source)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # long operator chains nest deeply
    try:
        return ModuleWalk(source, modname, is_package, settings, VISITORS).collect(tree)
    finally:
        sys.setrecursionlimit(limit)
