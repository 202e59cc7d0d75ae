"""The Python index every analysis reads (the xref, dispatch, backend, calls and tests gates, and
``patchkit port``'s drift report): facts of a tree's Python files, cached by content.

Pipeline: a bytes prefilter over the tree picks the files worth parsing (:mod:`.files`); each picked
file is parsed once with the standard library's ``ast`` and walked once (:mod:`.walk`), each node
handed to one small visitor per fact (:mod:`.visitors`: definitions, predicates, names, imports,
bindings, references, calls, dispatch sites, the order of a method's ``self`` reads and writes); the
facts are plain JSON, cached under ``<cache_dir>/pyindex/`` keyed by the file's content hash plus the
settings (:mod:`.pyindex`), so a warm run reads JSON instead of parsing. :mod:`.added` says which lines
a series adds.

Why ``ast`` and not libcst: the facts need source text of expressions and line numbers, never a
lossless tree; ``ast.parse`` plus one pass costs about a tenth of libcst's parse (61 files of the v1
tree: ~2 s instead of ~25 s of CPU on a 2-core machine).
"""

from patchkit.index.added import added_lines
from patchkit.index.extract import extract_facts
from patchkit.index.files import Scan, module_name, prefilter, python_files, resolve_relative, scan
from patchkit.index.pyindex import PyIndex
from patchkit.index.settings import FACTS_SCHEMA, IndexSettings, settings_from_manifest
from patchkit.index.syntax import canonical_expression, dotted, normalise_expression

__all__ = ["FACTS_SCHEMA", "IndexSettings", "PyIndex", "Scan", "added_lines", "canonical_expression", "dotted",
           "extract_facts", "module_name", "normalise_expression", "prefilter", "python_files", "resolve_relative",
           "scan", "settings_from_manifest"]
