"""The v2 and v3 corpus (sets_corpus.toml) against ``patchkit verify``'s gates: where each defect is caught.

Each entry is realised in a tree with its set applied (``seeding.py``: the edited file rebuilt through
every patch touching it) and the gates run in process, cheap ones first, until one reports an error at
the edited line. An entry is *caught at the line* (an error finding at the edited file and line), *at
the file* (an error at the edited file, another line), *symptom only* (an error elsewhere: a test, a
backend case) or *missed*; a benign edit runs every gate and must get no error or warning.
``test_sets_corpus_table`` prints the table once every entry ran. Needs each set's pinned verify
environment and takes long on 2 cores: ``corpus`` (``pytest -m corpus``), run by hand; its numbers are
in benchmarks/README.md. ``PATCHKIT_SEEDED_ENV_DIR`` reuses a folder of built verify environments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib

from patchkit.verify.api import VerifyContext
from patchkit.verify.run import build_context

from .fixtures import REPO, patchkit, run_one
from .seeding import Edit, realise, seeded

pytestmark = [pytest.mark.slow, pytest.mark.corpus]

SETS = REPO / "ddtree_patches"
ORDER = ("compile", "xref", "dispatch", "calls", "backend", "imports", "tests")  # cheap first
CORPUS = tomllib.loads((Path(__file__).parent / "sets_corpus.toml").read_text())


def _entries(table: str) -> list[tuple[str, Edit]]:
    return [(e["set"], Edit(e["name"], e["patch"], e["old"], e["new"], e.get("occurrence"), e.get("class", table),
                            e.get("why", ""))) for e in CORPUS[table]]


DEFECTS = _entries("defect")
BENIGN = _entries("benign")
_TREES: dict[str, Path] = {}


@dataclass(frozen=True)
class Outcome:
    set_name: str
    edit: Edit
    where: str  # "line", "file", "symptom" or "missed"
    caught_by: tuple[str, ...]


RESULTS: dict[str, Outcome] = {}


@pytest.fixture(scope="session")
def sets_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("sets-corpus-home")
    shared = os.environ.get("PATCHKIT_SEEDED_ENV_DIR")
    if shared:
        (home / "cache").mkdir()
        (home / "cache" / "envs").symlink_to(Path(shared).resolve())
    return home


def applied(set_name: str, home: Path, tmp: pytest.TempPathFactory) -> Path:
    """The set applied to its base by the real CLI, once per session."""
    if set_name not in _TREES:
        tree = tmp.mktemp(f"sets-corpus-{set_name}") / "tree"
        patchkit("base", "fetch", "--set", SETS / set_name, "--dest", tree, home=home)
        patchkit("apply", "--set", SETS / set_name, "--target", tree, home=home)
        _TREES[set_name] = tree
    return _TREES[set_name]


def context(set_dir: Path, tree: Path, home: Path) -> VerifyContext:
    old = os.environ.get("PATCHKIT_HOME")
    os.environ["PATCHKIT_HOME"] = str(home)
    try:
        return build_context(set_dir, tree)
    finally:
        if old is None:
            os.environ.pop("PATCHKIT_HOME", None)
        else:
            os.environ["PATCHKIT_HOME"] = old


def run_entry(set_name: str, edit: Edit, tree: Path, home: Path, every_gate: bool) -> tuple[Outcome, list]:
    set_dir = SETS / set_name
    seed = realise(set_dir, tree, edit)
    caught: list[str] = []
    own_file = own_line = False
    reported = []
    with seeded(tree, seed):
        ctx = context(set_dir, tree, home)
        for gate in ORDER:
            run = run_one(ctx, gate)
            assert run.status != "crash", run.traceback
            errors = [f for f in run.findings if f.severity.value == "error"]
            reported += [(gate, f.file, f.line, f.message[:160]) for f in run.findings
                         if f.severity.value in ("error", "warning")]
            if errors:
                caught.append(gate)
            own_file |= any(f.file == seed.file for f in errors)
            own_line |= any((f.file, f.line) == (seed.file, seed.line) for f in errors)
            if own_line and not every_gate:
                break
    where = "line" if own_line else "file" if own_file else "symptom" if caught else "missed"
    return Outcome(set_name, edit, where, tuple(caught)), reported


@pytest.mark.parametrize(("set_name", "edit"), DEFECTS, ids=[e.name for _, e in DEFECTS])
def test_sets_corpus_defect_is_caught(set_name, edit, sets_home, tmp_path_factory):
    tree = applied(set_name, sets_home, tmp_path_factory)
    outcome, _reported = run_entry(set_name, edit, tree, sets_home, every_gate=False)
    RESULTS[edit.name] = outcome
    print(f"\nsets-corpus | {edit.name} | {edit.kind} | {outcome.where} | {', '.join(outcome.caught_by) or '-'}",
          flush=True)
    assert outcome.where != "missed", f"{edit.name} is caught by no gate"


@pytest.mark.parametrize(("set_name", "edit"), BENIGN, ids=[e.name for _, e in BENIGN])
def test_sets_corpus_benign_edit_has_no_finding(set_name, edit, sets_home, tmp_path_factory):
    tree = applied(set_name, sets_home, tmp_path_factory)
    _, reported = run_entry(set_name, edit, tree, sets_home, every_gate=True)
    print(f"\nsets-corpus benign | {edit.name} | {len(reported)} finding(s) {reported[:3]}", flush=True)
    assert reported == [], reported


def test_sets_corpus_table():
    if len(RESULTS) < len(DEFECTS):
        pytest.skip(f"only {len(RESULTS)} of {len(DEFECTS)} entries ran in this session")
    counts = {where: sum(o.where == where for o in RESULTS.values()) for where in ("line", "file", "symptom", "missed")}
    print("\n| caught at the line | at the file | symptom only | missed |\n|---|---|---|---|\n"
          f"| {counts['line']} | {counts['file']} | {counts['symptom']} | {counts['missed']} |", flush=True)
    assert counts["missed"] == 0


def test_the_corpus_edits_lines_the_sets_add():
    """Fast check of the data (it runs with the corpus): every entry names one added line of its set."""
    from .seeding import _edited_patch

    for set_name, edit in DEFECTS + BENIGN:
        _edited_patch(SETS / set_name, edit)
    assert len(DEFECTS) >= 25 and {s for s, _ in DEFECTS} == {"v2", "v3"}
