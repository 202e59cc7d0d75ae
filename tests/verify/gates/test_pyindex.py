"""The fact index: line numbers and source text from ``ast``, canonical site identity, prefilter,
module names."""

from __future__ import annotations

from patchkit.index import (
    IndexSettings,
    canonical_expression,
    extract_facts,
    module_name,
    prefilter,
    resolve_relative,
)

SOURCE = '''\
# header comment

import os


@decorator(
    arg=1,
)
class A(  # trailing
    Base,
):
    """Doc: ünïcode before the offsets, so byte and character columns differ."""

    x: int = 1

    def f(self, a,
          b=2):
        if (a.is_eagle() and
                b):  # why
            return [
                self.g(
                    a,
                ),
            ]
        label = "ü" if self.ddtree_budget else "é"; y = a.is_dflash()
        return label, y
'''

SETTINGS = IndexSettings(family="ddtree")


def facts_of(source: str, settings: IndexSettings = SETTINGS) -> dict:
    return extract_facts(source.encode(), "pkg.mod", False, settings)


def test_definitions_and_references_carry_their_own_lines():
    facts = facts_of(SOURCE)
    assert facts["classes"]["A"]["line"] == 9  # the class keyword, not the decorator
    assert facts["functions"]["A.f"]["line"] == 16
    assert facts["functions"]["A.f"]["params"] == [["self", "pos", False], ["a", "pos", False], ["b", "pos", True]]
    assert facts["classes"]["A"]["self_reads"] == [["ddtree_budget", 25, "A.f"]]
    assert facts["toplevel"]["os"] == {"kind": "module", "line": 3, "target": "os"}


def test_a_site_is_the_whole_condition_at_its_first_line_inside_the_parentheses():
    sites = facts_of(SOURCE)["dispatch"]
    assert [(s["expr"], s["line"]) for s in sites] == [("a.is_eagle()and b", 18), ("a.is_dflash()", 25)]
    assert sites[1]["code"] == "a.is_dflash()"  # exact source after multi-byte text on the same line


def test_set_members_are_sorted_in_a_sites_identity():
    assert canonical_expression('x in {"NGRAM", "EAGLE",}') == 'x in{"EAGLE","NGRAM"}'
    assert canonical_expression('frozenset({"B", "A"})') == 'frozenset({"A","B"})'
    assert canonical_expression('x in ("B", "A")') == 'x in("B","A")'  # a tuple keeps its order


def test_membership_collections_and_helper_definitions():
    source = '''\
from enum import Enum


class Algo(Enum):
    DFLASH = 1
    DDTREE = 2

    def is_dflash_family(self):
        return self in (Algo.DFLASH, Algo.DDTREE)


class Input:
    def is_verify_input(self):
        return self.kind in {
            Kind.A_VERIFY,
            Kind.A_VERIFY,
        }


RESERVED = frozenset({"DFLASH", "EAGLE"})
'''
    settings = IndexSettings(family="ddtree", enum_name="Algo", member_enums=("Kind",))
    facts = facts_of(source, settings)
    assert facts["predicates"]["Algo.is_dflash_family"] == {
        "name": "is_dflash_family", "class": "Algo", "expr": ["in", ["DFLASH", "DDTREE"]], "line": 9}
    sites = {s["expr"]: s for s in facts["dispatch"]}
    assert set(sites) == {"self.kind in{Kind.A_VERIFY,Kind.A_VERIFY}", '{"DFLASH","EAGLE"}'}
    assert sites["self.kind in{Kind.A_VERIFY,Kind.A_VERIFY}"]["duplicates"] == [["Kind.A_VERIFY", 16]]
    assert sites['{"DFLASH","EAGLE"}']["scope"] == "<module>"


def test_type_hints_of_locals_and_self_attributes():
    source = '''\
from copy import deepcopy


class W:
    def __init__(self, server_args: "ServerArgs", runner):
        self.server_args = server_args
        draft = deepcopy(server_args)
        draft.page_size = 1
        self.runner: Runner = runner
        self.other = Other()
        steps = self.tree.depth
        for _ in range(steps):
            pass
'''
    facts = facts_of(source)
    assert facts["classes"]["W"]["self_types"] == {"server_args": 'ann:"ServerArgs"', "runner": "ann:Runner",
                                                   "other": "call:Other"}
    fn = facts["functions"]["W.__init__"]
    assert fn["locals"]["draft"] == "same:server_args" and fn["locals"]["steps"] == "same:self.tree.depth"
    assert "steps" in fn["value_names"]
    assert ["draft", "page_size", 8, "W.__init__", "store"] in facts["uses"]


def test_the_order_of_a_methods_self_reads_and_writes():
    source = '''\
class W:
    def rows(self, strides):
        """The pool's widest row."""
        if self._rows is None:
            self._rows = int(strides.max())
        with lock:
            self.seen = 1
        try:
            cached = self.cache
        except AttributeError:
            cached = None
        later = lambda: self.late
        self.count += 1
        setattr(self, "named", 1)
        return self._rows, hasattr(self, "flag"), cached, later

    def outer(self):
        def inner():
            self.from_inner = 1
        return inner
'''
    flow = facts_of(source)["functions"]
    assert flow["W.rows"]["self_flow"] == [
        ["load", "_rows", 4, ["body:1"], 0],  # the if's test: the statement itself
        ["store", "_rows", 5, ["body:1", "body:0"], 0],  # inside its body
        ["store", "seen", 7, ["body:2", "body:0"], 1],  # a with body: done by the end of the with
        ["safe", "cache", 9, ["body:3", "body:0"], 1],  # a try that catches AttributeError
        ["safe", "late", 12, ["body:4"], 0],  # a lambda runs later
        ["load", "count", 13, ["body:5"], 0], ["store", "count", 13, ["body:5"], 0],  # += reads first
        ["store", "named", 14, ["body:6"], 0],
        ["load", "_rows", 15, ["body:7"], 0], ["guard", "flag", 15, ["body:7"], 0],
    ]
    assert flow["W.outer.inner"]["self_flow"] == [["store", "from_inner", 19, ["body:0"], 0]]
    assert flow["W.outer"]["self_flow"] == []


def test_prefilter_and_module_names(tmp_path):
    (tmp_path / "python/pkg").mkdir(parents=True)
    (tmp_path / "python/pkg/__init__.py").write_text("")
    (tmp_path / "python/pkg/a.py").write_text("x = 'DDTREE'\n")
    assert prefilter(tmp_path, ["python/pkg/__init__.py", "python/pkg/a.py"], rb"DDTREE") == ["python/pkg/a.py"]
    assert module_name("python/pkg/a.py", "python") == ("pkg.a", False)
    assert module_name("python/pkg/__init__.py", "python") == ("pkg", True)
    assert resolve_relative("pkg.sub.mod", False, 2, "other") == "pkg.other"
    assert resolve_relative("pkg.sub", True, 1, None) == "pkg.sub"
