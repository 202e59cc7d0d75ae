"""Vocabulary-parallel DDTree trees across real processes (tensor parallelism on CPU).

Each rank is its own process (on CPU forked from one that imported torch once; on GPUs
spawned fresh) in a ``torch.distributed`` group (gloo on 127.0.0.1 here; NCCL on
GPUs through ``ci/gpu/tp_trees.py``, which reuses this file). Every rank holds one vocabulary shard
of the same draft logits, padded like a TP LM head (equal shard widths, the tail of the last shard
is padding and is excluded with ``num_valid``), and runs the DDTree top-K the way the worker does:
``ddtree_local_topk`` on its shard, an all-gather of (values, ids, max, sumexp) only -- never the
dense logits -- then ``ddtree_merge_topk`` and ``build_ddtree_tree_from_topk``. Every rank's tree
must equal, bit for bit, the tree that one process builds from the full logits (tp = 1).

This file imports only the standard library and torch, so it also runs as the rank worker
(``python test_tp_shard_worlds.py worker``) and as a library on a GPU host without pytest.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

#: Environment of a rank worker: the module under test and the run's JSON description.
MODULE_PATH_ENV = "DDTREE_UTILS_PATH"
RUN_SPEC_ENV = "DDTREE_TP_RUN_SPEC"
MODULE_NAME = "ddtree_utils_under_test"
#: Padding columns get a value that would win every top-K if ``num_valid`` were ignored.
PADDING_LOGIT = 1e4
TREE_FIELDS = ("node_token_ids", "depths", "parents", "num_nodes", "visibility")


@dataclass(frozen=True)
class Case:
    """One draft-logits tensor and budget; the logits are rebuilt from ``seed`` in every process."""

    seed: int
    batch: int
    depth: int
    vocab: int
    budget: int
    kind: str  # "fp32", "bf16" (bf16-rounded Gaussian) or "bf16-ties" (few distinct values)

    @property
    def k(self) -> int:
        return min(self.budget, self.vocab)


@dataclass(frozen=True)
class RankResult:
    """What one rank produced: its trees per case and how many bytes it sent to the group."""

    rank: int
    trees: tuple[dict, ...]
    topk: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    gathered_bytes: int


# V = 1001 and 203 are divisible by none of 2, 4, 8: the last shard is always padded. Case 3's
# top-K (40) is wider than an 8-way shard of 203 (26 columns), so shards return fewer candidates.
CPU_CASES = (
    Case(seed=0, batch=2, depth=6, vocab=1001, budget=16, kind="fp32"),
    Case(seed=1, batch=2, depth=6, vocab=1001, budget=48, kind="bf16"),
    Case(seed=2, batch=2, depth=8, vocab=1001, budget=64, kind="bf16-ties"),
    Case(seed=3, batch=1, depth=5, vocab=203, budget=40, kind="bf16-ties"),
    Case(seed=4, batch=3, depth=7, vocab=1001, budget=4, kind="bf16"),
)


def make_logits(case: Case) -> torch.Tensor:
    """The full ``[batch, depth, vocab]`` draft logits of a case, identical in every process."""
    gen = torch.Generator().manual_seed(case.seed)
    shape = (case.batch, case.depth, case.vocab)
    if case.kind == "fp32":
        return torch.randn(shape, generator=gen) * 3
    if case.kind == "bf16":
        return (torch.randn(shape, generator=gen) * 4).bfloat16()
    if case.kind == "bf16-ties":
        # Seven distinct values: most top-K slots are ties, many of them across shards.
        return torch.randint(-3, 4, shape, generator=gen).bfloat16()
    raise ValueError(f"unknown logits kind {case.kind!r}")


def shard_layout(vocab: int, world: int, rank: int) -> tuple[int, int, int]:
    """(first global id, padded shard width, real columns) of ``rank``'s shard, like a TP LM head."""
    width = -(-vocab // world)
    start = rank * width
    return start, width, max(0, min(width, vocab - start))


def padded_shard(logits: torch.Tensor, world: int, rank: int) -> tuple[torch.Tensor, int, int]:
    """This rank's columns of ``logits``, the tail filled with ``PADDING_LOGIT``."""
    start, width, valid = shard_layout(logits.shape[-1], world, rank)
    shard = logits[..., start : start + valid]
    return torch.nn.functional.pad(shard, (0, width - valid), value=PADDING_LOGIT), start, valid


def load_module(path: str | os.PathLike) -> ModuleType:
    """Load ``ddtree_utils.py`` by path, as the set's conftest does."""
    if MODULE_NAME in sys.modules and getattr(sys.modules[MODULE_NAME], "__file__", None) == str(path):
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def tree_to_cpu(tree) -> dict:
    fields = {name: getattr(tree, name).cpu() for name in TREE_FIELDS}
    fields["depth_limit"] = tree.depth_limit
    return fields


def reference_tree(mod: ModuleType, case: Case, device: torch.device):
    """tp = 1: top-K and tree from the full logits in one process."""
    top = mod.ddtree_topk_from_logits(make_logits(case).to(device), case.k)
    tree = mod.build_ddtree_tree_from_topk(*top, case.budget)
    return tree_to_cpu(tree), tuple(t.cpu() for t in top)


# ------------------------------------------------------------------------------------ rank worker


def _all_gather(tensor: torch.Tensor, world: int) -> torch.Tensor:
    import torch.distributed as dist

    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.stack(parts)


def sharded_tree(mod: ModuleType, case: Case, world: int, rank: int, device: torch.device):
    """This rank's tree: local top-K of its shard, gather the small statistics, merge, build."""
    shard, start, valid = padded_shard(make_logits(case), world, rank)
    stats = mod.ddtree_local_topk(shard.to(device), case.k, vocab_start=start, num_valid=valid)
    gathered = [_all_gather(t, world) for t in stats]
    sent = sum(t.numel() * t.element_size() for t in stats)
    top = mod.ddtree_merge_topk(*gathered, k=case.k)
    tree = mod.build_ddtree_tree_from_topk(*top, case.budget)
    return tree_to_cpu(tree), tuple(t.cpu() for t in top), sent


def worker_main() -> None:
    """One rank: join the group through the launcher's store, build every case's tree, save them."""
    import torch.distributed as dist

    spec = json.loads(os.environ[RUN_SPEC_ENV])
    rank, world = int(os.environ["RANK"]), spec["world"]
    torch.set_num_threads(1)  # many ranks share few cores
    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    mod = load_module(os.environ[MODULE_PATH_ENV])
    timeout = datetime.timedelta(seconds=spec["timeout_s"])
    store = dist.TCPStore("127.0.0.1", spec["port"], world + 1, False, timeout=timeout)
    dist.init_process_group(spec["backend"], store=store, rank=rank, world_size=world, timeout=timeout)
    if spec.get("fault") == f"crash:{rank}":  # the tests prove that peers blocked in a collective are reaped
        sys.exit(f"rank {rank}: injected crash")
    try:
        results = [sharded_tree(mod, Case(**c), world, rank, device) for c in spec["cases"]]
        dist.barrier(**({"device_ids": [rank]} if device.type == "cuda" else {}))
    finally:
        dist.destroy_process_group()
    trees, topk, sent = zip(*results)
    torch.save(RankResult(rank, trees, topk, sum(sent)).__dict__, Path(spec["out"]) / f"rank{rank}.pt")


# ---------------------------------------------------------------------------------------- launcher


class WorldFailed(RuntimeError):
    """A rank failed or the world ran out of time; the message holds each rank's exit and stderr.

    ``pids`` are the ranks' process ids, all reaped by the time this is raised.
    """

    pids: tuple[int, ...] = ()


def _kill_group(proc) -> None:
    if proc.poll() is None and proc.pid is not None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def run_world(module_path: str | os.PathLike, world: int, cases: tuple[Case, ...], workdir: Path, *,
              device: str = "cpu", backend: str = "gloo", timeout_s: float = 120.0,
              fault: str | None = None, python: str = sys.executable) -> list[RankResult]:
    """Start one process per rank, wait for all, reap all (also on failure), return their results.

    The launcher holds the rendezvous store (port chosen by the OS, so no port race). A rank that
    exits non-zero fails the world at once: its peers, blocked in a collective, are killed.
    """
    import torch.distributed as dist

    workdir.mkdir(parents=True, exist_ok=True)
    store = dist.TCPStore("127.0.0.1", 0, world + 1, True, timeout=datetime.timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    spec = {"world": world, "device": device, "backend": backend, "port": store.port, "out": str(workdir),
            "timeout_s": timeout_s, "fault": fault, "cases": [dataclasses.asdict(c) for c in cases]}
    env = {**os.environ, MODULE_PATH_ENV: str(module_path), RUN_SPEC_ENV: json.dumps(spec),
           "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1", "NCCL_NVLS_ENABLE": "0"}
    procs: list = []
    zygote = None
    try:
        if device == "cpu":
            # One process imports torch and forks every rank (each ``import torch`` costs seconds of
            # CPU, and a CPU world is many ranks on few cores). Not on GPUs: there every rank is
            # spawned fresh, so no rank inherits anything of another process's CUDA state.
            with open(workdir / "zygote.log", "wb") as log:
                zygote = subprocess.Popen([python, __file__, "zygote"], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
            procs = [ForkedRank(rank, workdir, zygote) for rank in range(world)]
        else:
            for rank in range(world):
                with open(workdir / f"rank{rank}.log", "wb") as log:
                    # Own session per rank, so a kill takes anything the rank started with it.
                    procs.append(subprocess.Popen([python, __file__, "worker"], env={**env, "RANK": str(rank)},
                                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_all(procs, time.monotonic() + timeout_s, workdir)
    except WorldFailed as error:
        error.pids = tuple(p.pid for p in procs if p.pid is not None)
        raise
    finally:
        for proc in procs:
            _kill_group(proc)
        if zygote is not None:
            _kill_group(zygote)
    return [RankResult(**torch.load(workdir / f"rank{r}.pt", weights_only=False)) for r in range(world)]


def _wait_all(procs: list, deadline: float, workdir: Path) -> None:
    while any(p.poll() is None for p in procs):
        if _failed_ranks(procs) or time.monotonic() > deadline:
            raise WorldFailed(f"{_failed_ranks(procs) or 'timed out'}\n" + _logs(procs, workdir))
        time.sleep(0.05)
    if _failed_ranks(procs):
        raise WorldFailed(f"{_failed_ranks(procs)}\n" + _logs(procs, workdir))


def _failed_ranks(procs: list) -> str:
    """Every rank that has exited non-zero so far (a crash takes its peers' collectives down with it,
    so which one the launcher saw first says nothing; all of them are named)."""
    return ", ".join(f"rank {r} exited with {p.returncode}" for r, p in enumerate(procs) if p.poll() not in (None, 0))


def _logs(procs: list[subprocess.Popen], workdir: Path) -> str:
    tails = []
    zygote_log = workdir / "zygote.log"
    if zygote_log.is_file() and zygote_log.stat().st_size:  # it failed before or while forking
        tails.append("--- launcher of the forked ranks:\n" + "\n".join(zygote_log.read_text(errors="replace").splitlines()[-15:]))
    for rank, proc in enumerate(procs):
        log = workdir / f"rank{rank}.log"
        text = log.read_text(errors="replace").strip().splitlines() if log.is_file() else ["(never started)"]
        tails.append(f"--- rank {rank} (exit {proc.poll()}):\n" + "\n".join(text[-15:]))
    return "\n".join(tails)



# ------------------------------------------------------------------------------- forked CPU ranks


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def zygote_main() -> None:
    """Fork every rank of a CPU world from this one process, reap them, record each exit.

    Each rank gets its own session (so the launcher's group kill reaches what it starts) and its
    own log; ``rank<r>.pid`` and ``rank<r>.exit`` are how the launcher sees it (see ForkedRank).
    """
    import torch.distributed  # noqa: F401  (imported once here, not once per rank)

    spec = json.loads(os.environ[RUN_SPEC_ENV])
    out = Path(spec["out"])
    children: dict[int, int] = {}
    for rank in range(spec["world"]):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _forked_rank_main(rank, out)
        children[pid] = rank
        _write_atomically(out / f"rank{rank}.pid", str(pid))
    while children:
        pid, status = os.wait()
        _write_atomically(out / f"rank{children.pop(pid)}.exit", str(os.waitstatus_to_exitcode(status)))


def _forked_rank_main(rank: int, out: Path) -> None:
    """The forked child: run ``worker_main`` as a rank, exit with the code a fresh process would."""
    code = 1
    try:
        os.setsid()
        log = os.open(out / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.environ["RANK"] = str(rank)
        worker_main()
        code = 0
    except SystemExit as done:  # like the interpreter: an int is the code, anything else is printed
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class ForkedRank:
    """A rank the zygote forked, seen through the calls the launcher makes on a ``Popen``.

    Its exit is read from ``rank<r>.exit`` (the zygote reaps it); if the zygote is gone without
    writing one, the rank counts as killed once its process is gone too.
    """

    def __init__(self, rank: int, workdir: Path, zygote: subprocess.Popen) -> None:
        self.rank, self.workdir, self.zygote = rank, workdir, zygote
        self.returncode: int | None = None
        self._pid: int | None = None

    @property
    def pid(self) -> int | None:
        if self._pid is None:
            path = self.workdir / f"rank{self.rank}.pid"
            if path.is_file():
                self._pid = int(path.read_text())
        return self._pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._recorded_exit()
        if self.returncode is None and self.zygote.poll() is not None:
            self.returncode = self._recorded_exit()  # written just before the zygote ended
            if self.returncode is None and (self.pid is None or not _alive(self.pid)):
                self.returncode = self.zygote.returncode or -signal.SIGKILL
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]

    def _recorded_exit(self) -> int | None:
        path = self.workdir / f"rank{self.rank}.exit"
        return int(path.read_text()) if path.is_file() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def tree_differences(expected: dict, actual: dict) -> list[str]:
    """Names of the tree fields that differ in dtype, shape or any element (empty: identical)."""
    diffs = []
    for name in TREE_FIELDS:
        a, b = expected[name], actual[name]
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            diffs.append(name)
    if expected["depth_limit"] != actual["depth_limit"]:
        diffs.append("depth_limit")
    return diffs


def compare_with_tp1(mod: ModuleType, cases: tuple[Case, ...], results: list[RankResult],
                     device: torch.device) -> list[str]:
    """Every rank's tree and merged top-K against tp = 1; one line per difference (empty: all equal)."""
    problems = []
    for index, case in enumerate(cases):
        expected_tree, expected_top = reference_tree(mod, case, device)
        for result in results:
            diffs = tree_differences(expected_tree, result.trees[index])
            for name, a, b in zip(("log-probs", "ids"), expected_top, result.topk[index]):
                if a.dtype != b.dtype or not torch.equal(a, b):
                    diffs.append(f"top-K {name}")
            if diffs:
                problems.append(f"{case} rank {result.rank}/{len(results)}: {', '.join(diffs)} differ")
    return problems


# ------------------------------------------------------------------------------------------- tests


def _check_world(ddtree_utils: ModuleType, tmp_path: Path, world: int) -> None:
    results = run_world(ddtree_utils.__file__, world, CPU_CASES, tmp_path)
    assert [r.rank for r in results] == list(range(world))
    assert compare_with_tp1(ddtree_utils, CPU_CASES, results, torch.device("cpu")) == []
    for index, case in enumerate(CPU_CASES):  # the equal trees are full trees, and ties were there to break
        tree, (log_probs, _) = results[-1].trees[index], results[-1].topk[index]
        assert tree["num_nodes"].tolist() == [case.budget] * case.batch
        if case.kind == "bf16-ties":
            assert (log_probs[..., 1:] == log_probs[..., :-1]).float().mean() > 0.5
    # Exactly the four statistics crossed the group: k' fp32 values + k' int64 ids + fp64 max and
    # sumexp per row (k' = min(k, shard width)), never a shard's logits.
    expected = sum(c.batch * c.depth * (min(c.k, shard_layout(c.vocab, world, 0)[1]) * (4 + 8) + 8 + 8)
                   for c in CPU_CASES)
    assert [r.gathered_bytes for r in results] == [expected] * world


def test_two_ranks_build_the_tp1_trees(ddtree_utils, tmp_path):
    _check_world(ddtree_utils, tmp_path, 2)


def test_four_ranks_build_the_tp1_trees(ddtree_utils, tmp_path):
    _check_world(ddtree_utils, tmp_path, 4)


def test_eight_ranks_build_the_tp1_trees(ddtree_utils, tmp_path):
    _check_world(ddtree_utils, tmp_path, 8)


def test_a_crashed_rank_fails_the_world_and_no_rank_survives(ddtree_utils, tmp_path):
    started = time.monotonic()
    try:
        run_world(ddtree_utils.__file__, 2, CPU_CASES[:1], tmp_path, fault="crash:1", timeout_s=60)
    except WorldFailed as error:
        message, pids = str(error), error.pids
    else:
        raise AssertionError("a crashed rank did not fail the world")
    assert "rank 1 exited with 1" in message and "injected crash" in message
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)]
    # Rank 0 was blocked in its first all-gather (gloo timeout 60 s); it was killed, not waited out.
    assert time.monotonic() - started < 30



def test_a_rank_that_raises_fails_the_world_with_its_traceback(tmp_path):
    """A rank's uncaught exception is its exit 1 and its traceback is in the world's error."""
    try:
        run_world(tmp_path / "no_such_module.py", 2, CPU_CASES[:1], tmp_path / "world", timeout_s=60)
    except WorldFailed as error:
        message, pids = str(error), error.pids
    else:
        raise AssertionError("a rank that cannot load its module did not fail the world")
    assert "(exit 1)" in message and "no_such_module.py" in message and "Traceback" in message
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)]

def test_a_differing_tree_is_reported(ddtree_utils):
    case = CPU_CASES[0]
    tree, _ = reference_tree(ddtree_utils, case, torch.device("cpu"))
    changed = dict(tree, node_token_ids=tree["node_token_ids"].clone())
    changed["node_token_ids"][0, -1] += 1
    assert tree_differences(tree, dict(tree)) == []
    assert tree_differences(tree, changed) == ["node_token_ids"]


if __name__ == "__main__" and sys.argv[1:] == ["worker"]:
    worker_main()
elif __name__ == "__main__" and sys.argv[1:] == ["zygote"]:
    zygote_main()
