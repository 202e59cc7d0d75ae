"""testmodels needs torch and nothing else: without numpy (which torch does not require) it writes the
same bytes, and without torch it says what to install and exits 2, never an internal error."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BLOCKER = """\
import sys
class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Missing())
"""


def run_testmodels(out: Path, tmp_path: Path, *blocked: str) -> subprocess.CompletedProcess[str]:
    """``patchkit testmodels`` in a process where the ``blocked`` packages cannot be imported."""
    site = tmp_path / f"site-{'-'.join(blocked) or 'all'}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "PATCHKIT_HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "patchkit", "testmodels", "--out", str(out)], capture_output=True,
                          text=True, env=env, timeout=600)


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_without_numpy_the_models_are_written_byte_for_byte_the_same(tmp_path):
    import numpy  # noqa: F401 - the reference is written here, with numpy importable

    from patchkit.hostprep.testmodels import write_test_models

    write_test_models(tmp_path / "a")
    without = run_testmodels(tmp_path / "b", tmp_path, "numpy")
    assert without.returncode == 0, without.stderr
    assert digests(tmp_path / "a") == digests(tmp_path / "b") != {}


def test_without_torch_it_says_what_to_install_and_exits_2(tmp_path):
    done = run_testmodels(tmp_path / "out", tmp_path, "torch")
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "needs torch" in line and "pip install torch" in line
