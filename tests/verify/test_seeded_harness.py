"""The seeded-defect harness itself: its one-line patch edit must be exact and refuse ambiguity."""

from __future__ import annotations

import pytest
from tests.verify import test_seeded_defects as seeded
from tests.verify.test_seeded_defects import Defect, line_of, seeded_set

PATCH = """From 0 Mon Sep 17 00:00:00 2001
Subject: [PATCH] add ddtree

---
 python/pkg/mod.py | 3 ++-
 1 file changed, 2 insertions(+), 1 deletion(-)

--- a/python/pkg/mod.py
+++ b/python/pkg/mod.py
@@ -1,2 +1,3 @@
 import os
-X = 1
+X = SpeculativeAlgorithm.DDTREE
+Y = is_ddtree(X)
"""


@pytest.fixture
def fake_v1(tmp_path, monkeypatch):
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "0001-add-ddtree.patch").write_text(PATCH)
    (v1 / "manifest.toml").write_text("")
    monkeypatch.setattr(seeded, "V1", v1)
    return v1


def test_the_edit_changes_one_added_line_and_keeps_the_line_count(fake_v1, tmp_path):
    defect = Defect("missing enum member", "xref", "0001-*.patch", "DDTREE", "DDTREEX")
    set_dir, tree_file, new_line = seeded_set(defect, tmp_path / "copy")
    text = (set_dir / "0001-add-ddtree.patch").read_text()
    assert tree_file == "python/pkg/mod.py" and new_line == "X = SpeculativeAlgorithm.DDTREEX"
    assert "+X = SpeculativeAlgorithm.DDTREEX\n" in text and len(text.splitlines()) == len(PATCH.splitlines())
    assert (fake_v1 / "0001-add-ddtree.patch").read_text() == PATCH  # the real set is never touched
    tree = tmp_path / "tree.py"
    tree.write_text("import os\nX = SpeculativeAlgorithm.DDTREEX\n")
    assert line_of(tree, new_line) == 2


@pytest.mark.parametrize(("old", "problem"), [("X", "on 2 added lines"), ("X = 1", "on 0 added lines")])
def test_ambiguous_or_context_only_edits_are_refused(fake_v1, tmp_path, old, problem):
    with pytest.raises(AssertionError, match=problem):
        seeded_set(Defect("x", "xref", "0001-*.patch", old, "z"), tmp_path / "copy")


def test_every_defect_class_of_the_issue_has_a_row():
    assert len(seeded.DEFECTS) == 10 and len({d.name for d in seeded.DEFECTS}) == 10
    assert {d.gate for d in seeded.DEFECTS} == {"compile", "imports", "xref", "dispatch", "backend", "tests"}
