"""Bad input is exit 2 with a message naming the file and line, never exit 3 and a bare exception. (The read-only and immutable targets are in test_recovery.py, concurrent applies in
test_locks_and_home.py; `verify --junit` belongs to the verify tests.)"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.patchset import helpers

LATIN1 = "caf\xe9".encode("latin-1")  # not UTF-8


def run(fx, *args):
    return helpers.run_cli(*args, "--set", str(fx.set_dir), "--target", str(fx.target), "--json")


def assert_exit_2_at(done, file, line, words):
    assert done.returncode == 2, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert (error["file"], error["line"]) == (str(file), line), error
    assert words in error["message"]
    assert "Traceback" not in done.stderr and error["log"] is None


@pytest.mark.parametrize("command", ["apply", "status", "refresh"])
def test_a_series_that_is_not_utf8_is_exit_2_at_its_line(fx, command):
    series = fx.set_dir / "series"
    series.write_bytes(series.read_bytes() + b"# " + LATIN1 + b"\n")
    line = series.read_bytes().count(b"\n")
    assert_exit_2_at(run(fx, command), series, line, "series is not valid UTF-8: byte 0xe9")


def test_a_patch_header_that_is_not_utf8_is_exit_2_at_its_line(fx):
    """Regression: a latin-1 subject crashed apply with UnicodeEncodeError (exit 3) after `lock` took it."""
    patch = fx.set_dir / "0001-Patch-f2-in-core.patch"
    data = patch.read_bytes().replace(b"Subject: [PATCH] Patch f2 in core", b"Subject: [PATCH] Patch f2 in " + LATIN1)
    patch.write_bytes(data)
    line = data[: data.index(LATIN1)].count(b"\n") + 1
    done = helpers.run_cli("lock", "--set", str(fx.set_dir), "--base", str(fx.target), "--json")
    assert_exit_2_at(done, patch, line, "patch header is not valid UTF-8")
    assert_exit_2_at(run(fx, "apply"), patch, line, "patch header is not valid UTF-8")
    assert fx.head() == fx.base_commit


def test_a_manifest_that_is_not_utf8_is_exit_2_at_its_line(fx):
    manifest = fx.set_dir / "manifest.toml"
    manifest.write_bytes(b"# " + LATIN1 + b"\n" + manifest.read_bytes())
    done = run(fx, "apply")
    assert done.returncode == 2, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["file"] == str(manifest) and error["line"] == 1


def test_a_non_utf8_byte_inside_a_diff_is_content_not_an_error(fx):
    """Latin-1 source files exist upstream: only the header must be UTF-8."""
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    (fx.target / "pkg/latin1.py").write_bytes(b"# " + LATIN1 + b"\n")
    helpers.commit_all(fx.repo(), "Add a latin-1 file\n", "2026-03-01T00:00:00+0000")
    code, doc = helpers.invoke_json("refresh", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert code == 0, doc
    fresh = fx.target.parent / "fresh"
    assert helpers.invoke("base", "fetch", "--set", str(fx.set_dir), "--dest", str(fresh)).exit_code == 0
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fresh)).exit_code == 0
    assert (fresh / "pkg/latin1.py").read_bytes() == b"# " + LATIN1 + b"\n"


def test_an_unexpected_git_failure_is_exit_3_with_a_crash_log(fx, tmp_path):
    """Anything we did not foresee is ours to explain: exit 3 and a log, not 'a check failed' (exit 1)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    wrapper = fake / "git"  # a git whose patch-id breaks, as a corrupt installation would
    wrapper.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = patch-id ] && exit 71; done\n'
                       f'exec {shutil.which("git")} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    done = helpers.run_cli("status", "--set", str(fx.set_dir), "--target", str(fx.target), "--json",
                           env={"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "GitFailed" and "patch-id" in error["message"] and "exit code 71" in error["message"]
    assert error["log"] and "Traceback" in Path(error["log"]).read_text()
