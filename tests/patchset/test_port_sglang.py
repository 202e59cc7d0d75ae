"""The real case: `patchkit port` carries ddtree_patches/v1 from SGLang 0.5.12 to 0.5.13 (both wheels from PyPI).

0.5.13 still has the v1 worker, but it rewrote much of what v1 touches, so six patches stop. Each is
resolved as tests/patchset/fixtures/port_v1_sglang_0.5.13/README.md says; the result must apply to
0.5.13 exactly and pass the static gates.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.patchset import helpers
from tests.patchset import port_fixture as pf

pytestmark = pytest.mark.slow

REAL_SET = helpers.REPO_ROOT / "ddtree_patches" / "v1"
RESOLUTIONS = Path(__file__).parent / "fixtures" / "port_v1_sglang_0.5.13"
PATCHES = [line for line in (REAL_SET / "series").read_text().splitlines() if line and not line.startswith("#")]
#: (status, resolution) per patch of v1, as the port meets 0.5.13.
EXPECTED = {
    "0001": ("clean", None),
    "0002": ("conflict", "resolved"),
    "0003": ("conflict", "resolved"),
    "0004": ("conflict", "resolved"),
    "0005": ("conflict", "resolved"),
    "0006": ("conflict", "resolved"),
    "0007": ("offset", None),
    "0008": ("clean", None),
    "0009": ("conflict", "resolved"),
}


@pytest.fixture(scope="session")
def sglang_home(tmp_path_factory) -> Path:
    """One patchkit home for the session: the wheels of 0.5.12 and 0.5.13, their base trees."""
    return tmp_path_factory.mktemp("port-sglang-home")


def port(*args: str, env: dict) -> dict:
    done = helpers.run_cli("port", *args, "--json", env=env)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return json.loads(done.stdout)["result"]


def test_v1_ports_to_sglang_0_5_13_with_a_report_and_a_verified_result(sglang_home, tmp_path):
    env = {"PATCHKIT_HOME": str(sglang_home)}
    src = tmp_path / "sets" / "v1"
    shutil.copytree(REAL_SET, src, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    # the shared core tests sit beside the sets, as in ddtree_patches/ (a set names ../common/...)
    shutil.copytree(REAL_SET.parent / "common", tmp_path / "sets" / "common",
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    out = tmp_path / "sets" / "v1-on-0.5.13"

    result = port("--set", str(src), "--to", "0.5.13", "--out", str(out), env=env)
    stops = []
    while result["state"] == "stopped":
        stop = result["stopped"]
        stops.append((stop["patch"][:4], stop["status"], tuple(stop["files"])))
        assert not out.exists(), "nothing is written while a patch is unresolved"
        pf.resolve_ours_then_edit(Path(stop["tree"]), stop["patch"], RESOLUTIONS)
        result = port("--continue", "--set", str(src), env=env)
    assert result["state"] == "ported", result

    report = result["report"]
    assert {p["patch"][:4]: (p["status"], p["resolution"]) for p in report["patches"]} == EXPECTED
    assert [s[0] for s in stops] == ["0002", "0003", "0004", "0005", "0006", "0009"]
    assert stops[0] == ("0002", "conflict", ("python/sglang/srt/speculative/spec_registry.py",))
    assert stops[1] == ("0003", "conflict", ("python/sglang/srt/server_args.py",))
    assert [p["new_patches"] for p in report["patches"]] == [[name] for name in PATCHES]
    assert (report["old_base"]["label"], report["new_base"]["label"]) == ("sglang 0.5.12", "sglang 0.5.13")
    upstream = {f["path"]: f for f in report["upstream"]}
    assert upstream["python/sglang/srt/server_args.py"]["change"] == "modified"
    silent = [h for h in upstream["python/sglang/srt/server_args.py"]["hunks"] if not h["near_set"]]
    assert len(silent) > 10, "0.5.13 changed server_args.py in many places the set does not touch"
    dispatch = report["dispatch"]
    # 0.5.12's dispatch sites: 117 branches on the algorithm, plus membership collections of algorithm
    # names and the family definitions
    assert dispatch["old_sites"] == 120, "the 0.5.12 base's sites (117 branches, plus collections and definitions)"
    assert dispatch["new_sites"] > 0 and dispatch["changes"]
    assert any(c["kind"] == "vanished" and c["declared"] for c in dispatch["changes"])
    manifest = (out / "manifest.toml").read_text()
    assert 'version = "0.5.13"' in manifest and "sglang-0.5.13-cp311-cp311-manylinux_2_34_x86_64.whl" in manifest
    assert "# ---------------------------------------------------------------- verify gates" in manifest
    markdown = (out / "port-report.md").read_text()
    assert "# Port of ddtree@1.1.0 to sglang 0.5.13" in markdown and str(tmp_path) not in markdown

    target = tmp_path / "sglang-0.5.13-ddtree"
    for command in (["base", "fetch", "--set", str(out), "--dest", str(target)],
                    ["apply", "--set", str(out), "--target", str(target)]):
        done = helpers.run_cli(*command, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(helpers.run_cli("status", "--set", str(out), "--target", str(target), "--json",
                                        env=env).stdout)["result"]
    assert status["state"] == "applied"
    verified = helpers.run_cli("verify", "--set", str(out), "--target", str(target), "--gate", "compile",
                               "--gate", "xref", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
