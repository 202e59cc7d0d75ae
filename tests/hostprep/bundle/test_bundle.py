"""``patchkit bundle`` offline: a local wheel index of tiny fake distributions, real pip, real venv."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.long  # a minute or more: scheduled first (conftest.py)

REPO_ROOT = Path(__file__).resolve().parents[2]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def make_wheel(index: Path, name: str, version: str, requires=(), files=None, tag="py3-none-any") -> Path:
    """A minimal valid wheel (py3-none-any unless ``tag`` says otherwise)."""
    module = name.replace("-", "_")
    files = files or {f"{module}/__init__.py": b"VERSION = %r\n" % version}
    info = f"{module}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    members = {**files, f"{info}/METADATA": metadata.encode(),
               f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()}
    record = "".join(_record_line(n, d) for n, d in members.items()) + f"{info}/RECORD,,\n"
    path = index / f"{module}-{version}-{tag}.whl"
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
                          ("flashinfer-python", "0.5.0"), ("tinydep", "1.0"), ("tinydep", "2.0"),
                          ("transformers", "5.6.0"), ("transformers", "5.17.0"), ("fastapi", "0.136.0"),
                          ("fastapi", "0.165.0"), ("click", "8.1.7")]:
        make_wheel(root, name, version)
    make_wheel(root, "sglang-kernel", "0.4.2.post2", files=KERNEL_MEMBERS)
    make_wheel(root, "oldglibc", "1.0", tag="cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64")
    make_wheel(root, "newglibc", "1.0", tag="cp312-cp312-manylinux_2_39_x86_64")
    return root


KERNEL_MEMBERS = {
    "sgl_kernel/__init__.py": b"from sgl_kernel import sm90\n",
    "sgl_kernel/sm90/__init__.py": b"", "sgl_kernel/sm90/common_ops.abi3.so": b"\1" * 300,
    "sgl_kernel/sm100/common_ops.abi3.so": b"\2" * 200, "sgl_kernel/flash_ops.abi3.so": b"\0" * 5000,
    "lib/libmscclpp.so": b"\3" * 100, "include/mscclpp/core.hpp": b"// header\n",
    "triton_kernels/__init__.py": b"",
}


def clean_environ() -> dict[str, str]:
    """The environment without the caller's pip settings, so only the test index is seen."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}


def run_bundle(tmp_path, index, *args, as_json=True):
    env = {**clean_environ(), "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path / "home"),
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_NO_CACHE_DIR": "1", "COLUMNS": "200"}
    argv = [sys.executable, "-m", "patchkit", "bundle", "--no-index", "--find-links", str(index),
            *(["--json"] if as_json else []), *args]
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


def test_install_command_works_offline_and_checks_imports(tmp_path, index, pip_only):
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
    installed, site = install_on_host(tmp_path, out, host_venv(tmp_path, pip_only))
    assert "imports checked: sglang sglang.launch_server" in installed.stdout
    assert f"export PYTHONPATH={site}" in installed.stdout.splitlines()
    assert sorted(os.listdir(site / "sglang" / "big")) == ["keep.txt"]


@pytest.fixture(scope="module")
def pip_only(tmp_path_factory) -> Path:
    """A folder holding only a copy of pip, for host venvs made without ensurepip (seconds faster each)."""
    import pip

    root = tmp_path_factory.mktemp("pip-only")
    shutil.copytree(Path(pip.__file__).parent, root / "pip", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def host_venv(tmp_path: Path, pip_only: Path) -> Path:
    """A fresh venv standing in for the GPU host's Python: its own empty site-packages, plus pip."""
    venv = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "test-pip.pth").write_text(f"{pip_only}\n")
    return venv / "bin" / "python"


def run_install(out: Path, host_python: Path, site: Path, *more: Path | str, home: Path) -> subprocess.CompletedProcess:
    """The bundle's install.sh as the host runs it (offline, no PYTHONPATH)."""
    env = {**clean_environ(), "HOME": str(home / "home"), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(["sh", str(out / "install.sh"), str(host_python), str(site), *map(str, more)],
                          capture_output=True, text=True, env=env, timeout=300)


def install_on_host(tmp_path: Path, out: Path, host_python: Path):
    """Run the bundle's install.sh with ``host_python`` as the host's, SITE under tmp_path."""
    site = tmp_path / "site"
    installed = run_install(out, host_python, site, home=tmp_path)
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


# ---------------------------------------------------------------- profiles from the set's manifest

PROFILE_SET = """\
[set]
name = "demo"
version = "1.0.0"
description = "a set for the bundle tests"
python = ["3.11", "3.12"]

[base]
kind = "pypi"

[base.pypi]
package = "sglang"
version = "0.5.12"
wheel = "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl"
sha256 = "4ed786a38655851fd055ef57380c34d29b87753b53f63457309f51e5bf48c2e6"
layout = { "sglang/" = "python/sglang/" }

[bundle.profiles.srv]
requirements = ["transformers==5.6.0", "sglang-kernel==0.4.2.post2", "fastapi<=0.136.0", "click>=8.1,<9"]
check_imports = ["sgl_kernel", "transformers", "sglang", "sglang.launch_server"]

[bundle.profiles.srv.slim]
"sglang-kernel" = [
    { glob = "sgl_kernel/flash_ops.abi3.so", reason = "FA3 only" },
    { glob = "sgl_kernel/sm100/*", reason = "not Hopper" },
    { glob = "lib/*", reason = "mscclpp only" },
    { glob = "include/*", reason = "build time" },
    { glob = "lib64/*", reason = "build time" },
]
"""


def profile_set(tmp_path: Path, text: str = PROFILE_SET) -> Path:
    folder = tmp_path / "set"
    folder.mkdir(parents=True)
    (folder / "manifest.toml").write_text(text)
    return folder


def record_rows_verify(wheel_path: Path) -> list[str]:
    """Every RECORD row's hash and size match the member's bytes; returns the listed paths."""
    with zipfile.ZipFile(wheel_path) as wheel:
        record_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
        listed = []
        for line in wheel.read(record_name).decode().splitlines():
            path, digest, size = line.split(",")
            listed.append(path)
            if path == record_name:
                continue
            assert _record_line(path, wheel.read(path)) == f"{path},{digest},{size}\n"
        assert sorted(listed) == sorted(wheel.namelist())
    return listed


def test_profile_bundles_the_declared_list_slimmed_not_sglangs_dependencies(tmp_path, index):
    out = tmp_path / "bundle"
    done, doc = run_bundle(tmp_path, index, "--out", str(out), "--set", str(profile_set(tmp_path)),
                           "--profile", "srv", "--python-version", "3.11", "--have", "click==8.1.7")
    assert done.returncode == 0, done.stderr
    result = doc["result"]
    assert sorted((w["name"], w["version"]) for w in result["wheels"]) == [
        ("fastapi", "0.136.0"), ("sglang", "0.5.12"), ("sglang-kernel", "0.4.2.post2"), ("transformers", "5.6.0")]
    assert result["profile"] == "srv" and result["skipped_host_packages"] == ["click==8.1.7"]
    kernel = next(w for w in result["wheels"] if w["name"] == "sglang-kernel")
    assert [(d["path"], d["size"], d["reason"]) for d in kernel["dropped_members"]] == [
        ("sgl_kernel/sm100/common_ops.abi3.so", 200, "not Hopper"), ("sgl_kernel/flash_ops.abi3.so", 5000, "FA3 only"),
        ("lib/libmscclpp.so", 100, "mscclpp only"), ("include/mscclpp/core.hpp", 10, "build time")]
    assert kernel["unmatched_globs"] == ["lib64/*"]
    path = out / kernel["file"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == kernel["sha256"] != kernel["original_sha256"]
    assert path.stat().st_size == kernel["size"] < kernel["original_size"]
    listed = record_rows_verify(path)
    assert "sgl_kernel/sm90/common_ops.abi3.so" in listed and "triton_kernels/__init__.py" in listed
    assert not any(p.startswith(("lib/", "include/", "sgl_kernel/sm100/")) for p in listed)


def test_profile_for_another_python_needs_the_tree(tmp_path, index):
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set", str(profile_set(tmp_path)),
                           "--profile", "srv", "--python-version", "3.12")
    assert done.returncode == 2
    assert "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl does not install on Python 3.12" in doc["error"]["message"]
    assert "--tree" in doc["error"]["hint"] and not (tmp_path / "b").exists()
    (tmp_path / "not-a-tree").mkdir()
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set", str(tmp_path / "set"),
                           "--profile", "srv", "--python-version", "3.12", "--tree", str(tmp_path / "not-a-tree"))
    assert done.returncode == 2 and "has no python/sglang/" in doc["error"]["message"]
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--tree", str(tmp_path / "not-a-tree"))
    assert done.returncode == 2 and "--tree only goes with --profile" in doc["error"]["message"]
    assert not (tmp_path / "b").exists()


def test_profile_ships_the_tree_and_shadows_a_conflicting_host_version(tmp_path, index, pip_only):
    tree = tmp_path / "tree"
    (tree / "python" / "sglang").mkdir(parents=True)
    (tree / "python" / "sglang" / "__init__.py").write_text("PATCHED = True\n")
    (tree / "python" / "sglang" / "launch_server.py").write_text("import transformers\nassert transformers.VERSION == '5.6.0'\n")
    (tree / "python" / "sglang" / "__pycache__").mkdir()
    (tree / "python" / "sglang" / "__pycache__" / "x.pyc").write_bytes(b"stale")
    out = tmp_path / "bundle"
    done, doc = run_bundle(tmp_path, index, "--out", str(out), "--set", str(profile_set(tmp_path)), "--profile", "srv",
                           "--python-version", "3.12", "--tree", str(tree), "--have", "transformers==5.17.0")
    assert done.returncode == 0, done.stderr
    result = doc["result"]
    assert "sglang" not in {w["name"] for w in result["wheels"]}
    assert ("transformers", "5.6.0") in {(w["name"], w["version"]) for w in result["wheels"]}
    assert result["shadowed_host_packages"] == ["transformers==5.17.0 (needs ==5.6.0)"]
    assert result["source_tree"] == {"path": "python", "files": 2, "reason": result["source_tree"]["reason"],
                                     "tree_id": None, "on_host": False}
    assert not (out / "python" / "sglang" / "__pycache__").exists()

    venv_python = host_venv(tmp_path, pip_only)
    env = {**clean_environ(), "PIP_CONFIG_FILE": os.devnull, "HOME": str(tmp_path / "home")}
    subprocess.run([str(venv_python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(index),
                    "transformers==5.17.0"], check=True, env=env)
    installed, site = install_on_host(tmp_path, out, venv_python)
    assert f"export PYTHONPATH={site}" in installed.stdout.splitlines()
    assert f"{out}/python" in installed.stdout  # says where sglang comes from
    env.pop("PYTHONPATH", None)
    version = [str(venv_python), "-c", "import transformers; print(transformers.VERSION)"]
    assert subprocess.run(version, capture_output=True, text=True, env=env).stdout.strip() == "5.17.0"
    shadowed = subprocess.run(version, capture_output=True, text=True, env={**env, "PYTHONPATH": str(site)})
    assert shadowed.stdout.strip() == "5.6.0"


def git_tree(path: Path, files: dict[str, str]) -> str:
    """A committed git tree holding ``files``; returns its tree id."""
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    if not (path / ".git").exists():
        subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "patched"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD^{tree}"], capture_output=True, text=True, check=True).stdout.strip()


def test_tree_on_host_ships_no_source_and_install_checks_the_hosts_tree(tmp_path, index, pip_only):
    sources = {"python/sglang/__init__.py": "PATCHED = True\n",
               "python/sglang/launch_server.py": "import transformers\n"}
    built = tmp_path / "tree"
    tree_id = git_tree(built, sources)
    out = tmp_path / "bundle"
    done, doc = run_bundle(tmp_path, index, "--out", str(out), "--set", str(profile_set(tmp_path)), "--profile", "srv",
                           "--python-version", "3.12", "--tree", str(built), "--tree-on-host")
    assert done.returncode == 0, done.stderr
    assert doc["result"]["source_tree"]["on_host"] is True and doc["result"]["source_tree"]["tree_id"] == tree_id
    assert doc["result"]["source_tree"]["files"] == 2 and not (out / "python").exists()
    assert doc["result"]["install_command"] == "sh install.sh PYTHON SITE [TREE]"

    venv_python = host_venv(tmp_path, pip_only)
    # first run, before the host has its tree (patchkit needs the bundle to build it): sglang waits
    first, site = install_on_host(tmp_path, out, venv_python)
    assert "not checked yet: sglang sglang.launch_server" in first.stdout
    assert "imports checked: sgl_kernel transformers\n" in first.stdout

    host_tree = tmp_path / "host-tree"  # the host applies the same set: same content, another commit
    assert git_tree(host_tree, sources) == tree_id
    second = run_install(out, venv_python, site, host_tree, home=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "imports checked: sgl_kernel transformers sglang sglang.launch_server" in second.stdout
    assert f"already installed in {site}" in second.stdout  # the first run's install is kept

    git_tree(host_tree, {"python/sglang/__init__.py": "PATCHED = False\n"})  # another set, or a drifted tree
    shutil.rmtree(site)
    third = run_install(out, venv_python, site, host_tree, home=tmp_path)
    assert third.returncode == 2 and f"this bundle was built for {tree_id}" in third.stderr
    assert not site.exists()  # refused before anything was installed


def test_tree_on_host_needs_a_git_tree(tmp_path, index):
    plain = tmp_path / "plain"
    (plain / "python" / "sglang").mkdir(parents=True)
    for extra in ([], ["--tree", str(plain)]):
        done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set",
                               str(tmp_path / "set" if (tmp_path / "set").exists() else profile_set(tmp_path)),
                               "--profile", "srv", "--python-version", "3.12", "--tree-on-host", *extra)
        assert done.returncode == 2
        assert ("not a git tree" if extra else "--tree-on-host needs --tree") in doc["error"]["message"]
        assert not (tmp_path / "b").exists()


def test_unknown_profile_and_slim_entry_without_reason_are_bad_input(tmp_path, index):
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set", str(profile_set(tmp_path)),
                           "--profile", "nope")
    assert done.returncode == 2 and "no profile 'nope'" in doc["error"]["message"] and "srv" in doc["error"]["message"]
    broken = PROFILE_SET.replace('{ glob = "lib/*", reason = "mscclpp only" }', '{ glob = "lib/*" }')
    folder = profile_set(tmp_path / "broken", broken)
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set", str(folder), "--profile", "srv")
    assert done.returncode == 2
    assert doc["error"]["file"] == str(folder / "manifest.toml")
    assert doc["error"]["line"] == broken.splitlines().index('"sglang-kernel" = [') + 1
    assert "glob" in doc["error"]["message"] and "reason" in doc["error"]["message"]


def test_human_report_names_overruled_host_versions_and_unmatched_globs(tmp_path, index):
    done, _ = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set", str(profile_set(tmp_path)),
                         "--profile", "srv", "--python-version", "3.11", "--have", "transformers==5.17.0",
                         as_json=False)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "host versions overruled (bundled, shadow the host's via PYTHONPATH): transformers==5.17.0 (needs ==5.6.0)" in text
    assert "warning: sglang-kernel: slim globs matched nothing (changed wheel?): lib64/*" in text
    assert "5 wheels," in text and "sh install.sh [PYTHON] [SITE]" in text


def test_a_newer_glibc_host_takes_wheels_for_older_glibc_but_not_newer(tmp_path, index):
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--requirement", "oldglibc==1.0",
                           "--python-version", "3.12", "--platform", "manylinux_2_34_x86_64")
    assert done.returncode == 0, done.stderr
    assert [Path(w["file"]).name for w in doc["result"]["wheels"]] == [
        "oldglibc-1.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"]
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "c"), "--requirement", "newglibc==1.0",
                           "--python-version", "3.12", "--platform", "manylinux_2_34_x86_64")
    assert done.returncode == 1 and "newglibc" in doc["error"]["message"]
