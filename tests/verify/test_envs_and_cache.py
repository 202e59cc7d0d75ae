"""Isolated environments (real venvs, a real lock) and the content-hash result cache."""

from __future__ import annotations

import threading
import time

import pytest

from patchkit.checks import compile as compile_gate
from patchkit.verify import envs
from patchkit.errors import BadInput
from patchkit.verify.cache import ResultCache, key_of

OFFLINE_SPEC = {"packages": ["pip"], "pip_args": ["--no-index"]}  # installs nothing new, needs no network


def test_env_is_created_once_and_reused_and_its_creation_is_reported(tmp_path):
    notes: list[str] = []
    python = envs.ensure_env(OFFLINE_SPEC, tmp_path, notes.append)
    assert python.is_file() and (python.parent.parent / envs.MARKER).is_file()
    assert notes[0] == f"creating the [verify.env] environment (Python {envs.RUNNING}, 1 packages)"
    assert envs.reports_version(str(python), envs.RUNNING)
    started = time.monotonic()
    assert envs.ensure_env(dict(reversed(list(OFFLINE_SPEC.items()))), tmp_path) == python  # same spec, same env
    assert time.monotonic() - started < 1


def test_a_different_spec_gets_a_different_env(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(envs, "create_env", lambda env_dir, spec, progress: (
        env_dir.mkdir(parents=True), (env_dir / envs.MARKER).write_text("{}"), built.append(spec)))
    first = envs.ensure_env({"packages": ["a==1"]}, tmp_path)
    second = envs.ensure_env({"packages": ["a==2"]}, tmp_path)
    assert first != second and len(built) == 2


def test_concurrent_callers_build_one_env(tmp_path, monkeypatch):
    built = []

    def slow_create(env_dir, spec, progress):
        built.append(spec)
        time.sleep(0.5)
        env_dir.mkdir(parents=True)
        (env_dir / envs.MARKER).write_text("{}")

    monkeypatch.setattr(envs, "create_env", slow_create)
    results, notes = [], []

    def call():
        results.append(envs.ensure_env({"packages": ["x==1"]}, tmp_path, notes.append))

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 1 and len(set(results)) == 1
    assert "another patchkit run is creating it" in notes[0]  # the waiters say why they wait


def test_a_half_built_env_is_rebuilt(tmp_path, monkeypatch):
    spec = {"packages": ["x==1"]}
    key = key_of("env", envs.validated(spec))[:16]
    (tmp_path / key / "junk").mkdir(parents=True)  # a crash left a folder without the marker
    seen = []

    def create(env_dir, spec, progress):
        seen.append(env_dir.exists())
        env_dir.mkdir()
        (env_dir / envs.MARKER).write_text("{}")

    monkeypatch.setattr(envs, "create_env", create)
    envs.ensure_env(spec, tmp_path)
    assert seen == [False] and not (tmp_path / key / "junk").exists()


@pytest.mark.parametrize("spec", [{}, {"packages": []}, {"packages": "torch"}, {"packages": ["x"], "pip_args": "-q"}])
def test_bad_env_specs_are_refused(tmp_path, spec):
    with pytest.raises(BadInput, match=r"\[verify.env\]"):
        envs.ensure_env(spec, tmp_path)


def test_failed_install_says_what_to_fix(tmp_path):
    with pytest.raises(envs.Failed, match="could not create the verify environment") as caught:
        envs.ensure_env({"packages": ["surely-not-a-real-package-patchkit==0"], "pip_args": ["--no-index"]}, tmp_path)
    assert "[verify.env] packages" in caught.value.hint


def test_cache_round_trip_and_corrupt_entries_miss(tmp_path):
    cache = ResultCache(tmp_path, "g")
    key = key_of("x", {"b": 1, "a": 2})
    assert key == key_of("x", {"a": 2, "b": 1})
    assert cache.get(key) is None
    cache.put(key, {"v": [1, None]})
    assert cache.get(key) == {"v": [1, None]}
    path = next((tmp_path / "g").rglob("*.json"))
    path.write_text("{truncated")
    assert cache.get(key) is None
    assert cache.through(key, lambda: 7) == 7 and cache.get(key) == 7


def test_compile_results_are_cached_by_content(make_ctx, monkeypatch):
    ctx = make_ctx({"python/pkg/a.py": "A = 1\n", "python/pkg/b.py": "def f(:\n"}, {"set": {"python": [envs.RUNNING]}})
    first = compile_gate.run(ctx)
    calls = []
    monkeypatch.setattr(compile_gate, "compile_in_memory", lambda path: calls.append(path) or None)
    assert compile_gate.run(ctx) == first and calls == []  # warm: nothing recompiled
    (ctx.root / "python/pkg/b.py").write_text("B = 2\n")
    assert compile_gate.run(ctx) == [] and [p.name for p in calls] == ["b.py"]  # only the changed file
