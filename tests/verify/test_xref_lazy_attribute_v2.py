"""The maintainer's find on the real v2 set: deleting ``self._kv_rows: Optional[int] = None`` from
``DDTreeWorkerV2.__init__`` passed every gate. The xref gate now reports the read of ``self._kv_rows``
in ``_kv_row_bytes`` (the only method that assigns it, after reading it), and the unedited set has no
finding of that rule (nor any other xref error or warning).

Slow: it fetches the real SGLang 0.5.17 wheel (22 MB) into a fresh home and applies v2 with the real
CLI, then runs the gate in process: 11 to 50 s on a 2-core machine, most of it the fetch and apply.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from patchkit.verify.api import Severity
from patchkit.verify.run import build_context
from tests.verify.corpus.fixtures import REPO, patchkit, run_one

V2 = REPO / "ddtree_patches" / "v2"
WORKER = "python/sglang/srt/speculative/ddtree_worker_v2.py"
INIT_LINE = "        self._kv_rows: Optional[int] = None\n"
FIRST_READ = "        if self._kv_rows is None:\n"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (V2 / "manifest.toml").is_file(), reason="ddtree_patches/v2 is absent")]


@pytest.fixture(scope="module")
def v2_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(tree with v2 applied by the real CLI, the patchkit home it used)."""
    home = tmp_path_factory.mktemp("xref-v2-home")
    tree = tmp_path_factory.mktemp("xref-v2") / "tree"
    patchkit("base", "fetch", "--set", V2, "--dest", tree, home=home)
    patchkit("apply", "--set", V2, "--target", tree, home=home)
    return tree, home


def xref_findings(tree: Path, home: Path) -> list:
    old = os.environ.get("PATCHKIT_HOME")
    os.environ["PATCHKIT_HOME"] = str(home)
    try:
        ctx = build_context(V2, tree)
    finally:
        if old is None:
            os.environ.pop("PATCHKIT_HOME", None)
        else:
            os.environ["PATCHKIT_HOME"] = old
    run = run_one(ctx, "xref")
    assert run.status != "crash", run.traceback
    return [f for f in run.findings if f.severity in (Severity.ERROR, Severity.WARNING)]


def test_the_unedited_set_has_no_xref_finding(v2_tree):
    assert xref_findings(*v2_tree) == []


def test_deleting_the_init_line_of_kv_rows_is_an_error_at_its_first_read(v2_tree):
    tree, home = v2_tree
    path = tree / WORKER
    clean = path.read_text()
    assert clean.count(INIT_LINE) == 1 and clean.count(FIRST_READ) == 1
    edited = clean.replace(INIT_LINE, "")
    read_line = edited.splitlines(keepends=True).index(FIRST_READ) + 1
    path.write_text(edited)
    try:
        found = xref_findings(tree, home)
    finally:
        path.write_text(clean)
    assert [(f.severity, f.file, f.line) for f in found] == [(Severity.ERROR, WORKER, read_line)], found
    assert found[0].message.startswith(
        "`self._kv_rows` is read here, but no method of DDTreeWorkerV2 assigns it before this read and __init__ "
        "never sets it: only _kv_row_bytes() assigns it")
    assert found[0].hint == "initialise it in DDTreeWorkerV2.__init__ (e.g. `self._kv_rows = None`)"
