"""The seeded-defect suite: proof that each gate catches the defect class it exists for.

For every row of ``DEFECTS``: copy ``ddtree_patches/v1``, edit ONE added line of one patch
(``old`` -> ``new``, same line count), ``patchkit lock`` the copy, apply it to a fresh clone of the
pinned base, run ``patchkit verify --gate <gate> --json`` and require that gate to fail with an
error finding naming the expected file and line. The clean set must pass every gate with no error
or warning finding.

Everything goes through the real CLI (``python -m patchkit ...``). The whole module is skipped while
``ddtree_patches/v1/manifest.toml`` does not exist; a row whose edit is not filled in yet is skipped
with that reason. To fill a row: pick an added line in a patch, keep the edit on that one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import git
import pytest
from tests.verify.verify_helpers import REPO

V1 = REPO / "ddtree_patches" / "v1"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (V1 / "manifest.toml").is_file(),
                       reason="ddtree_patches/v1/manifest.toml is absent: the real v1 set has not landed yet"),
]

EDITED = "edited"  # `where`: the finding must name the edited file and the edited line


@dataclass(frozen=True)
class Defect:
    """One seeded defect: a one-line edit of an added line, and the gate that must catch it."""

    name: str
    gate: str
    patch: str | None = None  # glob of the patch file inside the set, e.g. "0003-*.patch"
    old: str | None = None  # text on exactly one added ("+") line of that patch
    new: str | None = None  # its replacement (no newline: line numbers stay put)
    where: str = EDITED  # EDITED, or a path glob (tree-relative, or set-relative for the tests and backend gates)
    anchor: str | None = None  # with a path `where`: the set file's line holding this text is the one meant
    start: str | None = None  # the finding names the statement holding that line: its last line above with this text
    message: str = ""  # a fragment the catching finding's message must contain

    @property
    def ready(self) -> bool:
        return None not in (self.patch, self.old, self.new)


# One row per defect class of issue 4; rows without patch/old/new are skipped with a reason.
DEFECTS = (
    Defect("syntax error", "compile", "0002-*.patch", "    DDTREE_VERIFY = auto()", "    DDTREE_VERIFY = auto(",
           message="does not compile on Python 3.11: SyntaxError: '(' was never closed"),
    # ddtree_info imports a helper that ddtree_utils does not define
    Defect("phantom import", "xref", "0008-*.patch", "    ddtree_follow_verified,", "    ddtree_follow_verified_path,",
           message="ddtree_utils neither defines nor re-exports ddtree_follow_verified_path"),
    # the warmup's DDTreeVerifyInput(...) in the CUDA graph runner passes a keyword the dataclass lacks
    Defect("wrong keyword", "xref", "0005-*.patch", "custom_mask=self.buffers.custom_mask,",
           "custom_masks=self.buffers.custom_mask,", start="spec_info = DDTreeVerifyInput(",
           message="call to DDTreeVerifyInput(): got an unexpected keyword argument 'custom_masks'"),
    Defect("missing enum member", "xref", "0002-*.patch", "SpecInputType.DDTREE_VERIFY,", "SpecInputType.DDTREE_VERIFYX,",
           message="SpecInputType has no enum member DDTREE_VERIFYX"),
    # DFlashWorker logs a misspelled attribute that __init__ never assigns
    Defect("unassigned self attribute", "xref", "0009-*.patch", "self.ddtree_budget + 1,", "self.ddtree_budgt + 1,",
           message="self.ddtree_budgt is read in DFlashWorker but never assigned"),
    # the verify input is defined under a name that no caller constructs
    Defect("never-instantiated class", "xref", "0008-*.patch", "class DDTreeVerifyInput(SpecInput):",
           "class DDTreeVerifyInputs(SpecInput):",
           message="family class DDTreeVerifyInputs is defined but never instantiated"),
    # the scheduler's per-request DFlash validation stops covering DDTREE
    Defect("dispatch site loses its DDTREE branch", "dispatch", "0006-*.patch",
           "        if self.spec_algorithm.is_dflash_family():", "        if self.spec_algorithm.is_dflash():",
           message="undeclared dispatch site in Scheduler.handle_generate_request: `self.spec_algorithm.is_dflash()`"),
    # DDTREE's default backend on a FlashInfer host turns into fa3, which drops the tree mask at topk 1 and is
    # refused by the tree's own DDTREE backend check: every default case on such a host stops resolving
    Defect("backend choice ignores the tree mask", "backend", "0003-*.patch",
           '            return "flashinfer"', '            return "fa3"',
           where="expectations/backend.toml", anchor='name = "hopper-fi-default"', start="[[case]]",
           message="attention backend 'fa3' does not apply the tree mask"),
    Defect("algorithm bug only the set's tests see", "tests", "0001-*.patch",
           "return torch.cumsum(x, dim=-1) - x", "return torch.cumsum(x, dim=-1)", where="tests/*.py"),
    Defect("runtime import error", "imports", "0001-*.patch", "DDTREE_GREEDY_TEMPERATURE = 1e-5",
           "DDTREE_GREEDY_TEMPERATURE = 1e-5 / 0", message="ddtree_utils failed: ZeroDivisionError"),
)

#: An existing folder of verify environments to reuse (creating the pinned CPU env takes minutes).
SHARED_ENVS = os.environ.get("PATCHKIT_SEEDED_ENV_DIR")


# ---------------------------------------------------------------- the CLI steps (adjust here if the core's CLI differs)


def patchkit(*args: object, home: Path, check_codes: tuple[int, ...] | None = (0,)) -> subprocess.CompletedProcess:
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PATCHKIT_HOME": str(home), "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=1800)
    if check_codes is not None:
        assert done.returncode in check_codes, f"patchkit {args[0]} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def fetch_base(set_dir: Path, dest: Path, home: Path) -> None:
    patchkit("base", "fetch", "--set", set_dir, "--dest", dest, home=home)


def lock(set_dir: Path, home: Path, base: Path) -> None:
    patchkit("lock", "--set", set_dir, "--base", base, home=home)


def apply(set_dir: Path, target: Path, home: Path) -> None:
    patchkit("apply", "--set", set_dir, "--target", target, home=home)


def verify(set_dir: Path, target: Path, home: Path, gates: tuple[str, ...] = ()) -> tuple[int, dict]:
    selected = [arg for gate in gates for arg in ("--gate", gate)]
    # --allow-drift: a seeded edit can turn a + line into its own - line, so git commits a smaller change
    # than the patch text and status calls that commit DIFFERS; the tree is still the edited set's post-image
    done = patchkit("verify", "--set", set_dir, "--target", target, *selected, "--json", "--allow-drift", home=home,
                    check_codes=None)
    return done.returncode, json.loads(done.stdout)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def seeded_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One PATCHKIT_HOME for the suite: the verify environment and the base are built once."""
    home = tmp_path_factory.mktemp("seeded-home")
    if SHARED_ENVS:
        (home / "envs").symlink_to(Path(SHARED_ENVS).resolve())
    return home


@pytest.fixture(scope="session")
def pristine_base(seeded_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("seeded-base") / "tree"
    fetch_base(V1, base, seeded_home)
    return base


def fresh_tree(pristine: Path, dest: Path) -> Path:
    git.Repo(pristine).clone(dest)
    return dest


def seeded_set(defect: Defect, dest: Path) -> tuple[Path, str, str]:
    """A copy of v1 with the defect's edit; returns the set, the edited tree file and the new line's text."""
    shutil.copytree(V1, dest)
    matches = sorted(dest.glob(defect.patch))
    assert len(matches) == 1, f"{defect.patch!r} matches {len(matches)} patches in v1"
    patch = matches[0]
    lines = patch.read_text().splitlines(keepends=True)
    current_file, hits = None, []
    for index, line in enumerate(lines):
        if line.startswith("+++ "):
            current_file = line[4:].strip().removeprefix("b/")
        elif line.startswith("+") and defect.old in line:
            hits.append((index, current_file))
    assert len(hits) == 1, f"{defect.old!r} is on {len(hits)} added lines of {patch.name}; make it unique"
    index, tree_file = hits[0]
    lines[index] = lines[index].replace(defect.old, defect.new)
    patch.write_text("".join(lines))
    return dest, tree_file, lines[index][1:].rstrip("\n")


def line_of(path: Path, text: str) -> int:
    numbers = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line == text]
    assert len(numbers) == 1, f"the edited line occurs {len(numbers)} times in {path}"
    return numbers[0]


def located(path: Path, line: int, start: str | None) -> int:
    """``line``, or with ``start`` the last line at or above it holding ``start`` (a multi-line statement's first)."""
    if start is None:
        return line
    head = path.read_text().splitlines()[:line]
    return max(n for n, text in enumerate(head, 1) if start in text)


def anchored_line(path: Path, anchor: str) -> int:
    numbers = [n for n, line in enumerate(path.read_text().splitlines(), 1) if anchor in line]
    assert len(numbers) == 1, f"{anchor!r} occurs on {len(numbers)} lines of {path}"
    return numbers[0]


# ---------------------------------------------------------------- tests


def test_clean_v1_passes_every_gate(pristine_base, seeded_home, tmp_path):
    tree = fresh_tree(pristine_base, tmp_path / "tree")
    apply(V1, tree, seeded_home)
    code, doc = verify(V1, tree, seeded_home)
    blocking = [f for g in doc["result"]["gates"] for f in g["findings"] if f["severity"] in ("error", "warning")]
    crashed = [g["gate"] for g in doc["result"]["gates"] if g["status"] == "crash"]
    assert (code, blocking, crashed) == (0, [], []), json.dumps(doc, indent=1)[-6000:]


@pytest.mark.parametrize("defect", DEFECTS, ids=[d.name for d in DEFECTS])
def test_seeded_defect_is_caught_by_its_gate(defect, pristine_base, seeded_home, tmp_path):
    if not defect.ready:
        pytest.skip(f"seeded edit for {defect.name!r} is not filled in yet (DEFECTS table)")
    set_dir, tree_file, new_line = seeded_set(defect, tmp_path / "set")
    lock(set_dir, seeded_home, pristine_base)
    tree = fresh_tree(pristine_base, tmp_path / "tree")
    apply(set_dir, tree, seeded_home)
    code, doc = verify(set_dir, tree, seeded_home, (defect.gate,))
    (run,) = doc["result"]["gates"]
    errors = [f for f in run["findings"] if f["severity"] == "error"]
    assert code == 1 and run["status"] == "fail" and errors, json.dumps(doc, indent=1)[-4000:]
    if defect.where == EDITED:
        expected = (tree_file, located(tree / tree_file, line_of(tree / tree_file, new_line), defect.start))
        caught = [f for f in errors if (f["file"], f["line"]) == expected]
    elif defect.anchor:
        where = set_dir / defect.where
        expected = (defect.where, located(where, anchored_line(where, defect.anchor), defect.start))
        caught = [f for f in errors if (f["file"], f["line"]) == expected]
    else:
        expected = defect.where
        caught = [f for f in errors if Path(f["file"]).match(defect.where) and f["line"]]
    assert any(defect.message in f["message"] for f in caught), (expected, defect.message, errors)
