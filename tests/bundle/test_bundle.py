"""``patchkit bundle`` offline: a local wheel index of tiny fake distributions, real pip, real venv."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def make_wheel(index: Path, name: str, version: str, requires=(), files=None) -> Path:
    """A minimal valid py3-none-any wheel."""
    module = name.replace("-", "_")
    files = files or {f"{module}/__init__.py": b"VERSION = %r\n" % version}
    info = f"{module}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    members = {**files, f"{info}/METADATA": metadata.encode(),
               f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(_record_line(n, d) for n, d in members.items()) + f"{info}/RECORD,,\n"
    path = index / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in members.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("index")
    make_wheel(root, "sglang", "0.5.12",
               requires=["torch==2.11.0", "numpy>=2", "flashinfer-python==0.5.0", "tinydep>=1"],
               files={"sglang/__init__.py": b"", "sglang/launch_server.py": b"",
                      "sglang/big/fa3.so": b"\0" * 4096, "sglang/big/keep.txt": b"kept"})
    for name, version in [("torch", "2.11.0"), ("torch", "2.13.0"), ("numpy", "2.0.0"), ("numpy", "2.1.0"),
                          ("flashinfer-python", "0.5.0"), ("tinydep", "1.0"), ("tinydep", "2.0")]:
        make_wheel(root, name, version)
    return root


def clean_environ() -> dict[str, str]:
    """The environment without the caller's pip settings, so only the test index is seen."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}


def run_bundle(tmp_path, index, *args):
    env = {**clean_environ(), "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path / "home"),
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_NO_CACHE_DIR": "1"}
    argv = [sys.executable, "-m", "patchkit", "bundle", "--no-index", "--find-links", str(index), "--json", *args]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    doc = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    return done, doc


def freeze_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "host-freeze.txt"
    path.write_text(text)
    return path


HOST = "torch==2.11.0\nnumpy==2.0.0\n-e git+https://example.invalid/x.git#egg=x\nlocalpkg @ file:///nonexistent/localpkg\n"


def test_bundles_what_the_host_lacks_with_hashes(tmp_path, index):
    out = tmp_path / "bundle"
    done, doc = run_bundle(tmp_path, index, "--out", str(out), "--freeze", str(freeze_file(tmp_path, HOST)))
    assert done.returncode == 0, done.stderr
    result = doc["result"]
    assert sorted((w["name"], w["version"]) for w in result["wheels"]) == [
        ("flashinfer-python", "0.5.0"), ("sglang", "0.5.12"), ("tinydep", "2.0")]
    assert result["skipped_host_packages"] == ["numpy==2.0.0", "torch==2.11.0"]
    for wheel in result["wheels"]:
        assert hashlib.sha256((out / wheel["file"]).read_bytes()).hexdigest() == wheel["sha256"]
    assert sorted(p.name for p in (out / "wheels").iterdir()) == sorted(Path(w["file"]).name for w in result["wheels"])
    lock = (out / "requirements.lock").read_text().splitlines()
    assert len(lock) == 3 and all("--hash=sha256:" in line for line in lock)
    assert json.loads((out / "bundle.json").read_text()) == result


def test_install_command_works_offline_and_checks_imports(tmp_path, index):
    out = tmp_path / "bundle"
    done, doc = run_bundle(tmp_path, index, "--out", str(out), "--have", "torch==2.11.0", "--have", "numpy==2.0.0",
                           "--drop", "sglang:sglang/big/*.so")
    assert done.returncode == 0, done.stderr
    sglang = next(w for w in doc["result"]["wheels"] if w["name"] == "sglang")
    assert sglang["dropped_members"] == [
        {"path": "sglang/big/fa3.so", "size": 4096, "reason": "--drop on the command line"}]
    assert sglang["original_sha256"] != sglang["sha256"] and sglang["original_size"] > sglang["size"]
    with zipfile.ZipFile(out / sglang["file"]) as wheel:
        assert "sglang/big/fa3.so" not in wheel.namelist() and "sglang/big/keep.txt" in wheel.namelist()
        assert "fa3.so" not in wheel.read("sglang-0.5.12.dist-info/RECORD").decode()
    installed, site = install_on_host(tmp_path, out)
    assert "imports checked: sglang sglang.launch_server" in installed.stdout
    assert f"export PYTHONPATH={site}" in installed.stdout.splitlines()
    assert sorted(os.listdir(site / "sglang" / "big")) == ["keep.txt"]


def install_on_host(tmp_path: Path, out: Path):
    """Run the bundle's install.sh with a fresh venv's python as the host's, SITE under tmp_path."""
    venv, site = tmp_path / "host", tmp_path / "site"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**clean_environ(), "HOME": str(tmp_path / "home"), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"}
    env.pop("PYTHONPATH", None)
    installed = subprocess.run(["sh", str(out / "install.sh"), str(venv / "bin" / "python"), str(site)],
                               capture_output=True, text=True, env=env, timeout=300)
    assert installed.returncode == 0, installed.stderr
    return installed, site


def test_exclude_leaves_a_distribution_out(tmp_path, index):
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--have", "torch==2.11.0",
                           "--exclude", "flashinfer_python")
    assert done.returncode == 0, done.stderr
    names = {w["name"] for w in doc["result"]["wheels"]}
    assert "flashinfer-python" not in names and "numpy" in names  # numpy not on the host here
    assert doc["result"]["excluded"] == ["flashinfer-python"]


def test_host_version_conflict_fails_with_pips_reason(tmp_path, index):
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--have", "numpy==1.0.0")
    assert done.returncode == 1
    message = doc["error"]["message"]
    assert "could not resolve" in message
    assert "sglang 0.5.12 depends on numpy>=2" in message and "numpy==1.0.0" in message
    assert not (tmp_path / "b").exists()


def test_bad_freeze_line_names_file_and_line(tmp_path, index):
    freeze = freeze_file(tmp_path, "torch==2.11.0\nthis is not a pin\n")
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--freeze", str(freeze))
    assert done.returncode == 2
    assert doc["error"]["file"] == str(freeze) and doc["error"]["line"] == 2
