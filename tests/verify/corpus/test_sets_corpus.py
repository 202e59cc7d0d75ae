"""The v2 and v3 corpus (sets_corpus.toml) against ``patchkit verify``'s gates: where each defect is caught.

Each entry is realised in a tree with its set applied and the gates run in process, cheap ones first,
until one reports an error at the edited line (``evaluate.py``, the v1 corpus's evaluation too). An
entry is *caught at the line* (an error finding at the edited file and line), *at the file* (an error at
the edited file, another line), *symptom only* (an error elsewhere: a test, a backend case) or *missed*;
a benign edit runs every gate and must get no error or warning. ``test_sets_corpus_table`` prints the
table once every entry ran and checks the target: every defect caught, at least 90 % at the line.
Needs each set's pinned verify environment and takes long on 2 cores: ``corpus`` (``pytest -m
corpus``), run by hand; its numbers are in benchmarks/README.md.
``PATCHKIT_SEEDED_ENV_DIR`` reuses a folder of built verify environments (and the base wheels beside it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .evaluate import Entry, Outcome, applied_tree, evaluate, load_entries, prepare_home, table, totals
from .seeding import _edited_patch

pytestmark = [pytest.mark.slow, pytest.mark.corpus]

CORPUS = Path(__file__).parent / "sets_corpus.toml"
DEFECTS = load_entries(CORPUS, "defect")
BENIGN = load_entries(CORPUS, "benign")
_TREES: dict[str, Path] = {}
RESULTS: dict[str, Outcome] = {}


@pytest.fixture(scope="session")
def sets_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_home(tmp_path_factory.mktemp("sets-corpus-home"))


def applied(entry: Entry, home: Path, tmp: pytest.TempPathFactory) -> Path:
    """The entry's set applied to its base by the real CLI, once per session."""
    if entry.set_name not in _TREES:
        _TREES[entry.set_name] = applied_tree(entry.set_dir, home, tmp.mktemp(f"sets-corpus-{entry.set_name}") / "tree")
    return _TREES[entry.set_name]


@pytest.mark.parametrize("entry", DEFECTS, ids=[e.edit.name for e in DEFECTS])
def test_sets_corpus_defect_is_caught(entry: Entry, sets_home, tmp_path_factory):
    outcome = evaluate(entry, applied(entry, sets_home, tmp_path_factory), sets_home, stop_at="line")
    RESULTS[entry.edit.name] = outcome
    print(f"\nsets-corpus | {entry.edit.name} | {entry.edit.kind} | {outcome.file}:{outcome.line} | {outcome.where} | "
          f"{', '.join(outcome.caught_by) or '-'} | at file: {', '.join(outcome.at_file) or '-'} | "
          f"{list(outcome.reported[:4])}", flush=True)
    assert outcome.where != "missed", f"{entry.edit.name} is caught by no gate"


@pytest.mark.parametrize("entry", BENIGN, ids=[e.edit.name for e in BENIGN])
def test_sets_corpus_benign_edit_has_no_finding(entry: Entry, sets_home, tmp_path_factory):
    outcome = evaluate(entry, applied(entry, sets_home, tmp_path_factory), sets_home)
    print(f"\nsets-corpus benign | {entry.edit.name} | {len(outcome.reported)} finding(s) {list(outcome.reported[:3])}",
          flush=True)
    assert outcome.reported == (), outcome.reported


def test_sets_corpus_table():
    if len(RESULTS) < len(DEFECTS):
        pytest.skip(f"only {len(RESULTS)} of {len(DEFECTS)} entries ran in this session")
    print("\n" + table([RESULTS[e.edit.name] for e in DEFECTS]), flush=True)
    counts = totals(list(RESULTS.values()))
    assert counts["missed"] == 0
    assert counts["line"] >= 0.9 * len(DEFECTS), sorted(n for n, o in RESULTS.items() if o.where != "line")


def test_the_corpus_edits_lines_the_sets_add():
    """Fast check of the data (it runs with the corpus): every entry names one added line of its set."""
    for entry in DEFECTS + BENIGN:
        _edited_patch(entry.set_dir, entry.edit)
    assert len(DEFECTS) >= 25 and {e.set_name for e in DEFECTS} == {"v2", "v3"}
