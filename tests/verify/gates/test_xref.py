"""The xref gate on small real trees: resolution details, the symbol table, the cache."""

from __future__ import annotations

from patchkit.checks import xref
from patchkit.verify.api import Severity

PKG = {"python/pkg/__init__.py": ""}
UTIL = '''\
from dataclasses import dataclass, field
from enum import Enum


class DDTreeMode(Enum):
    GREEDY = 1


def build_ddtree(budget, /, topk=4, *args, depth_bonus, **extra):
    return budget


@dataclass
class DDTreeBase:
    tokens: list


@dataclass
class DDTreeInput(DDTreeBase):
    budget: int = 8
    mask: list = field(default_factory=list)
    cache: dict = field(default=None, init=False)
'''


def errors(ctx):
    return [f for f in xref.run(ctx) if f.severity == Severity.ERROR]


def tree(user: str, **extra: str) -> dict[str, str]:
    return {**PKG, "python/pkg/ddtree_utils.py": UTIL, "python/pkg/user.py": user, **extra}


def test_signature_binding_honours_posonly_varargs_kwonly_and_dataclass_inheritance(make_ctx):
    ok = ("from pkg.ddtree_utils import DDTreeInput, DDTreeMode, build_ddtree\n"
          "build_ddtree(1, 2, 3, 4, depth_bonus=1, anything=2)\n"
          "DDTreeInput([1], 4, [])\nDDTreeInput(tokens=[], mask=[])\nDDTreeMode.GREEDY\n")
    assert errors(make_ctx(tree(ok))) == []
    bad = ("from pkg.ddtree_utils import DDTreeInput, build_ddtree\n"
           "build_ddtree(budget=1, depth_bonus=1)\n"  # positional-only passed by keyword
           "build_ddtree(1)\n"  # keyword-only depth_bonus missing
           "DDTreeInput([1], cache={})\n")  # init=False field
    messages = [f.message for f in errors(make_ctx(tree(bad)))]
    assert any("missing required argument(s): budget" in m for m in messages)
    assert any("missing required argument(s): depth_bonus" in m for m in messages)
    assert any("unexpected keyword argument 'cache'" in m for m in messages)
    lines = sorted(f.line for f in errors(make_ctx(tree(bad))))
    assert lines == [2, 3, 4]


def test_reexports_and_star_imports_resolve(make_ctx):
    files = tree("from pkg.api import DDTreeInput, build_ddtree\nbuild_ddtree(1, depth_bonus=0)\nDDTreeInput([])\n",
                 **{"python/pkg/api.py": "from pkg.ddtree_utils import *\n"})
    assert errors(make_ctx(files)) == []
    files["python/pkg/user.py"] = files["python/pkg/user.py"].replace("DDTreeInput, ", "DDTreeInput, DDTreeOutput, ")
    found = errors(make_ctx(files))
    assert [f.message for f in found] == [
        "`from pkg.api import DDTreeOutput`: pkg.api neither defines nor re-exports DDTreeOutput"]


def test_getattr_class_is_flagged_only_when_no_indexed_class_assigns(make_ctx):
    worker = '''\
class Target:
    def __init__(self):
        self.ddtree_shared = 1


class Worker:
    def __init__(self):
        self.target = Target()

    def __getattr__(self, name):
        return getattr(self.target, name)

    def step(self):
        return self.ddtree_shared + self.ddtree_typo
'''
    found = errors(make_ctx({**PKG, "python/pkg/worker.py": worker}))
    assert len(found) == 1 and "self.ddtree_typo" in found[0].message and "__getattr__" in found[0].message
    assert found[0].line == 14


def test_self_attribute_from_indexed_base_class(make_ctx):
    src = '''\
class Base:
    def __init__(self):
        self.ddtree_budget = 4


class Child(Base):
    def run(self):
        return self.ddtree_budget
'''
    assert errors(make_ctx({**PKG, "python/pkg/m.py": src})) == []


def test_untouched_base_files_are_indexed_through_the_prefilter(make_ctx):
    files = tree("from pkg.algo import Algo\nx = Algo.DDTREE\n", **{"@base/python/pkg/algo.py": "from enum import Enum\n\n\nclass Algo(Enum):\n    DFLASH = 1\n"})
    found = [f for f in errors(make_ctx(files)) if "Algo" in f.message]
    assert [f.message for f in found] == ["`Algo.DDTREE`: Algo has no enum member DDTREE"]
    assert found[0].file == "python/pkg/user.py" and found[0].line == 2


def test_allow_unused_config(make_ctx):
    files = tree("x = 1\n")
    unused = {f.message for f in errors(make_ctx(files))}
    assert "family function build_ddtree is never called" in unused
    ctx = make_ctx(files, {"verify": {"xref": {"allow_unused": {"build_ddtree": "used by the set's tests"}}}})
    assert "family function build_ddtree is never called" not in {f.message for f in errors(ctx)}


def test_symbol_table_lists_definitions_imports_and_uses(make_ctx):
    ctx = make_ctx(tree("from pkg.ddtree_utils import build_ddtree\n\n\nbuild_ddtree(1, depth_bonus=2)\n"))
    table = {s.name: s for s in xref.symbol_table(ctx)}
    sym = table["build_ddtree"]
    assert sym.kinds == ("function",)
    assert [(p.file, p.line) for p in sym.defined] == [("python/pkg/ddtree_utils.py", 9)]
    assert [(p.file, p.line) for p in sym.imported] == [("python/pkg/user.py", 1)]
    assert [(p.file, p.line) for p in sym.used] == [("python/pkg/user.py", 4)]
    assert "build_ddtree [function]" in xref.format_symbol_table(list(table.values()))


def test_facts_are_cached_by_content_hash(make_ctx):
    from patchkit.index import pyindex

    ctx = make_ctx(tree("x = 1\n"))
    pyindex._MEMORY.clear()  # other tests parsed the same contents in this process
    xref.run(ctx)
    pyindex._MEMORY.clear()  # a new process: only the disk cache remains
    state = xref._build(ctx)
    assert state.index.parsed == []  # everything came from the cache
    (ctx.root / "python/pkg/user.py").write_text("from pkg.ddtree_utils import build_ddtree\n")
    pyindex._MEMORY.clear()
    assert xref._build(ctx).index.parsed == ["python/pkg/user.py"]


def test_uses_in_the_sets_own_tests_count(make_ctx):
    files = tree("x = 1\n", **{"@set/tests/test_tree.py": "from pkg.ddtree_utils import build_ddtree\n\n"
                                                          "def test_it():\n    build_ddtree(1, depth_bonus=0)\n"})
    messages = {f.message for f in errors(make_ctx(files))}
    assert "family function build_ddtree is never called" not in messages
    assert "family class DDTreeInput is defined but never instantiated or subclassed" in messages


SPEC = '''\
from dataclasses import dataclass, field
from typing import Optional


class SpecInput:
    def __init__(self, kind):
        self.kind = kind


@dataclass
class DFlashVerifyInput(SpecInput):
    draft_token_num: int = 0


@dataclass
class DDTreeVerifyInput(SpecInput):
    draft_token_num: int = 0
    accept_index: Optional[list] = field(default=None, init=False)


@dataclass
class Batch:
    spec_info: Optional[SpecInput] = None
'''
NARROWED = '''\
from pkg.spec import Batch, DDTreeVerifyInput, DFlashVerifyInput


class Worker:
    def __init__(self, is_ddtree):
        self.is_ddtree = is_ddtree
        DDTreeVerifyInput(), DFlashVerifyInput()

    def verify(self, batch: Batch):
        verify_input = batch.spec_info
        assert isinstance(
            verify_input, DDTreeVerifyInput if self.is_ddtree else DFlashVerifyInput
        )
        return verify_input.accept_index if self.is_ddtree else None
'''


def typed_errors(make_ctx, worker: str) -> list[str]:
    """The typed-attribute findings on a worker reading ``batch.spec_info`` (typed by the base class)."""
    ctx = make_ctx({**PKG, "@base/python/pkg/spec.py": SPEC, "python/pkg/worker.py": worker})
    return [f"{f.line}: {f.message}" for f in errors(ctx) if "does not define" in f.message]


def test_isinstance_narrowing_to_a_subclass_allows_its_attributes(make_ctx):
    # `batch.spec_info` is typed SpecInput, which has no accept_index; the isinstance check says it may be
    # DDTreeVerifyInput (one side of the conditional), which has: the read is not reported
    assert typed_errors(make_ctx, NARROWED) == []
    as_tuple = NARROWED.replace("DDTreeVerifyInput if self.is_ddtree else DFlashVerifyInput",
                                "(DDTreeVerifyInput, DFlashVerifyInput)")
    assert typed_errors(make_ctx, as_tuple) == []
    guard = NARROWED.replace("assert isinstance(", "if not isinstance(").replace(
        "        )\n        return", "        ):\n            raise TypeError(verify_input)\n        return")
    assert typed_errors(make_ctx, guard) == []
    unknown = NARROWED.replace("DDTreeVerifyInput if self.is_ddtree else DFlashVerifyInput", "self.is_ddtree")
    assert typed_errors(make_ctx, unknown) == [], "a class the index cannot resolve makes the type unknown"


def test_a_name_no_narrowed_class_defines_is_still_reported(make_ctx):
    assert typed_errors(make_ctx, NARROWED.replace(".accept_index", ".accept_indx")) == [
        "14: `verify_input.accept_indx` reads accept_indx, which SpecInput (pkg.spec) does not define, nor "
        "DDTreeVerifyInput or DFlashVerifyInput, which an isinstance check narrows verify_input to"]
    # without the check, or before it, the value is only known to be a SpecInput
    check = ("        assert isinstance(\n"
             "            verify_input, DDTreeVerifyInput if self.is_ddtree else DFlashVerifyInput\n        )\n")
    assert check in NARROWED
    unchecked = NARROWED.replace(check, "")
    assert typed_errors(make_ctx, unchecked) == [
        "11: `verify_input.accept_index` reads accept_index, which SpecInput (pkg.spec) does not define"]
    before = NARROWED.replace("        verify_input = batch.spec_info\n",
                              "        verify_input = batch.spec_info\n        early = verify_input.accept_index\n")
    assert typed_errors(make_ctx, before) == [
        "11: `verify_input.accept_index` reads accept_index, which SpecInput (pkg.spec) does not define"]
