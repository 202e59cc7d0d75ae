"""Host-side round diagnostics for the DFlash-family workers, loaded by go.sh when GO_DIAG=1.

Python imports ``sitecustomize`` at start when its folder is on PYTHONPATH; go.sh puts this folder
there only for a diagnosed step, and only the server processes find a worker to wrap. Nothing here
changes what a round computes: it times the host side of each decode round and records what a round
that stalls the host did.

Written under ``$PK_DIAG_DIR`` (one file per server process, appended while it runs, since the bench
stops servers with a signal):
- ``rounds-<pid>.tsv``: per decode round: worker class, batch size, host ms, Triton compilations,
  device allocations (``num_device_alloc`` of the caching allocator), Python GC collections during it;
- ``profile-<pid>-<class>-bs<N>.txt``: cProfile of rounds 30-90 at each batch size, the top functions
  by own time and by cumulative time (where the host time of a round goes); not with PK_DIAG_PROFILE=0.
"""

from __future__ import annotations

import cProfile
import gc
import importlib.abc
import importlib.util
import io
import os
import pstats
import sys
import time

_DIR = os.environ.get("PK_DIAG_DIR", "")
_WRAPPED = {
    "sglang.srt.speculative.dflash_worker_v2": ("DFlashWorkerV2", "forward_batch_generation"),
    "sglang.srt.speculative.ddtree_worker_v2": ("DDTreeWorkerV2", "forward_batch_generation"),
}
# The window of rounds, per batch size, that cProfile records; PK_DIAG_PROFILE=0: none (the rounds are
# then timed and counted only, as they run in a measurement).
_PROFILE_ROUNDS = (30, 90) if os.environ.get("PK_DIAG_PROFILE", "1") != "0" else (0, 0)
_compiles = [0]
_gc = [0]


def _count_gc(phase, _info):
    if phase == "start":
        _gc[0] += 1


def _install_triton_hook() -> None:
    try:
        import triton  # noqa: F401
        from triton import knobs
    except Exception:  # noqa: BLE001 - no triton here: nothing to count
        return

    def hook(*args, **kwargs):
        _compiles[0] += 1
        return False

    try:
        knobs.runtime.jit_post_compile_hook = hook
    except Exception:  # noqa: BLE001
        pass


def _device_allocs() -> int:
    try:
        import torch

        return int(torch.cuda.memory_stats().get("num_device_alloc", 0))
    except Exception:  # noqa: BLE001
        return -1


class _RoundRecorder:
    def __init__(self, label: str):
        self.label = label
        self.rounds_by_bs: dict[int, int] = {}
        self.profiles: dict[int, cProfile.Profile] = {}
        self.out = open(os.path.join(_DIR, f"rounds-{os.getpid()}.tsv"), "a", buffering=1)  # noqa: SIM115

    def wrap(self, fn):
        def wrapper(worker, batch, *args, **kwargs):
            mode = getattr(batch, "forward_mode", None)
            decode = (
                mode is not None
                and not (mode.is_extend() or mode.is_idle())
                and not getattr(batch, "is_extend_in_batch", False)
            )
            if not decode:
                return fn(worker, batch, *args, **kwargs)
            bs = len(batch.seq_lens)
            k = self.rounds_by_bs.get(bs, 0)
            self.rounds_by_bs[bs] = k + 1
            profile = None
            if _PROFILE_ROUNDS[0] <= k < _PROFILE_ROUNDS[1]:
                profile = self.profiles.setdefault(bs, cProfile.Profile())
            compiles, gcs, allocs = _compiles[0], _gc[0], _device_allocs()
            t0 = time.perf_counter()
            if profile is not None:
                profile.enable()
            try:
                return fn(worker, batch, *args, **kwargs)
            finally:
                if profile is not None:
                    profile.disable()
                ms = (time.perf_counter() - t0) * 1e3
                self.out.write(
                    f"{self.label}\t{bs}\t{ms:.3f}\t{_compiles[0] - compiles}\t"
                    f"{_device_allocs() - allocs}\t{_gc[0] - gcs}\n"
                )
                if profile is not None and k + 1 == _PROFILE_ROUNDS[1]:
                    self.dump(bs, profile)

        return wrapper

    def dump(self, bs: int, profile: cProfile.Profile) -> None:
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        rounds = _PROFILE_ROUNDS[1] - _PROFILE_ROUNDS[0]
        text.write(f"# {self.label} bs={bs}: cProfile of {rounds} decode rounds\n")
        stats.sort_stats("tottime").print_stats(45)
        stats.sort_stats("cumulative").print_stats(45)
        path = os.path.join(_DIR, f"profile-{os.getpid()}-{self.label}-bs{bs}.txt")
        with open(path, "w") as handle:
            handle.write(text.getvalue())


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the worker's round once its module has run."""

    def find_spec(self, name, path, target=None):
        if name not in _WRAPPED:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            cls_name, method = _WRAPPED[name]
            cls = getattr(module, cls_name, None)
            if cls is not None and method in cls.__dict__:
                _install_triton_hook()
                setattr(cls, method, _RoundRecorder(cls_name).wrap(cls.__dict__[method]))

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _DIR and os.path.isdir(_DIR):
    gc.callbacks.append(_count_gc)
    sys.meta_path.insert(0, _Finder())
