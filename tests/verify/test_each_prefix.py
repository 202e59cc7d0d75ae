"""``patchkit verify --each-prefix``: every prefix of the series compiles, imports and cross-references.

A real set written by ``patchkit refresh`` from real commits, applied by ``patchkit apply``, checked
by the real CLI; and v1, which is known not to be bisectable (0005 imports ``ddtree_info``, which
only 0008 adds): exactly that is reported, once per importing file, at the first prefix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.verify.corpus.fixtures import REPO, V1, clean_tree, patchkit, pristine_base, seeded_home  # noqa: F401

from patchkit.git import init_repo

MANIFEST = """\
[set]
name = "prefixes"
version = "1.0.0"
description = "three patches, the second importing what the third adds"
python = ["3.11"]

[base]
kind = "git"

[base.git]
url = "{url}"
commit = "{commit}"
"""


def git(root: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t.invalid", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True, env=env).stdout


def commit(root: Path, files: dict[str, str], message: str) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def cli(*args: object, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATCHKIT_HOME": str(home), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "patchkit", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=900)


@pytest.fixture
def misordered_set(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Three patches: 0002 imports pkg.later, which only 0003 adds."""
    upstream = tmp_path / "upstream"
    init_repo(upstream, "main")
    commit(upstream, {"python/pkg/__init__.py": "", "python/pkg/base.py": "X = 1\n"}, "upstream")
    head = git(upstream, "rev-parse", "HEAD").strip()
    set_dir, work, home = tmp_path / "set", tmp_path / "work", tmp_path / "home"
    set_dir.mkdir()
    (set_dir / "manifest.toml").write_text(MANIFEST.format(url=upstream, commit=head))
    (set_dir / "series").write_text("")
    assert cli("base", "fetch", "--set", set_dir, "--dest", work, home=home).returncode == 0
    commit(work, {"python/pkg/first.py": "from pkg.base import X\n\nY = X + 1\n"}, "Add first")
    commit(work, {"python/pkg/user.py": "from pkg.later import Z\n\n\ndef use():\n    return Z\n"}, "Add user")
    commit(work, {"python/pkg/later.py": "Z = 3\n"}, "Add later")
    done = cli("refresh", "--set", set_dir, "--target", work, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    target = tmp_path / "target"
    assert cli("base", "fetch", "--set", set_dir, "--dest", target, home=home).returncode == 0
    done = cli("apply", "--set", set_dir, "--target", target, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    return set_dir, target, home


def prefix_run(doc: dict) -> dict:
    (run,) = [g for g in doc["result"]["gates"] if g["gate"] == "each-prefix"]
    return run


def test_a_middle_patch_importing_a_later_module_is_named(misordered_set):
    set_dir, target, home = misordered_set
    before = git(target, "rev-parse", "HEAD"), git(target, "status", "--porcelain")
    objects = sorted(p.name for p in (target / ".git" / "objects").rglob("*") if p.is_file())
    plain = cli("verify", "--set", set_dir, "--target", target, "--gate", "compile", "--json", home=home)
    assert plain.returncode == 0, plain.stdout  # the full series is fine
    done = cli("verify", "--set", set_dir, "--target", target, "--gate", "compile", "--each-prefix", "--json", home=home)
    assert done.returncode == 1, done.stdout + done.stderr
    run = prefix_run(json.loads(done.stdout))
    errors = [f for f in run["findings"] if f["severity"] == "error"]
    assert {(f["file"], f["line"]) for f in errors} == {("python/pkg/user.py", 1)}, errors
    assert all(f["message"].startswith("after 0002-Add-user.patch (prefix 2 of 3; fixed by 0003-Add-later.patch)")
               for f in errors), errors
    assert {f["message"].split("]")[0] for f in errors} >= {"after 0002-Add-user.patch (prefix 2 of 3; fixed by "
                                                            "0003-Add-later.patch): [imports"}
    # the target is exactly as it was: HEAD, work tree and object store
    assert (git(target, "rev-parse", "HEAD"), git(target, "status", "--porcelain")) == before
    assert sorted(p.name for p in (target / ".git" / "objects").rglob("*") if p.is_file()) == objects


def test_a_bisectable_series_passes(misordered_set, tmp_path):
    set_dir, target, home = misordered_set
    series = (set_dir / "series").read_text().splitlines()
    reordered = [line for line in series if "later" in line] + [line for line in series if "later" not in line]
    (set_dir / "series").write_text("\n".join(reordered) + "\n")  # later.py first: every prefix imports
    locked = cli("lock", "--set", set_dir, home=home)  # the lock pins the series order too
    assert locked.returncode == 0, locked.stdout + locked.stderr
    # the target was applied in the old order (same post-image, other commits): --allow-drift says so and runs
    done = cli("verify", "--set", set_dir, "--target", target, "--gate", "compile", "--each-prefix", "--json",
               "--allow-drift", home=home)
    run = prefix_run(json.loads(done.stdout))
    assert run["status"] == "pass", run["findings"]
    assert any("3 prefixes checked" in f["message"] for f in run["findings"])


@pytest.mark.slow
def test_v1_is_not_bisectable_exactly_where_0005_imports_ddtree_info(clean_tree, seeded_home):  # noqa: F811
    from patchkit.checks.registry import GATES
    from patchkit.verify.prefixes import EachPrefix
    from patchkit.verify.run import verify

    import os

    old = os.environ.get("PATCHKIT_HOME")
    os.environ["PATCHKIT_HOME"] = str(seeded_home)
    try:
        result = verify(V1, clean_tree, ("compile",), registry=GATES, extra={EachPrefix.NAME: EachPrefix(GATES)})
    finally:
        os.environ["PATCHKIT_HOME"] = old or ""
    (run,) = [g for g in result.gates if g.gate == "each-prefix"]
    errors = [f for f in run.findings if f.severity.value == "error"]
    files = {f.file for f in errors}
    assert files == {"python/sglang/srt/model_executor/cuda_graph_runner.py",
                     "python/sglang/srt/model_executor/model_runner.py"}, [(f.file, f.line, f.message) for f in errors]
    for finding in errors:
        assert finding.message.startswith("after 0005-CudaGraph-Always-capture-and-replay-the-DDTREE-targe.patch "
                                          "(prefixes 5-7 of 9; fixed by 0008-Speculative-Add-DDTreeVerifyInput.patch)")
        assert "sglang.srt.speculative.ddtree_info" in finding.message
