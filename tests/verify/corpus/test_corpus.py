"""The independent corpus (defects.toml, benign.toml) against ``patchkit verify``'s gates on v1.

Targets: every defect caught by some gate with an error finding; at least 90 % with an
error at the edited file; no error or warning finding on a benign edit. Each entry is realised in a
shared tree with v1 applied (``seeding.py``) and the gates run in process. A defect stops at the
first gate that reports an error at its own file (the static gates first, then the ones that run the
tree); a benign edit runs every gate. ``test_corpus_targets`` checks the totals once every entry ran.
Needs the pinned verify environment, and takes hours on 2 cores (a benign edit runs every gate, the set's
tests included): ``corpus``, an evaluation run by hand (``pytest -m corpus``), not by CI; its last numbers
are in benchmarks/README.md. The seeded-defect suite realises the same classes in CI (``slow``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from .fixtures import V1, clean_tree, context, pristine_base, run_one, seeded_home  # noqa: F401
from .seeding import Edit, load_edits, realise, seeded

pytestmark = [pytest.mark.slow, pytest.mark.corpus]

HERE = Path(__file__).parent
DEFECTS = load_edits(HERE / "defects.toml", "defect")
BENIGN = load_edits(HERE / "benign.toml", "benign")
ORDER = ("compile", "xref", "dispatch", "calls", "backend", "imports", "tests")  # cheap first


@dataclass(frozen=True)
class Outcome:
    edit: Edit
    file: str
    line: int
    caught_by: tuple[str, ...]  # gates with an error finding (in ORDER, up to the first own-file one)
    own_file: bool
    own_line: bool


RESULTS: dict[str, Outcome] = {}


def run_entry(edit: Edit, tree: Path, home: Path, stop_at_own_file: bool) -> tuple[Outcome, list]:
    seed = realise(V1, tree, edit)
    caught, own_file, own_line, blocking = [], False, False, []
    with seeded(tree, seed):
        ctx = context(tree, home)
        for gate in ORDER:
            run = run_one(ctx, gate)
            assert run.status != "crash", run.traceback
            errors = [f for f in run.findings if f.severity.value == "error"]
            blocking += [(gate, f.file, f.line, f.message[:200]) for f in run.findings
                         if f.severity.value in ("error", "warning")]
            if errors:
                caught.append(gate)
            own_file |= any(f.file == seed.file for f in errors)
            own_line |= any((f.file, f.line) == (seed.file, seed.line) for f in errors)
            if stop_at_own_file and own_file:
                break
    return Outcome(edit, seed.file, seed.line, tuple(caught), own_file, own_line), blocking


@pytest.mark.parametrize("edit", DEFECTS, ids=[e.name for e in DEFECTS])
def test_corpus_defect_is_caught(edit, clean_tree, seeded_home):  # noqa: F811
    outcome, blocking = run_entry(edit, clean_tree, seeded_home, stop_at_own_file=True)
    RESULTS[edit.name] = outcome
    print(f"\ncorpus | {edit.name} | {outcome.file}:{outcome.line} | {', '.join(outcome.caught_by) or 'NOT CAUGHT'} | "
          f"{'own file' if outcome.own_file else '-'} | {'own line' if outcome.own_line else '-'}", flush=True)
    assert outcome.caught_by, f"{edit.name} ({outcome.file}:{outcome.line}) is caught by no gate"


@pytest.mark.parametrize("edit", BENIGN, ids=[e.name for e in BENIGN])
def test_corpus_benign_edit_has_no_finding(edit, clean_tree, seeded_home):  # noqa: F811
    _, blocking = run_entry(edit, clean_tree, seeded_home, stop_at_own_file=False)
    print(f"\nbenign | {edit.name} | {len(blocking)} finding(s) {blocking[:3]}", flush=True)
    assert blocking == [], blocking


def test_corpus_targets():
    if len(RESULTS) < len(DEFECTS):
        pytest.skip(f"only {len(RESULTS)} of {len(DEFECTS)} corpus defects ran in this session")
    own = sum(o.own_file for o in RESULTS.values())
    line = sum(o.own_line for o in RESULTS.values())
    print(f"corpus: {sum(bool(o.caught_by) for o in RESULTS.values())}/{len(DEFECTS)} caught, {own} at the "
          f"defect's file, {line} at its line")
    assert own >= 0.9 * len(DEFECTS), sorted(name for name, o in RESULTS.items() if not o.own_file)
