"""An empty series is refused by name, the same way, by lock, apply, status and verify (issue 37, point 6):
before, apply printed a 1.3 KB list comparison that never said "empty", lock wrote a 0-patch set, and for
that set apply said "already applied" while status said every patch differed."""

from __future__ import annotations

import pytest

from tests.patchset import helpers

VERBS = ("apply", "status", "lock", "verify")


def run(fx, verb: str) -> tuple[int, dict]:
    where = ("--base", str(fx.target)) if verb == "lock" else ("--target", str(fx.target))
    return helpers.invoke_json(verb, "--set", str(fx.set_dir), *where)


@pytest.mark.parametrize("series", ["", "# tiny set: one patch per line\n\n# (all of them were dropped)\n"])
def test_every_verb_refuses_an_empty_series_by_name_and_changes_nothing(fx, series):
    helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    (fx.set_dir / "series").write_text(series)
    set_before, tree_before, head = helpers.set_snapshot(fx.set_dir), helpers.tree_snapshot(fx.target), fx.head()
    errors = {}
    for verb in VERBS:
        code, doc = run(fx, verb)
        assert code == 2 and doc["ok"] is False, (verb, doc)
        errors[verb] = doc["error"]
    for verb, error in errors.items():
        assert error["message"].startswith("the series is empty: "), (verb, error)
        assert error["file"] == str(fx.set_dir / "series") and error["line"] == max(1, series.count("\n")), error
        assert "patchkit refresh" in error["hint"], error
        assert len(error["message"]) + len(error["hint"].replace(str(fx.set_dir), "S")) < 300, "one short line"
    assert len({e["message"] for e in errors.values()}) == 1, "the same refusal from every verb"
    assert helpers.set_snapshot(fx.set_dir) == set_before, "lock wrote no 0-patch set"
    assert (helpers.tree_snapshot(fx.target), fx.head()) == (tree_before, head)


def test_a_series_that_drops_one_patch_names_it_in_a_short_line(fx):
    series = fx.set_dir / "series"
    series.write_text(series.read_text().replace("0003-Change-VALUE_15-in-util.patch\n", ""))
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert code == 2
    message = doc["error"]["message"]
    assert message == "series lists 4 patch(es) but the lock 5; not in the series: 0003-Change-VALUE_15-in-util.patch"
    assert "patchkit lock" in doc["error"]["hint"]


def test_a_reordered_series_says_where_the_order_parts(fx):
    series = fx.set_dir / "series"
    lines = series.read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    series.write_text("\n".join(lines) + "\n")
    code, doc = helpers.invoke_json("status", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert code == 2
    assert doc["error"]["message"] == (
        "series and lock list 5 patch(es) each; in another order: place 1 is "
        "0002-Add-pkg-extra.py.patch in the series, 0001-Patch-f2-in-core.patch in the lock")
