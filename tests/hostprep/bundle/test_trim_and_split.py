"""``patchkit bundle`` trim rules and ``--split-mib``, through the CLI with real pip on a local index: a
kernel wheel whose FA3 library is a small synthetic CUDA host library (tests/hostprep/fatbins.py)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.hostprep.bundle.test_bundle import (
    KERNEL_MEMBERS,
    PROFILE_SET,
    clean_environ,
    host_venv,
    install_on_host,
    make_wheel,
    pip_only,  # noqa: F401 (a fixture)
    record_rows_verify,
    run_bundle,
)
from tests.hostprep.fatbins import KEEP, UNITS, library

pytestmark = pytest.mark.long

LIBRARY = bytes(library(UNITS).data)
MEMBER = "sgl_kernel/flash_ops.abi3.so"


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("index")
    make_wheel(root, "sglang", "0.5.12", files={"sglang/__init__.py": b"", "sglang/launch_server.py": b""})
    for name, version in [("transformers", "5.6.0"), ("fastapi", "0.136.0"), ("click", "8.1.7")]:
        make_wheel(root, name, version)
    make_wheel(root, "sglang-kernel", "0.4.2.post2", files={**KERNEL_MEMBERS, MEMBER: LIBRARY})
    big = hashlib.sha256(b"seed").digest()
    noise = b"".join(hashlib.sha256(big + i.to_bytes(4, "little")).digest() for i in range((5 << 20) // 64))
    make_wheel(root, "bigdep", "1.0", files={"bigdep/__init__.py": b"", "bigdep/blob.bin": noise[:(5 << 20) // 2]})
    return root


def kernel_wheel_sha(index: Path) -> str:
    return hashlib.sha256(next(index.glob("sglang_kernel-*.whl")).read_bytes()).hexdigest()


def trim_set(tmp_path: Path, index: Path, *, wheel_sha256: str | None = None, entry: str | None = None) -> Path:
    sha = wheel_sha256 or kernel_wheel_sha(index)
    rule = entry or (f'{{ member = "{MEMBER}", archs = [90], keep = "{KEEP}", wheel_sha256 = "{sha}", '
                     'reason = "FA3 for the test model" }')
    folder = tmp_path / "set"
    folder.mkdir(parents=True)
    (folder / "manifest.toml").write_text(PROFILE_SET + f"""
[bundle.profiles.fa3]
extends = "srv"

[bundle.profiles.fa3.trim]
"sglang-kernel" = [
    {rule},
]
""")
    return folder


def trimmed_library() -> bytes:
    built, data = library(UNITS), bytearray(LIBRARY)
    for unit, payloads in enumerate(built.payloads):
        for number, (offset, size) in enumerate(payloads):
            if (unit, number) not in {(0, 0), (1, 0)}:
                data[offset:offset + size] = bytes(size)
    return bytes(data)


def test_a_trim_profile_ships_the_library_trimmed_with_its_record_and_installs(tmp_path, index, pip_only):  # noqa: F811
    out = tmp_path / "bundle"
    done, doc = run_bundle(tmp_path, index, "--out", str(out), "--set", str(trim_set(tmp_path, index)),
                           "--profile", "fa3", "--python-version", "3.11")
    assert done.returncode == 0, done.stderr
    kernel = next(w for w in doc["result"]["wheels"] if w["name"] == "sglang-kernel")
    assert MEMBER not in [d["path"] for d in kernel["dropped_members"]]  # srv's slim glob yields to the trim rule
    assert "sgl_kernel/sm100/common_ops.abi3.so" in [d["path"] for d in kernel["dropped_members"]]
    assert kernel["unmatched_globs"] == ["lib64/*"]
    assert kernel["original_sha256"] == kernel_wheel_sha(index)
    record, = kernel["trimmed_members"]
    expected = trimmed_library()
    assert record["member"] == MEMBER and record["archs"] == [90] and record["keep"] == KEEP
    assert record["kept_units"] == ["flash_prepare_scheduler", "flash_fwd_hdim128_bf16_sm90"]
    assert record["source_sha256"] == hashlib.sha256(LIBRARY).hexdigest()
    assert record["sha256"] == hashlib.sha256(expected).hexdigest()
    assert record["wheel_sha256"] == kernel_wheel_sha(index) and record["wheel"].startswith("sglang_kernel-")
    wheel_path = out / kernel["file"]
    listed = record_rows_verify(wheel_path)  # every RECORD row true, the trimmed member's and its record's too
    assert MEMBER in listed and MEMBER + ".trim.json" in listed
    with zipfile.ZipFile(wheel_path) as wheel:
        assert wheel.read(MEMBER) == expected
        assert json.loads(wheel.read(MEMBER + ".trim.json")) == record
    assert json.loads((out / "bundle.json").read_text())["wheels"] == doc["result"]["wheels"]
    human, _ = run_bundle(tmp_path, index, "--out", str(tmp_path / "again"), "--set", str(tmp_path / "set"),
                          "--profile", "fa3", "--python-version", "3.11", as_json=False)
    assert f"{MEMBER}: kept 2 sm_90 images of 2 of 4 translation units" in human.stdout

    _, site = install_on_host(tmp_path, out, host_venv(tmp_path, pip_only))
    assert (site / MEMBER).read_bytes() == expected
    assert json.loads((site / (MEMBER + ".trim.json")).read_text())["kept_units"] == record["kept_units"]


def test_the_trimmed_archive_alone_is_reproducible_and_unpacks_over_a_site(tmp_path, index):
    folder = trim_set(tmp_path, index)
    archives = []
    for name in ("one", "two"):
        archive = tmp_path / name / "fa3-sm90-bf16.tar.xz"
        done, doc = run_bundle(tmp_path, index, "--set", str(folder), "--profile", "fa3", "--trimmed-archive",
                               str(archive), "--python-version", "3.11")
        assert done.returncode == 0, done.stderr
        assert doc["result"]["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
        archives.append(archive.read_bytes())
    assert archives[0] == archives[1]
    with tarfile.open(fileobj=io.BytesIO(archives[0]), mode="r:xz") as packed:
        members = packed.getmembers()
        assert [(m.name, m.mode, m.uid, m.gid, m.uname) for m in members] == [
            (MEMBER, 0o755, 0, 0, ""), (MEMBER + ".trim.json", 0o644, 0, 0, "")]
        assert packed.extractfile(members[0]).read() == trimmed_library()
        record = json.loads(packed.extractfile(members[1]).read())
    assert record == doc["result"]["members"][0] and record["wheel_sha256"] == kernel_wheel_sha(index)
    assert not list((tmp_path / "one").glob("*.partial"))


def test_a_trim_rule_written_for_another_wheel_is_refused(tmp_path, index):
    folder = trim_set(tmp_path, index, wheel_sha256="0" * 64)
    archive = tmp_path / "fa3-sm90-bf16.tar.xz"
    done, doc = run_bundle(tmp_path, index, "--set", str(folder), "--profile", "fa3", "--trimmed-archive",
                           str(archive), "--python-version", "3.11")
    assert done.returncode == 2
    message = doc["error"]["message"]
    assert f"has sha256 {kernel_wheel_sha(index)}, but the trim rule for {MEMBER} was written for {'0' * 64}" \
        in message
    assert not archive.exists()


@pytest.mark.parametrize(("entry", "words"), [
    (f'{{ member = "{MEMBER}", archs = [90], keep = "x" }}', "every entry must be { member = "),
    (f'{{ member = "{MEMBER}", archs = [90], keep = "(", reason = "r" }}', "keep is not a regular expression"),
    (f'{{ member = "{MEMBER}", archs = ["sm90"], keep = "x", reason = "r" }}', "every entry must be"),
])
def test_a_bad_trim_rule_names_the_manifest_line(tmp_path, index, entry, words):
    folder = trim_set(tmp_path, index, entry=entry)
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set", str(folder), "--profile", "fa3")
    assert done.returncode == 2 and words in doc["error"]["message"], doc
    text = (folder / "manifest.toml").read_text().splitlines()
    assert doc["error"]["file"] == str(folder / "manifest.toml")
    assert text[doc["error"]["line"] - 1].startswith('"sglang-kernel" = [')
    assert not (tmp_path / "b").exists()


def test_extends_refuses_a_cycle_and_profiles_refuse_unknown_keys(tmp_path, index):
    folder = trim_set(tmp_path, index)
    manifest = folder / "manifest.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('[bundle.profiles.srv]\n', '[bundle.profiles.srv]\nextends = "fa3"\n'))
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set", str(folder), "--profile", "fa3")
    assert done.returncode == 2 and "extends 'fa3' makes a cycle (fa3 -> srv -> fa3)" in doc["error"]["message"]
    manifest.write_text(PROFILE_SET.replace("check_imports =", "trimm = 1\ncheck_imports ="))
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--set", str(folder), "--profile", "srv")
    assert done.returncode == 2 and "unknown key 'trimm'" in doc["error"]["message"]
    assert manifest.read_text().splitlines()[doc["error"]["line"] - 1] == "trimm = 1"


# ---------------------------------------------------------------- --split-mib


def split_bundle(tmp_path: Path, index: Path) -> tuple[Path, dict]:
    out = tmp_path / "bundle"
    done, doc = run_bundle(tmp_path, index, "--out", str(out), "--requirement", "bigdep==1.0", "--check-import",
                           "bigdep", "--split-mib", "1")
    assert done.returncode == 0, done.stderr
    return out / "parts", doc["result"]["parts"]


def install_parts(folder: Path, host_python: Path, site: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**clean_environ(), "HOME": str(home), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(["sh", str(folder / "install-parts.sh"), str(host_python), str(site)], capture_output=True,
                          text=True, env=env, timeout=300)


def test_split_parts_fit_the_limit_and_install_together(tmp_path, index, pip_only):  # noqa: F811
    parts_dir, parts = split_bundle(tmp_path, index)
    names = [p["name"] for p in parts["parts"]]
    assert names == [f"bundle.tar.{i:03d}" for i in range(len(names))] and len(names) == 3
    sizes = {p["name"]: (parts_dir / p["name"]).stat().st_size for p in parts["parts"]}
    small = (parts_dir / "PARTS").stat().st_size + (parts_dir / "install-parts.sh").stat().st_size
    assert sizes[names[0]] + small <= 1 << 20 and all(size <= 1 << 20 for size in sizes.values())
    for part in parts["parts"]:
        assert hashlib.sha256((parts_dir / part["name"]).read_bytes()).hexdigest() == part["sha256"]
    joined = b"".join((parts_dir / name).read_bytes() for name in names)
    assert hashlib.sha256(joined).hexdigest() == parts["sha256"] and len(joined) == parts["size"]
    with tarfile.open(fileobj=io.BytesIO(joined)) as stream:
        assert {"bundle/install.sh", "bundle/bundle.json", "bundle/requirements.lock"} <= set(stream.getnames())

    host = tmp_path / "host"  # only what travels: the parts, PARTS and install-parts.sh
    shutil.copytree(parts_dir, host)
    installed = install_parts(host, host_venv(tmp_path, pip_only), tmp_path / "site", tmp_path / "home")
    assert installed.returncode == 0, installed.stderr
    assert "install-parts.sh: 3 parts checked and joined" in installed.stdout
    assert "imports checked: bigdep" in installed.stdout
    blob = next(index.glob("bigdep-*.whl"))
    with zipfile.ZipFile(blob) as wheel:
        assert (tmp_path / "site" / "bigdep" / "blob.bin").read_bytes() == wheel.read("bigdep/blob.bin")


def test_install_parts_refuses_a_missing_or_corrupt_part_by_name(tmp_path, index, pip_only):  # noqa: F811
    parts_dir, parts = split_bundle(tmp_path, index)
    python = host_venv(tmp_path, pip_only)
    missing = tmp_path / "missing"
    shutil.copytree(parts_dir, missing)
    (missing / "bundle.tar.001").unlink()
    refused = install_parts(missing, python, tmp_path / "site", tmp_path / "home")
    assert refused.returncode == 2
    assert "install-parts.sh: part bundle.tar.001 is missing (copy it next to this script)" in refused.stderr
    assert "nothing unpacked" in refused.stderr and not (missing / "bundle").exists()

    corrupt = tmp_path / "corrupt"
    shutil.copytree(parts_dir, corrupt)
    data = bytearray((corrupt / "bundle.tar.002").read_bytes())
    data[100] ^= 1
    (corrupt / "bundle.tar.002").write_bytes(bytes(data))
    refused = install_parts(corrupt, python, tmp_path / "site", tmp_path / "home")
    expected = parts["parts"][2]["sha256"]
    assert refused.returncode == 2 and f"part bundle.tar.002 is corrupt: sha256 {hashlib.sha256(data).hexdigest()}, " \
        f"expected {expected} (copy it again)" in refused.stderr
    assert not (corrupt / "bundle").exists() and not (tmp_path / "site").exists()


def test_split_mib_below_one_is_refused(tmp_path, index):
    done, doc = run_bundle(tmp_path, index, "--out", str(tmp_path / "b"), "--requirement", "bigdep==1.0",
                           "--split-mib", "0")
    assert done.returncode == 2 and "--split-mib 0: a part must be at least 1 MiB" in doc["error"]["message"]
    assert not (tmp_path / "b").exists()
