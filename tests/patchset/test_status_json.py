"""patchkit status, and the --json envelope contract (its keys are pinned here)."""

from __future__ import annotations

import json

from tests.patchset import helpers

ENVELOPE_KEYS = ["patchkit", "command", "ok", "exit_code", "result"]
ERROR_ENVELOPE_KEYS = ["patchkit", "command", "ok", "exit_code", "error"]
ERROR_KEYS = ["type", "message", "hint", "file", "line", "log"]
STATUS_KEYS = ["target", "set", "base_ok", "base_commit", "state", "applied", "missing", "drift", "journal", "fix"]
APPLY_KEYS = ["target", "set", "state", "head_before", "head_after", "patches", "conflict", "drift", "recovered",
              "fix"]


def status(fx):
    return helpers.invoke_json("status", "--set", str(fx.set_dir), "--target", str(fx.target))


def test_status_on_base_applied_and_drifted(fx):
    code, doc = status(fx)
    assert list(doc) == ENVELOPE_KEYS and list(doc["result"]) == STATUS_KEYS
    assert (code, doc["ok"], doc["result"]["state"], doc["result"]["base_ok"]) == (1, False, "base", True)
    assert len(doc["result"]["missing"]) == 5

    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    code, doc = status(fx)
    assert (code, doc["ok"], doc["result"]["state"]) == (0, True, "applied")
    assert [a["patch"] for a in doc["result"]["applied"]][0] == "0001-Patch-f2-in-core.patch"
    assert all(a["matches"] and a["set"] == "tiny@1.0.0" for a in doc["result"]["applied"])
    assert doc["result"]["drift"] == [] and doc["result"]["base_commit"] == fx.base_commit

    (fx.target / "pkg/new_name.py").unlink()
    code, doc = status(fx)
    assert (code, doc["result"]["state"]) == (1, "drift")
    reasons = {d["path"]: d["reason"] for d in doc["result"]["drift"]}
    assert reasons["pkg/new_name.py"] in ("missing", "uncommitted: D")


def test_status_flags_a_commit_whose_content_differs_from_its_patch(fx):
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    repo = fx.repo()
    (fx.target / "pkg/extra.py").write_text("changed\n")
    repo.run("add", "-A")
    message = repo.commit_message("HEAD")
    env = helpers.identity_env("Ada Lovelace", "ada@example.org", "2026-02-05T10:00:00+0000")
    amended = repo.run("commit-tree", repo.run("write-tree"), "-p", "HEAD^", "-F", "-", env=env, input=message)
    repo.run("reset", "-q", "--hard", amended)
    code, doc = status(fx)
    assert code == 1
    matches = {a["patch"]: a["matches"] for a in doc["result"]["applied"]}
    assert matches["0005-Patch-run.sh-and-f9.patch"] is False and matches["0001-Patch-f2-in-core.patch"] is True
    assert "DIFFERS" in helpers.invoke("status", "--set", str(fx.set_dir), "--target", str(fx.target)).output


def test_apply_envelope_keys_are_pinned(fx):
    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert code == 0
    assert list(doc) == ENVELOPE_KEYS
    assert doc["patchkit"] == 1 and doc["command"] == "apply" and doc["ok"] is True and doc["exit_code"] == 0
    assert list(doc["result"]) == APPLY_KEYS
    assert list(doc["result"]["patches"][0]) == ["patch", "subject", "commit"]


def test_error_envelope_keys_are_pinned(fx, tmp_path):
    proc = helpers.run_cli("apply", "--set", str(tmp_path / "nope"), "--target", str(fx.target), "--json")
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert list(doc) == ERROR_ENVELOPE_KEYS and list(doc["error"]) == ERROR_KEYS
    assert (doc["patchkit"], doc["command"], doc["ok"], doc["exit_code"]) == (1, "apply", False, 2)
    assert "manifest.toml not found" in doc["error"]["message"]


def test_plain_output_when_not_a_terminal(fx):
    proc = helpers.run_cli("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert proc.returncode == 0
    assert "\x1b[" not in proc.stdout + proc.stderr
    assert proc.stdout.startswith("applied 5 patches of tiny@1.0.0")


def test_status_names_partial_and_dirty_base(fx):
    (fx.target / "stray.txt").write_text("x")
    code, doc = status(fx)
    assert (code, doc["result"]["state"]) == (1, "drift")
    assert {"path": "stray.txt", "reason": "uncommitted: ??"} in doc["result"]["drift"]
    (fx.target / "stray.txt").unlink()
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    fx.repo().run("reset", "-q", "--hard", "HEAD~3")
    code, doc = status(fx)
    assert (code, doc["result"]["state"]) == (1, "partial")
    assert [a["patch"][:4] for a in doc["result"]["applied"]] == ["0001", "0002"]
    assert [m[:4] for m in doc["result"]["missing"]] == ["0003", "0004", "0005"]
