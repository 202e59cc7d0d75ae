"""Kill apply and refresh at random points, edit the tree, and check that no user
byte is ever lost.

Each round takes a fresh target, starts a real ``patchkit apply`` (or ``refresh``), stops it with a
random signal (SIGKILL, SIGTERM, SIGINT to the whole group) at a random moment (a random delay, or a
random named step of the commit), writes random bytes into a random file the way a user would (a file
the series changes, one it deletes, one it does not touch, a new file), then runs what a user runs
next (``status``, then the command again). Invariants:

- every file the user wrote still holds exactly the user's bytes;
- patchkit never exits 3 and never leaves its temporary files in the tree;
- the set directory is the old set or the new one, never a mix (refresh rounds).

The default run is bounded by ``PATCHKIT_PROPERTY_S`` seconds (default 6: one or two rounds, a new
random seed each run, printed on failure); ``-m slow`` runs the long variant (120 s, or the variable).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from patchkit.patchset.series import load_set
from tests.patchset import helpers

EDITABLE = ["pkg/util.py", "pkg/gone.py", "pkg/core.py", "README.txt", "notes/new.txt", "pkg/extra.py"]
APPLY_STEPS = ["staged-1", "staged-3", "journal", "ref-moved", "wrote-1", "wrote-3", "wrote-5"]
REFRESH_STEPS = ["set-written-aside", "set-journal", "set-renamed-1", "set-renamed-2"]
SIGNALS = [signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGINT]


@dataclass
class Round:
    seed: int
    command: str
    moment: str
    signum: int
    edited: str


def _stop(proc, signum: int) -> None:
    if proc.poll() is not None:
        return
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    else:
        proc.send_signal(signum)


def _start(rng: random.Random, args: tuple[str, ...], steps: list[str]):
    """The process and a description of the moment it will be stopped at."""
    if rng.random() < 0.5:
        step = rng.choice(steps)
        try:
            return helpers.start_paused(*args, step=step, seconds=0.3, new_session=True), f"step {step}"
        except AssertionError:  # it finished (or refused) before reaching that step
            pass
    proc = helpers.start_paused(*args, step="startup", seconds=0, new_session=True)
    delay = rng.uniform(0.0, 1.5)
    time.sleep(delay)
    return proc, f"{delay:.2f} s after start"


def _user_edit(rng: random.Random, target: Path) -> tuple[str, bytes]:
    rel = rng.choice(EDITABLE)
    data = f"user bytes {rng.getrandbits(64):x}\n".encode() * rng.randint(1, 4)
    path = target / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return rel, data


def _check_after(target: Path, rel: str, data: bytes, outputs: list) -> None:
    assert (target / rel).read_bytes() == data, "a user byte was lost"
    for code, out, err in outputs:
        assert code in (0, 1, 2, 130), out + err
        assert "Traceback" not in err
    leftovers = [p for p in target.rglob(".patchkit-tmp-*") if ".git" not in p.parts]
    assert not leftovers, leftovers


def _apply_round(rng: random.Random, fx, fresh: Path, record: Round) -> None:
    args = ("apply", "--set", str(fx.set_dir), "--target", str(fresh))
    proc, record.moment = _start(rng, args, APPLY_STEPS)
    _stop(proc, record.signum)
    outputs = [helpers.finish(proc)]
    record.edited, data = _user_edit(rng, fresh)
    for again in (("status", *args[1:]), args):
        done = helpers.run_cli(*again)
        outputs.append((done.returncode, done.stdout, done.stderr))
    _check_after(fresh, record.edited, data, outputs[1:])
    assert outputs[0][0] in (0, 1, 2, 130, -signal.SIGKILL), outputs[0]


def _refresh_round(rng: random.Random, fx, fresh: Path, set_dir: Path, record: Round) -> None:
    apply = ("apply", "--set", str(set_dir), "--target", str(fresh))
    assert helpers.run_cli(*apply).returncode == 0
    (fresh / "pkg/sixth.py").write_text(f"SIX = {rng.randint(0, 99)}\n")
    helpers.commit_all(helpers.Repo(fresh), "Add a sixth module\n", "2026-03-01T00:00:00+0000")
    before = helpers.set_snapshot(set_dir)
    args = ("refresh", "--set", str(set_dir), "--target", str(fresh))
    proc, record.moment = _start(rng, args, REFRESH_STEPS)
    _stop(proc, record.signum)
    outputs = [helpers.finish(proc)]
    record.edited, data = _user_edit(rng, fresh)
    done = helpers.run_cli(*args)  # refuses: the tree has the user's uncommitted edit
    outputs.append((done.returncode, done.stdout, done.stderr))
    _check_after(fresh, record.edited, data, outputs[1:])
    load_set(set_dir)  # the set is whole: it matches its lock (an interrupted write is rolled forward)
    visible = {k: v for k, v in helpers.set_snapshot(set_dir).items() if not k.startswith(".patchkit")}
    assert visible == before or "0006-Add-a-sixth-module.patch" in visible, "old set or new set, never a mix"


def _run_rounds(fx, tmp_path, budget_s: float) -> list[Round]:
    seed = int(os.environ.get("PATCHKIT_PROPERTY_SEED", random.SystemRandom().randrange(1 << 30)))
    rng = random.Random(seed)
    base = tmp_path / "base"
    shutil.copytree(fx.target, base, symlinks=True)
    rounds: list[Round] = []
    deadline = time.monotonic() + budget_s
    while not rounds or time.monotonic() < deadline:
        record = Round(seed=seed, command=rng.choice(["apply", "apply", "refresh"]), moment="",
                       signum=rng.choice(SIGNALS), edited="")
        fresh = tmp_path / f"round-{len(rounds)}"
        shutil.copytree(base, fresh, symlinks=True)
        try:
            if record.command == "apply":
                _apply_round(rng, fx, fresh, record)
            else:
                set_copy = helpers.copy_set(fx.set_dir, tmp_path / f"set-{len(rounds)}")
                _refresh_round(rng, fx, fresh, set_copy, record)
        except AssertionError as failure:
            raise AssertionError(f"{failure}\nround {record} (PATCHKIT_PROPERTY_SEED={seed} repeats it)") from None
        rounds.append(record)
    return rounds


def test_no_user_byte_is_lost_when_apply_and_refresh_are_killed_at_random(fx, tmp_path):
    rounds = _run_rounds(fx, tmp_path, float(os.environ.get("PATCHKIT_PROPERTY_S", "6")))
    assert rounds


@pytest.mark.slow
def test_no_user_byte_is_lost_long_run(fx, tmp_path):
    rounds = _run_rounds(fx, tmp_path, float(os.environ.get("PATCHKIT_PROPERTY_S", "120")))
    for r in rounds:  # shown with -s: what the run covered
        print(f"{r.command:<8} {signal.Signals(r.signum).name:<8} {r.moment:<22} edited {r.edited}")
    assert len(rounds) >= 5
