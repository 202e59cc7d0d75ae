"""Fixtures for the bench tests: a set with a ``[bench]`` profile, the stand-in server in a patched
target, tiny model directories, and the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.smoke.conftest import PROMPTS, SET_HEADER, REPO_ROOT, SET_ID, alive, free_port, make_model, make_target, with_suppressed_kill

MANIFEST = SET_HEADER + """
[smoke]
prompts = "smoke/prompts.jsonl"
max_new_tokens = 12
startup_timeout_s = 20
request_timeout_s = 5
grace_period_s = 1
server_args = ["--dtype", "bfloat16", "--random-seed", "0"]
baseline_args = []
profile_args = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "8"]

[bench]
budgets = [8, 16]
concurrency = [1, 4]
repeats = 2
warmup = 1
max_new_tokens = 12
max_budget = 256
max_concurrency = 16

[[bench.variants]]
name = "baseline"
kind = "baseline"
args = []

[[bench.variants]]
name = "dflash"
kind = "chain"
args = ["--speculative-algorithm", "DFLASH"]

[[bench.variants]]
name = "ddtree"
kind = "tree"
args = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "{budget}"]
"""
DRAFT_BLOCK = 8


@dataclass
class Outcome:
    code: int
    doc: dict | None
    stdout: str
    stderr: str


@dataclass
class BenchEnv:
    tmp: Path
    set_dir: Path
    target: Path
    model: Path
    draft: Path
    port: int

    def argv(self, *extra: str, logs: Path | None = None, as_json: bool = True) -> list[str]:
        argv = [sys.executable, "-m", "patchkit", "bench", "--set", str(self.set_dir), "--target", str(self.target),
                "--gpus", "0", "--model", str(self.model), "--draft-model", str(self.draft), "--port", str(self.port),
                "--logs", str(logs or self.tmp / "logs")]
        return argv + (["--json"] if as_json else []) + list(extra)

    def run(self, *extra: str, logs: Path | None = None, as_json: bool = True, timeout: float = 120,
            env: dict | None = None, **faults: str) -> Outcome:
        process_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATCHKIT_HOME": str(self.tmp / "home"),
                       **(env or {}), **{f"SGLANG_STANDIN_{k.upper()}": str(v) for k, v in faults.items()}}
        done = subprocess.run(self.argv(*extra, logs=logs, as_json=as_json), env=process_env, capture_output=True,
                              text=True, timeout=timeout, cwd=self.tmp)
        doc = json.loads(done.stdout) if as_json and done.stdout.strip().startswith("{") else None
        return Outcome(done.returncode, doc, done.stdout, done.stderr)


def server_pids(logs: Path) -> set[int]:
    import re

    pids: set[int] = set()
    for log in logs.glob("*.log"):
        pids |= {int(p) for p in re.findall(r"standin: (?:main|worker) pid (\d+)", log.read_text())}
    return pids


def kernels_host(root: Path) -> dict[str, str]:
    """The environment of a host where the fa3 and flashinfer backends can run (what preflight checks for
    them): sgl_kernel with flash_ops and flash_attn, flashinfer importable, an ``nvcc`` on PATH, a writable
    JIT cache (the isolated HOME's)."""
    site, tools = root / "kernels-site", root / "cuda-bin"
    (site / "flashinfer").mkdir(parents=True, exist_ok=True)
    (site / "flashinfer" / "__init__.py").write_text("")
    (site / "sgl_kernel").mkdir(exist_ok=True)
    (site / "sgl_kernel" / "__init__.py").write_text("")
    (site / "sgl_kernel" / "flash_ops.py").write_text("LOADED = True\n")
    (site / "sgl_kernel" / "flash_attn.py").write_text("from sgl_kernel import flash_ops  # noqa: F401\n")
    tools.mkdir(exist_ok=True)
    (tools / "nvcc").write_text("#!/bin/sh\necho 'nvcc stand-in'\n")
    (tools / "nvcc").chmod(0o755)
    return {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(site)]),
            "PATH": os.pathsep.join([str(tools), os.environ.get("PATH", "")])}


def make_bench_env(root: Path) -> BenchEnv:
    set_dir = root / "set"
    (set_dir / "smoke").mkdir(parents=True)
    (set_dir / "manifest.toml").write_text(MANIFEST)
    (set_dir / "smoke" / "prompts.jsonl").write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    draft = make_model(root / "draft")
    (draft / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": DRAFT_BLOCK}))
    return BenchEnv(tmp=root, set_dir=set_dir, target=make_target(root / "target", f"Patchkit-Set: {SET_ID}"),
                    model=make_model(root / "model"), draft=draft, port=free_port())


@pytest.fixture
def bench_env(tmp_path) -> BenchEnv:
    env = make_bench_env(tmp_path)
    yield env
    for logs in tmp_path.glob("logs*"):
        for pid in alive(server_pids(logs)):
            with_suppressed_kill(pid)


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory) -> BenchEnv:
    """One environment for the tests of a module that only read a shared run's results."""
    env = make_bench_env(tmp_path_factory.mktemp("bench"))
    yield env
    for logs in env.tmp.glob("logs*"):
        for pid in alive(server_pids(logs)):
            with_suppressed_kill(pid)
