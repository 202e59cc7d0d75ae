"""The cache never changes a verdict (issue 37, point 1): the same inputs give the same verdict with
the cache and without it (``patchkit verify --no-cache``).

Random (seeded) sequences of edits of a small real set's tree (break, fix, benign: tests/verify/
hook_fixture.py) go through every gate twice per step, with the cache that the earlier steps filled
and without any, and the verdicts must agree. Then the issue's own sequence, on that set: a line of
the hook indented wrongly by a fix-up of the set, verify, the tree reset to its base and the set as
shipped applied again, verify: it must pass.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from patchkit import paths
from patchkit.checks.registry import GATES, REUSABLE
from patchkit.cli import cli
from patchkit.git import Repo
from patchkit.verify.api import Severity
from patchkit.verify.outcome import VerifyResult
from patchkit.verify.run import verify
from tests.verify.hook_fixture import HOOK, SERVER_ARGS, VARIANTS, hook_set

SEEDS = (4, pytest.param(14, marks=pytest.mark.slow), pytest.param(23, marks=pytest.mark.slow))  # slow: more of the same
STEPS = 6
INDENT, DOCSTRING, COMMENT = "break: an indented line", "benign: the docstring", "benign: a comment"
#: Sequences that once gave a stale verdict, each kept as a case of the property:
REGRESSIONS = {
    # the backend probe's rows were valid "while every tree file the probe imported is unchanged", and
    # the file whose import failed was not among them: the fix replayed the IndentationError (and the
    # calls gate cached its import failure with no file at all)
    "the fix of a file whose import failed": [(HOOK, INDENT), (HOOK, "ok")],
    "an edit of a file whose import failed, line numbers kept": [(HOOK, INDENT), (HOOK, DOCSTRING)],
    # the tests gate reused a test's failure while none of the code it ran changed: the file whose import
    # failed ran no code, so its fix was no change to that test
    "a test that failed to import, then its fix in a new state": [(HOOK, INDENT), (SERVER_ARGS, COMMENT), (HOOK, "ok")],
}


def verdict(result: VerifyResult) -> tuple[Any, ...]:
    """What the cache must not change: the exit code, each gate's status and its error findings."""
    errors = sorted((f.gate, f.file, f.line or 0, f.message) for f in result.findings() if f.severity == Severity.ERROR)
    return result.exit_code, tuple((run.gate, run.status) for run in result.gates), tuple(errors)


def run_verify(target: Path, set_dir: Path, *, use_cache: bool) -> VerifyResult:
    return verify(set_dir, target, registry=GATES, reusable=REUSABLE, allow_drift=True, use_cache=use_cache)


def edits(seed: int) -> list[tuple[str, str]]:
    """``STEPS`` edits: (tree file, variant), each a break, a fix (a broken file back to as applied) or
    a benign edit."""
    rng = random.Random(seed)
    state = dict.fromkeys(VARIANTS, "ok")
    out = []
    for _ in range(STEPS):
        kind = rng.choice(["break", "fix", "benign"])
        broken = sorted(file for file, variant in state.items() if variant.startswith("break"))
        if kind == "fix" and broken:
            file, variant = rng.choice(broken), "ok"
        else:
            kind = "break" if kind == "fix" else kind
            file = rng.choice(sorted(VARIANTS))
            variant = rng.choice([n for n in VARIANTS[file] if n.startswith(kind) and n != state[file]] or ["ok"])
        state[file] = variant
        out.append((file, variant))
    return out


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return hook_set(tmp_path_factory.mktemp("cache") / "hook")


#: A state's verdict without the cache (the oracle), computed once per state for the whole module.
ORACLE: dict[tuple[str, ...], tuple[Any, ...]] = {}


def difference(cached: tuple[Any, ...], uncached: tuple[Any, ...]) -> str:
    lines = [f"\nexit {cached[0]} with the cache, {uncached[0]} without"]
    lines += [f"gate {a} with the cache, {b} without" for a, b in zip(cached[1], uncached[1], strict=False) if a != b]
    lines += [f"only with the cache: {row}" for row in sorted(set(cached[2]) - set(uncached[2]))]
    lines += [f"only without it: {row}" for row in sorted(set(uncached[2]) - set(cached[2]))]
    return "\n".join(lines)


def check_sequence(target: Path, set_dir: Path, sequence: list[tuple[str, str]]) -> None:
    state = dict.fromkeys(VARIANTS, "ok")
    history = []
    try:
        for file, variant in sequence:
            state[file] = variant
            (target / file).write_text(VARIANTS[file][variant])
            history.append(f"{file}: {variant}")
            key = tuple(state[f] for f in sorted(state))
            if key not in ORACLE:
                ORACLE[key] = verdict(run_verify(target, set_dir, use_cache=False))
                # the fixture is worth its time: every break fails a gate, the rest passes every one;
                # and no input crashes a gate (point 9)
                assert ORACLE[key][0] == (1 if any(v.startswith("break") for v in key) else 0), history
            cached = verdict(run_verify(target, set_dir, use_cache=True))
            assert cached == ORACLE[key], "after the edits\n  " + "\n  ".join(history) + difference(cached, ORACLE[key])
    finally:
        for file, variants in VARIANTS.items():
            (target / file).write_text(variants["ok"])


@pytest.mark.parametrize("name", REGRESSIONS)
def test_known_stale_sequences_get_the_same_verdict_with_the_cache_and_without(hook, name):
    check_sequence(*hook, REGRESSIONS[name])


@pytest.mark.parametrize("seed", SEEDS)
def test_random_edits_get_the_same_verdict_with_the_cache_and_without(hook, seed):
    check_sequence(*hook, edits(seed))


def _patchkit(*args: str) -> Any:
    done = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    return done.exit_code, json.loads(done.stdout) if done.stdout.strip() else None


def test_the_issue_sequence_a_fixed_up_indent_then_the_set_as_shipped_passes(tmp_path):
    """Issue 37 point 1, as reported: a maintainer indents a line of the hook wrongly in the set (the
    patch changed, the lock rewritten), applies it, and verify reports it; the tree is reset to its
    base and the set as shipped applied again (same set folder, same tree path): the backend gate must
    pass, not replay the IndentationError of a file that no longer has it."""
    target, set_dir = hook_set(tmp_path / "hook")
    shipped = tmp_path / "shipped"
    shutil.copytree(set_dir, shipped)
    patch = next(set_dir.glob("0001-*.patch"))
    good, bad = "+    return width\n", "+      return width\n"
    assert patch.read_text().count(good) == 1
    patch.write_text(patch.read_text().replace(good, bad))

    base = tomllib.loads((set_dir / "manifest.toml").read_text())["base"]["git"]["commit"]

    def reapply() -> None:
        Repo(target).run("reset", "-q", "--hard", base)
        code, out = _patchkit("apply", "--set", str(set_dir), "--target", str(target))
        assert code == 0, out

    assert _patchkit("lock", "--set", str(set_dir))[0] == 0
    reapply()
    # the compile gate reports it; the backend gate's cases that reach the file are skipped, and cached
    code, out = _patchkit("verify", "--set", str(set_dir), "--target", str(target), "--gate", "compile",
                          "--gate", "backend")
    assert code == 1 and "IndentationError" in json.dumps(out)
    shutil.rmtree(set_dir)
    shutil.copytree(shipped, set_dir)
    reapply()
    code, out = _patchkit("verify", "--set", str(set_dir), "--target", str(target), "--gate", "backend")
    assert code == 0 and "IndentationError" not in json.dumps(out), json.dumps(out)[-3000:]


def test_no_cache_reads_and_writes_no_cached_result(hook):
    target, set_dir = hook
    for file, variants in VARIANTS.items():
        (target / file).write_text(variants["ok"])
    cache = paths.verify_cache_dir()
    shutil.rmtree(cache, ignore_errors=True)
    done = CliRunner().invoke(cli, ["verify", "--set", str(set_dir), "--target", str(target), "--no-cache", "--json"],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*")), "nothing was cached"
    (target / HOOK).write_text(VARIANTS[HOOK]["break: the width"])
    try:
        first = run_verify(target, set_dir, use_cache=True)  # fills the cache with this failure
        assert first.exit_code == 1
        (target / HOOK).write_text(VARIANTS[HOOK]["ok"])
        again = run_verify(target, set_dir, use_cache=False)
        assert again.exit_code == 0 and not any(run.reused for run in again.gates)
    finally:
        (target / HOOK).write_text(VARIANTS[HOOK]["ok"])


@pytest.mark.slow
def test_the_issue_sequence_on_the_real_v2_set(tmp_path, monkeypatch):
    """The issue's own run, on v2 and the pinned SGLang 0.5.17 wheel: a line of speculative_hook.py
    indented wrongly, folded into its patch (``commit --fixup``, ``rebase --autosquash``, ``refresh``);
    verify reports it; the tree reset to its base and the set as shipped applied again (same set
    folder, same tree path): ``verify --gate backend`` passes. ``PATCHKIT_SEEDED_ENV_DIR`` names an
    existing folder of verify environments to reuse (else the environment is built, minutes)."""
    import subprocess

    from tests.verify.corpus.fixtures import REPO, patchkit

    home = tmp_path / "home"
    shared = os.environ.get("PATCHKIT_SEEDED_ENV_DIR")
    if shared:
        (home / "cache").mkdir(parents=True)
        (home / "cache" / "envs").symlink_to(Path(shared).resolve())
    set_dir, shipped, tree = tmp_path / "v2", tmp_path / "v2-shipped", tmp_path / "tree"
    patchkit("sets", "copy", REPO / "ddtree_patches" / "v2", set_dir, home=home)
    shutil.copytree(set_dir, shipped)
    patchkit("base", "fetch", "--set", set_dir, "--dest", tree, home=home)
    patchkit("apply", "--set", set_dir, "--target", tree, home=home)
    hook = tree / "python/sglang/srt/arg_groups/speculative_hook.py"
    good = "    view = resolved_view(server_args)\n    prefill, decode = attention_backends_of(view)\n"
    assert hook.read_text().count(good) == 1
    hook.write_text(hook.read_text().replace(good, good.replace("    prefill", "      prefill")))
    repo = Repo(tree)
    owner = repo.run("log", "--format=%H", "-1", "--", str(hook.relative_to(tree))).strip()
    base = tomllib.loads((set_dir / "manifest.toml").read_text())["base"]
    env = {**os.environ, "GIT_SEQUENCE_EDITOR": "true", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    for args in (["commit", "-qam", "fixup", f"--fixup={owner}"], ["rebase", "-q", "-i", "--autosquash", f"{owner}~1"]):
        subprocess.run(["git", *args], cwd=tree, env=env, check=True, capture_output=True)
    patchkit("refresh", "--set", set_dir, "--target", tree, home=home)
    broken = patchkit("verify", "--set", set_dir, "--target", tree, "--gate", "compile", "--gate", "backend",
                      home=home, check=False)
    assert broken.returncode == 1 and "IndentationError" in broken.stdout, broken.stdout + broken.stderr
    shutil.rmtree(set_dir)
    shutil.copytree(shipped, set_dir)
    base_commit = base.get("git", {}).get("commit") or repo.run("rev-list", "--max-parents=0", "HEAD").split()[0]
    repo.run("reset", "-q", "--hard", base_commit)
    patchkit("apply", "--set", set_dir, "--target", tree, home=home)
    again = patchkit("verify", "--set", set_dir, "--target", tree, "--gate", "backend", home=home, check=False)
    assert again.returncode == 0 and "IndentationError" not in again.stdout, again.stdout[-3000:] + again.stderr[-2000:]
