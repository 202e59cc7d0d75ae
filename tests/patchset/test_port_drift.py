"""The port report's comparisons on small, exact inputs: old patch vs new, upstream hunks, dispatch sites."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from patchkit.patchset import drift


def diff(path: str, start: int, lines: list[str]) -> bytes:
    """A one-hunk git diff of ``path`` whose pre-image starts at ``start``."""
    old = [ln for ln in lines if not ln.startswith("+")]
    new = [ln for ln in lines if not ln.startswith("-")]
    head = (f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\n--- a/{path}\n+++ b/{path}\n"
            f"@@ -{start},{len(old)} +{start},{len(new)} @@\n")
    return (head + "".join(ln + "\n" for ln in lines)).encode()


HUNK = [" a", " b", " c", "-d", "+D", " e", " f", " g"]


@pytest.mark.parametrize("new,status,moves,differ", [
    (diff("f.py", 10, HUNK), "clean", [0], False),
    (diff("f.py", 17, HUNK), "offset", [7], False),
    (diff("f.py", 10, [" a", " B", " c", "-d", "+D", " e", " f", " g"]), "context-changed", [0], False),
    (diff("f.py", 12, [" a", " b", " c", "-d", "+DD", " e", " f", " g"]), "context-changed", [], True),
    (diff("g.py", 10, HUNK), "context-changed", [], True),
])
def test_compare_patch_statuses(new, status, moves, differ):
    result = drift.compare_patch(drift.without_index_lines(diff("f.py", 10, HUNK)), drift.without_index_lines(new))
    assert result.status == status
    assert [m.delta for m in result.moves] == moves
    assert result.changes_differ is differ


def test_compare_patch_counts_changed_lines_and_names_lost_files():
    old = diff("f.py", 10, HUNK) + diff("h.py", 1, ["-x", "+y"])
    result = drift.compare_patch(old, diff("f.py", 10, [" a", " b", " c", "-d", "+DD", " e", " f", " g"]))
    assert (result.added, result.removed) == (1, 3)
    assert result.detail.startswith("no longer changes h.py; 2 hunks became 1; its +/- lines changed (+1/-3)")


def test_index_lines_do_not_count_as_a_difference():
    other_blobs = diff("f.py", 10, HUNK).replace(b"index 1111111..2222222", b"index 3333333..4444444")
    assert drift.compare_patch(drift.without_index_lines(diff("f.py", 10, HUNK)),
                               drift.without_index_lines(other_blobs)).status == "clean"


@pytest.mark.parametrize("start,count,near", [
    (5, 2, False),   # lines 5-6, before the region 10-17
    (9, 2, True),    # lines 9-10 reach its first line
    (17, 1, True),   # its last line
    (18, 1, False),  # just after it
    (12, 0, True),   # an insertion after line 12, inside it
    (18, 0, False),  # an insertion after its end
])
def test_upstream_hunk_is_near_the_set_when_it_meets_a_covered_region(start, count, near):
    assert drift._overlaps(start, count, [(10, 8)]) is near


@dataclass(frozen=True)
class Site:
    file: str
    scope: str
    expr: str
    occurrence: int = 0
    line: int = 1

    @property
    def key(self):
        return (self.file, self.scope, self.expr, self.occurrence)


def test_site_changes_pair_an_edited_expression_and_keep_moved_lines_quiet():
    old = [Site("a.py", "f", "x.is_eagle()", line=3), Site("a.py", "g", "x.is_dflash()", line=9),
           Site("b.py", "h", "x.is_ngram()", line=2)]
    new = [Site("a.py", "f", "x.is_eagle()", line=30), Site("a.py", "g", "x.is_dflash()or x.is_dspark()", line=90),
           Site("c.py", "k", "x.is_dflash()", line=5)]
    changes = drift.site_changes(old, new, declared={("b.py", "h", "x.is_ngram()", 0)})
    assert [(c.kind, c.file, c.expr, c.old_expr, c.declared) for c in changes] == [
        ("changed", "a.py", "x.is_dflash()or x.is_dspark()", "x.is_dflash()", False),
        ("vanished", "b.py", "x.is_ngram()", None, True),
        ("appeared", "c.py", "x.is_dflash()", None, False),
    ]


def test_stale_mentions_skip_the_pin_and_longer_versions():
    text = 'a = "0.5.12"\nb = "sglang 0.5.12."\nc = "0.5.123"\nd = "10.5.12"\ne = "0.5.12.1"\n'
    assert drift.stale_mentions(text, "0.5.12", skip_lines={1}) == ((2, 'b = "sglang 0.5.12."'),)
