"""`patchkit symbols` prints xref's symbol table: where each family name is defined, imported, used."""

import json
import subprocess
import sys
from pathlib import Path

from patchkit.testing.verify import make_tree, write_manifest

REPO = Path(__file__).resolve().parents[3]


def test_symbol_table_names_definition_import_and_use(tmp_path):
    tree, base = make_tree(tmp_path / "tree", {}, {
        "python/pkg/__init__.py": "",
        "python/pkg/a.py": "class FooWorker:\n    def __init__(self, n):\n        self.n = n\n",
        "python/pkg/b.py": "from pkg.a import FooWorker\n\n\ndef make():\n    return FooWorker(3)\n",
    })
    set_dir = tmp_path / "set"
    write_manifest(set_dir, base, {"verify": {"xref": {"family": "Foo"}}})
    env = {"PYTHONPATH": str(REPO), "PATCHKIT_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "patchkit", "symbols", "--set", str(set_dir), "--target", str(tree),
                           "--json"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    table = {s["name"]: s for s in json.loads(done.stdout)["result"]["symbols"]}
    worker = table["FooWorker"]
    assert [p["file"] for p in worker["defined"]] == ["python/pkg/a.py"]
    assert [(p["file"], p["line"]) for p in worker["imported"]] == [("python/pkg/b.py", 1)]
    assert ("python/pkg/b.py", 5) in [(p["file"], p["line"]) for p in worker["used"]]
    human = subprocess.run([sys.executable, "-m", "patchkit", "symbols", "--set", str(set_dir), "--target", str(tree)],
                           capture_output=True, text=True, env=env)
    assert "FooWorker [class]" in human.stdout and "python/pkg/b.py:1" in human.stdout
