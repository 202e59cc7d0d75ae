"""Fixtures for the smoke tests: a patch set, a patched target tree holding the stand-in ``sglang``,
model directories, a free port, and a runner for the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # importable without an install, as the subprocess tests run it
    sys.path.insert(0, str(REPO_ROOT))
STANDIN = REPO_ROOT / "tests" / "fixtures" / "sglang_standin" / "sglang"
SET_ID = "ddtree@1"

#: The set's [base]: make_target's root commit is what `patchkit base fetch` makes of this wheel, so the
#: engine's own definition (patchset.state) finds the base and the set's commits on top of it.
BASE_TABLES = """\
[base]
kind = "pypi"

[base.pypi]
package = "sglang"
version = "0.5.12"
wheel = "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl"
sha256 = "4ed786a38655851fd055ef57380c34d29b87753b53f63457309f51e5bf48c2e6"
layout = { "sglang/" = "python/sglang/" }
"""
BASE_MESSAGE = "base: sglang 0.5.12, wheel sha256 4ed786a38655851fd055ef57380c34d29b87753b53f63457309f51e5bf48c2e6"

#: A manifest's human part up to its tool tables: [set] (as ddtree@1) and [base].
SET_HEADER = """\
[set]
name = "ddtree"
version = "1"
description = "a set for the smoke and bench tests"

""" + BASE_TABLES

MANIFEST = SET_HEADER + """
[smoke]
prompts = "smoke/prompts.jsonl"
max_new_tokens = 12
startup_timeout_s = 20
request_timeout_s = 3
grace_period_s = 1
server_args = ["--dtype", "bfloat16", "--random-seed", "0"]
baseline_args = []
profile_args = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "8"]
"""

PROMPTS = [
    {"id": "short", "input_ids": [5]},
    {"id": "mid", "input_ids": [1, 2, 3, 4, 5, 6, 7]},
    {"id": "long", "input_ids": list(range(10, 40))},
    {"id": "words", "text": "The capital of France is"},
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def make_target(root: Path, trailer: str | None) -> Path:
    """A git tree with the stand-in as ``python/sglang``; ``trailer`` marks it patched by a set."""
    root.mkdir(parents=True)
    shutil.copytree(STANDIN, root / "python" / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", BASE_MESSAGE)
    if trailer:  # one patch commit as `patchkit apply` writes it: the set's trailer, then the patch's
        (root / "python" / "sglang" / "ddtree.py").write_text("# patched\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"Apply ddtree v1\n\n{trailer}\nPatchkit-Patch: 0001-standin.patch")
    return root


def make_model(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    return path


@dataclass
class Outcome:
    code: int
    doc: dict | None
    stdout: str
    stderr: str


@dataclass
class SmokeEnv:
    tmp: Path
    set_dir: Path
    target: Path
    model: Path
    draft: Path
    logs: Path
    port: int
    env: dict = field(default_factory=dict)

    def argv(self, *extra: str, as_json: bool = True) -> list[str]:
        argv = [sys.executable, "-m", "patchkit", "smoke", "--set", str(self.set_dir), "--target",
                str(self.target), "--gpus", "0", "--model", str(self.model), "--draft-model",
                str(self.draft), "--port", str(self.port), "--logs", str(self.logs)]
        return argv + (["--json"] if as_json else []) + list(extra)

    def process_env(self, **faults: str) -> dict:
        return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATCHKIT_HOME": str(self.tmp / "home"),
                **self.env, **{f"SGLANG_STANDIN_{k.upper()}": str(v) for k, v in faults.items()}}

    def run(self, *extra: str, as_json: bool = True, timeout: float = 60, **faults: str) -> Outcome:
        done = subprocess.run(self.argv(*extra, as_json=as_json), env=self.process_env(**faults),
                              capture_output=True, text=True, timeout=timeout, cwd=self.tmp)
        doc = json.loads(done.stdout) if as_json and done.stdout.strip().startswith("{") else None
        return Outcome(done.returncode, doc, done.stdout, done.stderr)

    def start(self, *extra: str, **faults: str) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*extra), env=self.process_env(**faults), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=self.tmp)

    def server_pids(self) -> set[int]:
        """Every pid the stand-in servers logged (main process and workers)."""
        pids: set[int] = set()
        for log in self.logs.glob("*.log"):
            pids |= {int(p) for p in re.findall(r"standin: (?:main|worker) pid (\d+)", log.read_text())}
        return pids

    def wait_for_log(self, role: str, text: str, timeout: float = 20) -> None:
        log = self.logs / f"{role}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.is_file() and text in log.read_text():
                return
            time.sleep(0.05)
        raise AssertionError(f"{text!r} never appeared in {log}")


def alive(pids: set[int]) -> set[int]:
    """The pids that still run (zombies count as gone: they hold no memory or GPU)."""
    result = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                result.add(pid)
        except psutil.NoSuchProcess:
            pass
    return result


@pytest.fixture(autouse=True)
def _no_home(tmp_path, monkeypatch):
    """Tests never touch the real home directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "fake-home"))


@pytest.fixture
def smoke_env(tmp_path) -> SmokeEnv:
    set_dir = tmp_path / "set"
    (set_dir / "smoke").mkdir(parents=True)
    (set_dir / "manifest.toml").write_text(MANIFEST)
    (set_dir / "smoke" / "prompts.jsonl").write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    env = SmokeEnv(
        tmp=tmp_path, set_dir=set_dir, target=make_target(tmp_path / "target", f"Patchkit-Set: {SET_ID}"),
        model=make_model(tmp_path / "model"), draft=make_model(tmp_path / "draft"),
        logs=tmp_path / "logs", port=free_port(),
    )
    yield env
    # Safety net only: a test that left processes alive has already failed its own assertion.
    for pid in alive(env.server_pids()):
        with_suppressed_kill(pid)


def with_suppressed_kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
