"""pyindex: the cheap line recorder agrees with libcst's PositionProvider; prefilter; module names."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from patchkit.verify.facts import module_name, node_lines, prefilter, resolve_relative

SOURCE = '''\
# header comment

import os


@decorator(
    arg=1,
)
class A(  # trailing
    Base,
):
    """Doc."""

    x: int = 1

    def f(self, a,
          b=2):
        if (a and
                b):  # why
            return [
                self.g(
                    a,
                ),
            ]
'''


def test_line_recorder_matches_position_provider():
    module = cst.parse_module(SOURCE)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    nodes = [n for n in positions if isinstance(n, (cst.BaseStatement, cst.BaseSmallStatement, cst.Call,
                                                    cst.Name, cst.Attribute, cst.BooleanOperation))]
    lines = node_lines(module, nodes)
    assert len(nodes) > 20
    assert {id(n): positions[n].start.line for n in nodes} == lines


def test_prefilter_and_module_names(tmp_path):
    (tmp_path / "python/pkg").mkdir(parents=True)
    (tmp_path / "python/pkg/__init__.py").write_text("")
    (tmp_path / "python/pkg/a.py").write_text("x = 'DDTREE'\n")
    assert prefilter(tmp_path, ["python/pkg/__init__.py", "python/pkg/a.py"], rb"DDTREE") == ["python/pkg/a.py"]
    assert module_name("python/pkg/a.py", "python") == ("pkg.a", False)
    assert module_name("python/pkg/__init__.py", "python") == ("pkg", True)
    assert resolve_relative("pkg.sub.mod", False, 2, "other") == "pkg.other"
    assert resolve_relative("pkg.sub", True, 1, None) == "pkg.sub"
