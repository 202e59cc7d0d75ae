"""One evaluation of a corpus of one-line patch edits against ``patchkit verify``'s gates.

Both corpora use it: the v1 corpus (defects.toml, benign.toml; test_corpus.py) and the v2/v3 corpus
(sets_corpus.toml; test_sets_corpus.py), and ``benchmarks/verify.py --corpus``. An entry is realised in
a tree with its set applied (``seeding.py``: the edited file rebuilt through every patch touching it,
swapped in for the check), then the gates run in process, cheap ones first (``ORDER``), and the outcome
is classified by the error findings:

- ``line``: an error at the edited file and line;
- ``file``: an error at the edited file, another line;
- ``symptom``: errors elsewhere only (a set test, a backend case, another file);
- ``missed``: no error.

A defect may stop at the first gate that reaches a place (``stop_at="line"`` or ``"file"``); a benign
edit runs every gate and must get no error or warning finding (:attr:`Outcome.reported`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from patchkit.verify.api import VerifyContext
from patchkit.verify.run import build_context, run_gate

from .seeding import Edit, Seeded, realise, seeded

REPO = Path(__file__).resolve().parents[3]
SETS = REPO / "ddtree_patches"
ORDER = ("compile", "xref", "dispatch", "calls", "backend", "imports", "tests")  # cheap first
WHERE = ("line", "file", "symptom", "missed")
BLOCKING = ("error", "warning")


@dataclass(frozen=True)
class Entry:
    """One corpus entry: the set it edits and the edit."""

    set_dir: Path
    edit: Edit

    @property
    def set_name(self) -> str:
        return self.set_dir.name


@dataclass(frozen=True)
class Outcome:
    """Where an entry was caught: its realised place, the gates that ran, and what they reported."""

    entry: Entry
    file: str
    line: int
    ran: tuple[str, ...]  # the gates run, in order (up to the stop)
    caught_by: tuple[str, ...]  # gates with an error finding
    at_file: tuple[str, ...]  # gates with an error at the edited file
    at_line: tuple[str, ...]  # gates with an error at the edited line
    # every error and warning: (gate, severity, file, line, message)
    reported: tuple[tuple[str, str, str | None, int | None, str], ...]

    @property
    def where(self) -> str:
        return "line" if self.at_line else "file" if self.at_file else "symptom" if self.caught_by else "missed"

    def flagged(self, gate: str, severities: Sequence[str] = ("error",)) -> bool:
        """Whether ``gate`` reported a finding of those severities (the benign table counts warnings too)."""
        return any(g == gate and severity in severities for g, severity, *_ in self.reported)


# ---------------------------------------------------------------- corpus files


def load_entries(path: Path, table: str, set_dir: Path | None = None) -> list[Entry]:
    """The ``[[defect]]`` or ``[[benign]]`` entries of a corpus file: each names its set (``set = "v2"``,
    a folder of ddtree_patches/) or edits ``set_dir`` (the v1 corpus has no ``set`` key)."""
    out = []
    for e in tomllib.loads(path.read_text())[table]:
        where = SETS / e["set"] if "set" in e else set_dir
        assert where is not None, f"{e['name']}: no set named and none given"
        out.append(Entry(where, Edit(e["name"], e["patch"], e["old"], e["new"], e.get("occurrence"),
                                     e.get("class", table), e.get("why", ""))))
    return out


# ---------------------------------------------------------------- a home, a tree, a context


def patchkit(*args: object, home: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real CLI, as a user runs it."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PATCHKIT_HOME": str(home), "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=1800)
    if check:
        assert done.returncode == 0, f"patchkit {args[0]} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def prepare_home(home: Path) -> Path:
    """A self-contained PATCHKIT_HOME (its caches under ``home/cache``). ``PATCHKIT_SEEDED_ENV_DIR``
    names a folder of built verify environments to reuse (a shared cache's ``envs/``): it is linked as
    the home's ``cache/envs``, and the base wheels beside it as the home's cached wheels, so neither is
    built nor downloaded again. Nothing is written into the shared folder's wheels."""
    home.mkdir(parents=True, exist_ok=True)
    shared = os.environ.get("PATCHKIT_SEEDED_ENV_DIR")
    if shared:
        envs = Path(shared).resolve()
        cache = home / "cache"
        cache.mkdir(exist_ok=True)
        if not (cache / "envs").exists():
            (cache / "envs").symlink_to(envs)
        for wheel in envs.parent.glob("*.whl"):
            if not (cache / wheel.name).exists():
                (cache / wheel.name).symlink_to(wheel)
    return home


def applied_tree(set_dir: Path, home: Path, dest: Path, base: Path | None = None) -> Path:
    """``set_dir`` applied by the real CLI to a fresh base at ``dest`` (a clone of ``base`` when given)."""
    if base is None:
        patchkit("base", "fetch", "--set", set_dir, "--dest", dest, home=home)
    else:
        subprocess.run(["git", "clone", "-q", str(base), str(dest)], check=True)
    patchkit("apply", "--set", set_dir, "--target", dest, home=home)
    return dest


def context(set_dir: Path, tree: Path, home: Path | None = None) -> VerifyContext:
    """The verify context of ``set_dir`` on ``tree``, with ``home``'s caches (else the environment's)."""
    if home is None:
        return build_context(set_dir, tree)
    old = os.environ.get("PATCHKIT_HOME")
    os.environ["PATCHKIT_HOME"] = str(home)
    try:
        return build_context(set_dir, tree)
    finally:
        if old is None:
            os.environ.pop("PATCHKIT_HOME", None)
        else:
            os.environ["PATCHKIT_HOME"] = old


def run_one(ctx: VerifyContext, gate: str) -> Any:
    """Run one registered gate in process, as the runner does (a refusal becomes a finding)."""
    from patchkit.checks.registry import GATES

    return run_gate(gate, GATES.__getitem__, ctx)


# ---------------------------------------------------------------- the evaluation


@contextlib.contextmanager
def realised(entry: Entry, tree: Path, home: Path | None = None) -> Iterator[tuple[Seeded, VerifyContext]]:
    """The entry's edit in ``tree`` (put back afterwards) and the verify context on it."""
    seed = realise(entry.set_dir, tree, entry.edit)
    with seeded(tree, seed):
        yield seed, context(entry.set_dir, tree, home)


def run_gates(seed: Seeded, ctx: VerifyContext, entry: Entry, gates: Sequence[str] = ORDER,
              stop_at: str | None = None) -> Outcome:
    """Run ``gates`` in order on the realised entry; with ``stop_at`` ("line" or "file"), stop at the
    first gate whose error reaches that place. A gate that crashes fails the evaluation."""
    ran, caught, at_file, at_line, reported = [], [], [], [], []
    for gate in gates:
        run = run_one(ctx, gate)
        assert run.status != "crash", f"{entry.edit.name}: gate {gate} crashed\n{run.traceback}"
        ran.append(gate)
        errors = [f for f in run.findings if f.severity.value == "error"]
        reported += [(gate, f.severity.value, f.file, f.line, f.message[:200]) for f in run.findings
                     if f.severity.value in BLOCKING]
        if errors:
            caught.append(gate)
        if any(f.file == seed.file for f in errors):
            at_file.append(gate)
        if any((f.file, f.line) == (seed.file, seed.line) for f in errors):
            at_line.append(gate)
        if (stop_at == "line" and at_line) or (stop_at == "file" and at_file):
            break
    return Outcome(entry, seed.file, seed.line, tuple(ran), tuple(caught), tuple(at_file), tuple(at_line),
                   tuple(reported))


def evaluate(entry: Entry, tree: Path, home: Path | None = None, gates: Sequence[str] = ORDER,
             stop_at: str | None = None) -> Outcome:
    """Realise ``entry`` in ``tree``, run the gates cheap first and classify the outcome."""
    with realised(entry, tree, home) as (seed, ctx):
        return run_gates(seed, ctx, entry, gates, stop_at)


# ---------------------------------------------------------------- reporting


def row(outcome: Outcome) -> str:
    """One markdown row: entry, file:line, gates with an error, at the file, at the line, where."""
    e = outcome.entry.edit
    return (f"| {e.name} | {e.kind} | `{outcome.file}:{outcome.line}` | {', '.join(outcome.caught_by) or '-'} | "
            f"{', '.join(outcome.at_file) or '-'} | {', '.join(outcome.at_line) or '-'} | {outcome.where} |")


HEADER = ("| defect | class | file:line | gates with an error | at the file | at the line | caught |\n"
          "|---|---|---|---|---|---|---|")


def totals(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {where: sum(o.where == where for o in outcomes) for where in WHERE}


def table(outcomes: Sequence[Outcome]) -> str:
    counts = totals(outcomes)
    n = len(outcomes) or 1
    share = f"{100 * counts['line'] / n:.0f}%"
    return "\n".join([HEADER, *(row(o) for o in outcomes), "",
                      "| caught at the line | at the file | symptom only | missed |", "|---|---|---|---|",
                      f"| {counts['line']} ({share}) | {counts['file']} | {counts['symptom']} | {counts['missed']} |"])
