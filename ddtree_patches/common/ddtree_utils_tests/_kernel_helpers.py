"""Shared helpers of the fused-kernel tests (not fixtures: those live in the set's conftest).

* ``load_fresh``: a second copy of the module under test, imported with environment variables
  set (the Triton off switch is read at import);
* ``assert_same``: dtype, shape, device and every element equal, for tensors, tuples and the
  module's frozen dataclasses;
* ``draft_logits_case``: seeded draft logits of one regime (ties, saturation, -inf, signed zeros);
* ``as_if_cuda``: a CPU tensor whose ``is_cuda`` is True, for the branches CUDA tensors take;
* ``interpreted_copy``: a fresh copy of a module of the tree imported with ``TRITON_INTERPRET=1``, in
  this process: Triton's interpreter runs its kernels on CPU tensors, and the tests gate's coverage
  trace sees every line they run (kernel bodies included: the interpreter executes a kernel's own
  source, compiled under the tree file's name and line numbers). Optionally with the module's Triton
  paths taken for CPU tensors too, so the public functions run their launch code on a CPU.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

TESTS_DIR = Path(__file__).resolve().parent
REGIMES = ("gaussian", "bf16", "fp16", "integer", "saturated", "neg_inf", "zeros", "spiky")
_fresh_loads = 0


def load_fresh(ddtree_utils: ModuleType, monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    """A second copy of the module under test (or of another module of the tree, loaded by its file),
    imported with ``env`` set (read at import)."""
    global _fresh_loads
    _fresh_loads += 1
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    name = f"{ddtree_utils.__name__.rpartition('.')[2]}_fresh_{_fresh_loads}"
    spec = importlib.util.spec_from_file_location(name, Path(ddtree_utils.__file__))
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses resolve annotations here
    spec.loader.exec_module(module)
    return module


def interpreter_ready() -> None:
    """Skip (with the reason) unless Triton's interpreter can run the kernels here."""
    triton = pytest.importorskip("triton", reason="triton is not installed: the kernels cannot be interpreted")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: the CUDA tests run the compiled kernels")
    version = tuple(int(part) for part in triton.__version__.split(".")[:2] if part.isdigit())
    if version < (3, 9):  # older interpreters fail on loops bounded by a kernel argument
        pytest.skip(f"triton {triton.__version__}'s interpreter: needs 3.9 or newer")


def _interpret_triton_language(monkeypatch: pytest.MonkeyPatch) -> None:
    """triton.language's own ``@triton.jit`` functions (``tl.zeros``, ``tl.max``, ``tl.sum``, ``tl.sort``... of
    ``triton/language/standard.py``) as the interpreter's, for the rest of the test: jit'd when triton was
    first imported, they are compiled functions unless ``TRITON_INTERPRET=1`` was set then (a kernel the
    interpreter runs cannot call those: "Cannot call @triton.jit'd outside of the scope of a kernel")."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    interpreted: dict[int, InterpretedFunction] = {}
    for module in (tl, tl.core, tl.standard, tl.math):
        for name, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                monkeypatch.setattr(module, name, interpreted.setdefault(id(value), InterpretedFunction(value.fn)))


def _same_device(*tensors: torch.Tensor) -> bool:
    return all(t.device == tensors[0].device for t in tensors)


def interpreted_copy(module: ModuleType, monkeypatch: pytest.MonkeyPatch, *, triton_on_cpu: bool = True) -> ModuleType:
    """A fresh copy of ``module`` (imported with ``TRITON_INTERPRET=1``, set for the rest of the test) whose
    ``@triton.jit`` kernels Triton's interpreter runs, in this process. ``triton_on_cpu``: its dispatch
    (``_triton_ready``) also takes the Triton paths for CPU tensors, so ``ddtree_topk_from_logits`` and the
    other public functions launch the kernels as they do for CUDA tensors (a module that decides by
    ``TRITON_INTERPRET`` itself, such as ``ddtree_tree_attention``, needs nothing more)."""
    interpreter_ready()
    _interpret_triton_language(monkeypatch)
    fresh = load_fresh(module, monkeypatch, TRITON_INTERPRET="1")
    if triton_on_cpu and hasattr(fresh, "_triton_ready"):
        monkeypatch.setattr(fresh, "_triton_ready", _same_device)
    return fresh


class _AsIfCuda(torch.Tensor):
    """A CPU tensor that answers ``is_cuda`` as a CUDA tensor does (its data stays on the CPU)."""

    @property
    def is_cuda(self) -> bool:
        return True


def as_if_cuda(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (shared storage) seen as a CUDA tensor by code that branches on ``t.is_cuda``: the branch
    a CUDA device takes, run on a CPU, where what it does next needs no CUDA device (pure torch ops, or a
    Triton launch that Triton's interpreter runs)."""
    return tensor.as_subclass(_AsIfCuda)


def must_not_run(*args, **kwargs):
    raise AssertionError("this path must not be selected")


def assert_same(actual, expected, where: str = "") -> None:
    """Bit-identical results: the same structure, and per tensor dtype, shape, device, values."""
    if dataclasses.is_dataclass(expected):
        assert type(actual).__name__ == type(expected).__name__, where
        for field in dataclasses.fields(expected):
            assert_same(getattr(actual, field.name), getattr(expected, field.name), f"{where}.{field.name}")
        return
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{i}]")
        return
    if not torch.is_tensor(expected):
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
        return
    assert torch.is_tensor(actual), where
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), f"{where}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.device == expected.device, f"{where}: device {actual.device} != {expected.device}"
    if expected.is_floating_point():
        # NaN == NaN here (all -inf rows give NaN log-probs on both paths); bits otherwise.
        keep_inf = dict(nan=0.0, posinf=float("inf"), neginf=float("-inf"))
        same = torch.equal(actual.isnan(), expected.isnan()) and torch.equal(
            actual.nan_to_num(**keep_inf).view(_int_view(actual.dtype)),
            expected.nan_to_num(**keep_inf).view(_int_view(expected.dtype)),
        )
    else:
        same = torch.equal(actual, expected)
    if not same:
        bad = (actual != expected).nonzero()[:5].tolist()
        raise AssertionError(f"{where}: values differ at {bad}")


def _int_view(dtype: torch.dtype) -> torch.dtype:
    """Compare floats bit for bit (so -0.0 != +0.0)."""
    return {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
            torch.bfloat16: torch.int16}[dtype]


def draft_logits_case(regime: str, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    """Draft logits of one regime, on the CPU; several make exact ties very likely."""
    if regime == "gaussian":
        return torch.randn(shape, generator=gen) * 3
    if regime == "bf16":
        return (torch.randn(shape, generator=gen) * 4).bfloat16()
    if regime == "fp16":
        return (torch.randn(shape, generator=gen) * 4).half()
    if regime == "integer":  # a handful of distinct values: most top-K slots are ties
        return torch.randint(-3, 4, shape, generator=gen).bfloat16()
    if regime == "saturated":  # one token dominates: its log-prob is exactly 0.0
        logits = torch.randint(-2, 1, shape, generator=gen).float()
        top = torch.randint(shape[-1], shape[:-1] + (1,), generator=gen)
        return logits.scatter(-1, top, 200.0)
    if regime == "neg_inf":  # masked vocabulary: long -inf tails, some rows nearly empty
        logits = torch.randn(shape, generator=gen) * 2
        logits[torch.rand(shape, generator=gen) < 0.7] = float("-inf")
        logits[..., 0] = torch.where(torch.rand(shape[:-1], generator=gen) < 0.5, logits[..., 0], 1.0)
        return logits
    if regime == "zeros":  # +0.0 and -0.0 must tie, smaller id first, and keep their sign
        signs = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0)
        return torch.randint(-1, 1, shape, generator=gen).float() * signs
    if regime == "spiky":
        logits = torch.randn(shape, generator=gen)
        spikes = torch.randint(shape[-1], shape[:-1] + (3,), generator=gen)
        return logits.scatter_add(-1, spikes, torch.rand(shape[:-1] + (3,), generator=gen) * 12)
    raise ValueError(regime)
