"""The independent corpus (defects.toml, benign.toml) against ``patchkit verify``'s gates on v1.

Targets: every defect caught by some gate with an error finding; at least 90 % with an
error at the edited file; no error or warning finding on a benign edit. Each entry is realised in a
shared tree with v1 applied and the gates run in process (``evaluate.py``, the v2/v3 corpus's
evaluation too). A defect stops at the first gate that reports an error at its own file (the static
gates first, then the ones that run the tree); a benign edit runs every gate. ``test_corpus_targets``
checks the totals once every entry ran. Needs the pinned verify environment, and takes hours on 2
cores (a benign edit runs every gate, the set's tests included): ``corpus``, an evaluation run by hand
(``pytest -m corpus``), not by CI; its last numbers are in benchmarks/README.md. The seeded-defect
suite realises the same classes in CI (``slow``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .evaluate import Entry, Outcome, evaluate, load_entries
from .fixtures import V1, clean_tree, pristine_base, seeded_home  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.corpus]

HERE = Path(__file__).parent
DEFECTS = load_entries(HERE / "defects.toml", "defect", V1)
BENIGN = load_entries(HERE / "benign.toml", "benign", V1)
RESULTS: dict[str, Outcome] = {}


@pytest.mark.parametrize("entry", DEFECTS, ids=[e.edit.name for e in DEFECTS])
def test_corpus_defect_is_caught(entry: Entry, clean_tree, seeded_home):  # noqa: F811
    outcome = evaluate(entry, clean_tree, seeded_home, stop_at="file")
    RESULTS[entry.edit.name] = outcome
    print(f"\ncorpus | {entry.edit.name} | {outcome.file}:{outcome.line} | "
          f"{', '.join(outcome.caught_by) or 'NOT CAUGHT'} | {'own file' if outcome.at_file else '-'} | "
          f"{'own line' if outcome.at_line else '-'}", flush=True)
    assert outcome.caught_by, f"{entry.edit.name} ({outcome.file}:{outcome.line}) is caught by no gate"


@pytest.mark.parametrize("entry", BENIGN, ids=[e.edit.name for e in BENIGN])
def test_corpus_benign_edit_has_no_finding(entry: Entry, clean_tree, seeded_home):  # noqa: F811
    outcome = evaluate(entry, clean_tree, seeded_home)
    print(f"\nbenign | {entry.edit.name} | {len(outcome.reported)} finding(s) {list(outcome.reported[:3])}", flush=True)
    assert outcome.reported == (), outcome.reported


def test_corpus_targets():
    if len(RESULTS) < len(DEFECTS):
        pytest.skip(f"only {len(RESULTS)} of {len(DEFECTS)} corpus defects ran in this session")
    own = sum(bool(o.at_file) for o in RESULTS.values())
    line = sum(bool(o.at_line) for o in RESULTS.values())
    print(f"corpus: {sum(bool(o.caught_by) for o in RESULTS.values())}/{len(DEFECTS)} caught, {own} at the "
          f"defect's file, {line} at its line")
    assert own >= 0.9 * len(DEFECTS), sorted(name for name, o in RESULTS.items() if not o.at_file)
