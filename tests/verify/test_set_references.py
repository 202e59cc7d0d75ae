"""A set's folders outside itself (``[verify.tests] shared``, ``[verify.xref] use_paths``): checked when
verify loads the set, one finding naming the path and the fix, nothing else from the gates for that cause;
``patchkit sets copy`` makes a self-contained copy that verifies as the original does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from patchkit.cli import cli
from patchkit.testing.verify import applied_example

CORE = "def ddtree_norm(xs):\n    total = sum(xs)\n    return [x / total for x in xs]\n"
TEST = ("import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
        "from pkg.ddtree_core import ddtree_norm\n\n\n"
        "def test_norm():\n    assert ddtree_norm([1, 3]) == [0.25, 0.75]\n")
OWN = ("import os, sys\nsys.path.insert(0, os.path.join(os.environ['PATCHKIT_TARGET'], 'python'))\n"
       "from helpers_of_the_shared import ONE\n\n\ndef test_own():\n    assert ONE == 1\n")


def _set(tmp_path):
    """A set whose family function only the shared tests call, and whose own test imports a helper of theirs."""
    extra = {"verify": {"xref": {"family": "ddtree|DDTREE", "use_paths": ["tests", "../common/core_tests"]},
                        "tests": {"interpreter": "current", "shared": ["../common/core_tests"]}}}
    target, set_dir = applied_example(tmp_path, {"python/pkg/__init__.py": ""}, {"python/pkg/ddtree_core.py": CORE},
                                      extra)
    shared = set_dir.parent / "common" / "core_tests"
    shared.mkdir(parents=True)
    (shared / "test_core.py").write_text(TEST)
    (shared / "helpers_of_the_shared.py").write_text("ONE = 1\n")
    (set_dir / "tests").mkdir()
    (set_dir / "tests" / "test_own.py").write_text(OWN)
    return target, set_dir


def _verify(target, set_dir):
    done = CliRunner().invoke(cli, ["verify", "--set", str(set_dir), "--target", str(target), "--gate", "xref",
                                    "--gate", "tests", "--json"], catch_exceptions=False)
    gates = {g["gate"]: g for g in json.loads(done.stdout)["result"]["gates"]}
    return done.exit_code, gates, [f for g in gates.values() for f in g["findings"] if f["severity"] != "info"]


def test_the_set_verifies_with_its_shared_folder_beside_it(tmp_path):
    target, set_dir = _set(tmp_path)
    code, gates, problems = _verify(target, set_dir)
    assert (code, problems) == (0, []), problems
    assert "set" not in gates


def test_a_missing_folder_outside_the_set_is_one_finding_with_the_fix(tmp_path):
    target, set_dir = _set(tmp_path)
    moved = tmp_path / "other" / "elsewhere"
    shutil.copytree(set_dir, moved)  # how a maintainer starts a set of their own
    code, gates, problems = _verify(target, moved)
    assert code == 1
    (only,) = problems  # no "never called" from xref, no collection error from the tests gate
    assert only["gate"] == "set" and "'../common/core_tests'" in only["message"]
    assert only["file"].endswith("manifest.toml") and only["line"] is not None
    assert "patchkit sets copy" in only["hint"]
    assert gates["xref"]["status"] == "pass" and gates["tests"]["status"] == "pass"


def test_sets_copy_makes_a_self_contained_copy_that_verifies_as_the_original(tmp_path):
    target, set_dir = _set(tmp_path)
    copy = tmp_path / "mine" / "myset"
    done = CliRunner().invoke(cli, ["sets", "copy", str(set_dir), str(copy)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert (copy / "shared" / "core_tests" / "test_core.py").is_file()
    assert '"shared/core_tests"' in (copy / "manifest.toml").read_text()
    shutil.rmtree(set_dir.parent / "common")  # the copy needs nothing outside itself
    code, _gates, problems = _verify(target, copy)
    assert (code, problems) == (0, []), problems
    again = CliRunner().invoke(cli, ["sets", "copy", str(set_dir), str(copy)])
    assert again.exit_code == 2 and "already exists" in again.output


def test_a_set_folder_without_manifest_or_series_is_one_line_exit_2(tmp_path):
    target, set_dir = _set(tmp_path)
    (set_dir / "series").unlink()
    for folder, missing in ((set_dir, "series not found"), (tmp_path / "empty", "manifest.toml not found")):
        folder.mkdir(exist_ok=True)
        done = CliRunner().invoke(cli, ["verify", "--set", str(folder), "--target", str(target)])
        assert done.exit_code == 2 and missing in done.output
        assert len(done.output.strip().splitlines()) == 1, done.output


def test_the_stubs_folder_is_a_reference_outside_the_set_too():
    from patchkit import manifest as manifest_mod
    from patchkit.references import outside_references

    v2 = Path(__file__).resolve().parents[2] / "ddtree_patches" / "v2"
    refs = {(ref.table, ref.key, ref.path) for ref in outside_references(v2, manifest_mod.load(v2, with_lock=False))}
    assert ("verify.env", "stubs_dir", "../common/stubs") in refs
    assert ("verify.tests", "shared", "../common/ddtree_utils_tests") in refs
