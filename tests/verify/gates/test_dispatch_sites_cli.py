"""`patchkit dispatch-sites` rewrites the declarations: reviewed ones kept, new sites added unreviewed."""

import json
import subprocess
import sys
from pathlib import Path

from patchkit.testing.verify import write_manifest

REPO = Path(__file__).resolve().parents[3]


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_new_site_is_added_unreviewed_and_reported(tmp_path):
    tree = tmp_path / "tree"
    (tree / "python" / "pkg").mkdir(parents=True)
    (tree / "python" / "pkg" / "mod.py").write_text("def f(algo):\n    return algo.is_eagle()\n")
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    (tree / "python" / "pkg" / "mod.py").write_text(
        "def f(algo):\n    return algo.is_eagle()\n\n\ndef g(algo):\n    return algo.is_dflash()\n")
    set_dir = tmp_path / "set"
    (set_dir / "expectations").mkdir(parents=True)
    base = _git(tree, "rev-parse", "HEAD").strip()
    write_manifest(set_dir, base, {"verify": {"dispatch": {"declarations": "expectations/dispatch.toml"}}})
    env = {"PYTHONPATH": str(REPO), "PATCHKIT_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "patchkit", "dispatch-sites", "--set", str(set_dir),
                           "--target", str(tree), "--json"], capture_output=True, text=True, env=env)
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and doc["result"]["added"] == 2 and doc["result"]["kept"] == 0
    written = (set_dir / "expectations" / "dispatch.toml").read_text()
    assert "is_dflash()" in written and "is_eagle()" in written
    reviewed = written.replace('treatment = ""', 'treatment = "not_applicable"').replace('reason = ""', 'reason = "r"')
    (set_dir / "expectations" / "dispatch.toml").write_text(reviewed)
    again = subprocess.run([sys.executable, "-m", "patchkit", "dispatch-sites", "--set", str(set_dir),
                            "--target", str(tree), "--json"], capture_output=True, text=True, env=env)
    doc = json.loads(again.stdout)
    assert again.returncode == 0 and doc["result"]["kept"] == 2 and doc["result"]["added"] == 0
    assert (set_dir / "expectations" / "dispatch.toml").read_text() == reviewed
