"""The seeded-defect suite: proof that each gate catches the defect class it exists for, at the line.

For every row of ``DEFECTS``: edit ONE added line of one v1 patch (``old`` -> ``new``, same line
count), realise the edited set's file in a shared tree with v1 applied (``corpus/seeding.py``: the
file is rebuilt from the base through every patch that touches it, the edited one included, so it is
byte-for-byte what ``patchkit apply`` of the edited set writes), run the row's gate in process and
require an error finding naming the expected file and line, with the row's message fragment. The
clean set must pass every gate with no error or warning finding.

Speed: one patchkit home, base and applied tree for the session; gates run in process; the
``tests`` row runs the one set test that catches its defect. Every row is marked ``slow`` (the fast
suite stays fast; .ci/run runs ``pytest -m slow`` after it): the static gates' rows (compile, xref,
dispatch) need no environment but fetch the base and apply v1, the rest and the clean run of every
gate need the pinned verify environment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.verify.corpus.fixtures import V1, clean_tree, context, patchkit, pristine_base, run_one, seeded_home  # noqa: F401
from tests.verify.corpus.seeding import Edit, realise, seeded

pytestmark = pytest.mark.skipif(not (V1 / "manifest.toml").is_file(), reason="ddtree_patches/v1 is absent")

EDITED = "edited"  # `where`: the finding must name the edited file and the edited line
STATIC = ("compile", "xref", "dispatch")


@dataclass(frozen=True)
class Defect:
    """One seeded defect: a one-line edit of an added line, and the gate that must catch it."""

    name: str
    gate: str
    patch: str  # glob of the patch file inside the set, e.g. "0003-*.patch"
    old: str  # text on exactly one added ("+") line of that patch (or the `occurrence`-th)
    new: str  # its replacement (no newline: line numbers stay put)
    message: str  # a fragment the catching finding's message must contain
    where: str = EDITED  # EDITED, or a set-relative file (the finding is there, at `anchor`'s line)
    anchor: str | None = None  # with a file `where`: the text on the line meant
    line_offset: int = 0  # the finding names the edited line + this (a def below its lost decorator)
    occurrence: int | None = None
    config: dict[str, dict[str, Any]] = field(default_factory=dict)  # [verify.<gate>] overrides

    @property
    def edit(self) -> Edit:
        return Edit(self.name, self.patch, self.old, self.new, self.occurrence, self.gate)


# One row per defect class: the first ten at the set's own sites, then those at new sites.
DEFECTS = (
    Defect("syntax error", "compile", "0002-*.patch", "    DDTREE_VERIFY = auto()", "    DDTREE_VERIFY = auto(",
           "SyntaxError: '(' was never closed"),  # one finding naming every Python it fails on
    # ddtree_info imports a helper that ddtree_utils does not define
    Defect("phantom import", "xref", "0008-*.patch", "    ddtree_follow_verified,", "    ddtree_follow_verified_path,",
           "ddtree_utils neither defines nor re-exports ddtree_follow_verified_path"),
    # the warmup's DDTreeVerifyInput(...) in the CUDA graph runner passes a keyword the dataclass lacks
    Defect("wrong keyword", "xref", "0005-*.patch", "custom_mask=self.buffers.custom_mask,",
           "custom_masks=self.buffers.custom_mask,",
           "call to DDTreeVerifyInput(): got an unexpected keyword argument 'custom_masks'"),
    Defect("missing enum member", "xref", "0002-*.patch", "SpecInputType.DDTREE_VERIFY,", "SpecInputType.DDTREE_VERIFYX,",
           "SpecInputType has no enum member DDTREE_VERIFYX"),
    # DFlashWorker logs a misspelled attribute that __init__ never assigns
    Defect("unassigned self attribute", "xref", "0009-*.patch", "self.ddtree_budget + 1,", "self.ddtree_budgt + 1,",
           "self.ddtree_budgt is read in DFlashWorker but never assigned"),
    # the verify input is defined under a name that no caller constructs
    Defect("never-instantiated class", "xref", "0008-*.patch", "class DDTreeVerifyInput(SpecInput):",
           "class DDTreeVerifyInputs(SpecInput):", "family class DDTreeVerifyInputs is defined but never instantiated"),
    # the scheduler's per-request DFlash validation stops covering DDTREE
    Defect("dispatch site loses its DDTREE branch", "dispatch", "0006-*.patch",
           "        if self.spec_algorithm.is_dflash_family():", "        if self.spec_algorithm.is_dflash():",
           "undeclared dispatch site in Scheduler.handle_generate_request: `self.spec_algorithm.is_dflash()`"),
    # DDTREE's default backend on a FlashInfer host turns into fa3, which the tree's own DDTREE check
    # refuses: every default case on such a host stops resolving; the case row names the expectation
    # and a second finding names the added line it traces back to (the edited one)
    Defect("backend choice ignores the tree mask", "backend", "0003-*.patch",
           '            return "flashinfer"', '            return "fa3"',
           "backend case failure traces back to this added line"),
    Defect("algorithm bug only the set's tests see", "tests", "0001-*.patch",
           "return torch.cumsum(x, dim=-1) - x", "return torch.cumsum(x, dim=-1)", "failed (call)",
           where="ddtree_utils_tests/test_builder_vs_heap.py",
           config={"tests": {"path": "../common/ddtree_utils_tests/test_builder_vs_heap.py"}}),
    Defect("runtime import error", "imports", "0001-*.patch", "DDTREE_GREEDY_TEMPERATURE = 1e-5",
           "DDTREE_GREEDY_TEMPERATURE = 1e-5 / 0", "ddtree_utils failed: ZeroDivisionError"),
    # ---- the definition behind every family site, and membership collections
    Defect("family helper stops covering DFLASH", "dispatch", "0002-*.patch",
           "return self in (SpeculativeAlgorithm.DFLASH, SpeculativeAlgorithm.DDTREE)",
           "return self in (SpeculativeAlgorithm.DDTREE,)",
           "family helper SpeculativeAlgorithm.is_dflash_family() is true for DDTREE, but [verify.dispatch] families"),
    Defect("reserved names list DDTREE twice", "dispatch", "0002-*.patch", '"NONE",', '"DDTREE",',
           '`"DDTREE"` is listed twice in the dispatch site <module>'),
    # ---- class 2: the CUDA-graph capture path, called on CPU
    Defect("capture takes topk 1 instead of the server's", "calls", "0005-*.patch",
           "topk=self.model_runner.server_args.speculative_eagle_topk,", "topk=1,", "`result.topk == 8` is false"),
    Defect("replay guard never fires", "calls", "0005-*.patch", "            self.is_ddtree_target_verify\n",
           "            not self.is_ddtree_target_verify\n", "expected an error containing 'requires the tree custom_mask'",
           line_offset=-1),  # the guard's `if (` line, the first line of the statement the edit is in
    # ---- class 3: the command line
    Defect("flag stores into a field that does not exist", "backend", "0003-*.patch",
           '"--speculative-ddtree-budget",', '"--speculative-ddtree-budgets",',
           "--speculative-ddtree-budgets stores into args.speculative_ddtree_budgets, which is not a ServerArgs field"),
    # ---- class 4: backend cases written by hand; the generated matrix has the decode-only choices
    Defect("decode refusal names the prefill flag", "backend", "0003-*.patch", '"--decode-attention-backend",',
           '"--prefill-attention-backend",', "refused, but the error names neither --decode-attention-backend",
           where="expectations/backend.toml", anchor="[matrix]"),
    # ---- class 5: request gates
    Defect("logprob gate lets the request through", "calls", "0006-*.patch",
           'return f"{algorithm} speculative decoding does not support return_logprob yet."', "return None",
           "a DDTREE request with return_logprob is refused"),
    # ---- class 6: names outside the DDTree family
    Defect("self attribute no class defines", "xref", "0005-*.patch",
           "draft_token_num=self.speculative_num_draft_tokens,", "draft_token_num=self.speculative_num_draft_token,",
           "self.speculative_num_draft_token is read in CudaGraphRunner, but neither CudaGraphRunner nor its bases"),
    Defect("misspelt field of a typed parameter", "xref", "0009-*.patch",
           "topk_cap = server_args.speculative_ddtree_topk_cap", "topk_cap = server_args.speculative_ddtree_topkcap",
           "`server_args.speculative_ddtree_topkcap` reads speculative_ddtree_topkcap, which ServerArgs"),
    # ---- class 7: precision
    Defect("dropped @property", "xref", "0001-*.patch", "    @property", "", "max_depth() is a method without @property",
           occurrence=3, line_offset=1),
    Defect("set test fails through an added line", "tests", "0008-*.patch",
           "tree.node_token_ids.to(torch.int64),", "tree.node_tokens.to(torch.int64),",
           "fails through this added line", config={"tests": {"path": "tests/integration/test_ddtree_info.py"}}),
)


def _ids(rows: tuple[Defect, ...]) -> list[str]:
    return [row.name for row in rows]


def expected_place(defect: Defect, tree_file: str, line: int) -> tuple[str, int]:
    if defect.where == EDITED:
        return tree_file, line + defect.line_offset
    path = V1 / defect.where
    if defect.anchor is None:
        return defect.where, 0  # any line of that file
    numbers = [n for n, text in enumerate(path.read_text().splitlines(), 1) if text.strip() == defect.anchor
               or defect.anchor in text]
    assert len(numbers) == 1, f"{defect.anchor!r} occurs on {len(numbers)} lines of {path}"
    return defect.where, numbers[0]


def check_row(defect: Defect, tree: Path, home: Path) -> None:
    seed = realise(V1, tree, defect.edit)
    with seeded(tree, seed):
        run = run_one(context(tree, home, defect.config), defect.gate)
    assert run.status == "fail", (run.status, run.traceback, run.findings)
    errors = [f for f in run.findings if f.severity.value == "error"]
    file, line = expected_place(defect, seed.file, seed.line)
    if line:
        caught = [f for f in errors if (f.file, f.line) == (file, line)]
    else:
        caught = [f for f in errors if Path(f.file).match(file) and f.line]
    assert any(defect.message in f.message for f in caught), ((file, line), defect.message,
                                                               [(f.file, f.line, f.message[:200]) for f in errors])


@pytest.mark.slow
@pytest.mark.parametrize("defect", [d for d in DEFECTS if d.gate in STATIC], ids=_ids(tuple(d for d in DEFECTS if d.gate in STATIC)))
def test_static_gate_catches_its_seeded_defect(defect, clean_tree, seeded_home):  # noqa: F811
    check_row(defect, clean_tree, seeded_home)


@pytest.mark.slow
@pytest.mark.parametrize("defect", [d for d in DEFECTS if d.gate not in STATIC],
                         ids=_ids(tuple(d for d in DEFECTS if d.gate not in STATIC)))
def test_environment_gate_catches_its_seeded_defect(defect, clean_tree, seeded_home, request):  # noqa: F811
    if defect.name in PRECISION_GAPS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=PRECISION_GAPS[defect.name]))
    check_row(defect, clean_tree, seeded_home)


#: Rows caught with an error (so verify fails) but not yet at the defect's own line: strict xfail, so the
#: row turns red the day the trace-back reaches the line and this entry must go.
PRECISION_GAPS: dict[str, str] = {}


@pytest.mark.slow
def test_clean_v1_passes_every_gate(clean_tree, seeded_home):  # noqa: F811
    """The whole command's core on the clean tree: every gate passes, nothing warns, nothing crashed."""
    import os

    from patchkit.checks.registry import GATES
    from patchkit.verify.run import verify

    old = os.environ.get("PATCHKIT_HOME")
    os.environ["PATCHKIT_HOME"] = str(seeded_home)
    try:
        result = verify(V1, clean_tree, registry=GATES)
    finally:
        os.environ["PATCHKIT_HOME"] = old or ""
    blocking = [(f.gate, f.file, f.line, f.message) for f in result.findings() if f.severity.value in ("error", "warning")]
    crashed = [run.gate for run in result.gates if run.status == "crash"]
    assert (result.exit_code, blocking, crashed) == (0, [], []), json.dumps(blocking, indent=1)[-6000:]


@pytest.mark.slow
def test_the_static_rows_run_through_the_real_cli_too(clean_tree, seeded_home, tmp_path):  # noqa: F811
    """One row end to end, as a user would: the edited set locked and applied by the CLI, then
    ``patchkit verify --gate`` with --json: the same finding at the same place as in process."""
    import shutil
    import subprocess

    from tests.verify.corpus.seeding import _edited_patch

    defect = next(d for d in DEFECTS if d.name == "misspelt field of a typed parameter")
    set_dir = tmp_path / "set"
    shutil.copytree(V1, set_dir)
    name, edited, _ = _edited_patch(V1, defect.edit)
    (set_dir / name).write_text(edited)
    base = tmp_path / "base"
    subprocess.run(["git", "clone", "-q", str(Path(clean_tree)), str(base)], check=True)
    root = subprocess.run(["git", "-C", str(base), "rev-list", "--max-parents=0", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.split()[-1]
    subprocess.run(["git", "-C", str(base), "checkout", "-q", "-B", "patchkit", root], check=True)
    patchkit("lock", "--set", set_dir, "--base", base, home=seeded_home)
    patchkit("apply", "--set", set_dir, "--target", base, home=seeded_home)
    done = patchkit("verify", "--set", set_dir, "--target", base, "--gate", "xref", "--json",
                    "--allow-drift", home=seeded_home, check=False)
    doc = json.loads(done.stdout)
    seed = realise(V1, clean_tree, defect.edit)
    assert done.returncode == 1 and (base / seed.file).read_bytes() == seed.content
    (run,) = [gate for gate in doc["result"]["gates"] if gate["gate"] == "xref"]  # the load check's row aside
    assert any((f["file"], f["line"]) == (seed.file, seed.line) and defect.message in f["message"]
               for f in run["findings"]), run["findings"]
