"""Where patchkit writes: verify environments and gate results in the per-user cache (never in the
checkout's ``.patchkit/``), and ``clean --cache`` lists every cache a home may hold."""

from __future__ import annotations

from patchkit import paths
from patchkit.verify.run import build_context
from tests.patchset import helpers


def _checkout_without_home(template, tmp_path, monkeypatch):
    """A checkout (ddtree_patches/v1) as the working directory, no PATCHKIT_HOME: the home is
    <checkout>/.patchkit, the cache the user's (XDG_CACHE_HOME)."""
    _, _, set_dir = template
    root = tmp_path / "checkout"
    helpers.copy_set(set_dir, root / "ddtree_patches" / "v1")
    monkeypatch.delenv("PATCHKIT_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.chdir(root)
    return root


def test_verify_builds_environments_in_the_user_cache_not_in_the_checkout(template, tmp_path, monkeypatch):
    root = _checkout_without_home(template, tmp_path, monkeypatch)
    target = root / ".patchkit" / "trees" / "t"
    assert helpers.invoke("base", "fetch", "--dest", str(target)).exit_code == 0
    ctx = build_context(None, target)
    user_cache = (tmp_path / "user-cache" / "patchkit").resolve()
    assert ctx.env_dir == user_cache / "envs" and ctx.cache_dir == user_cache / "verify"
    assert not ctx.env_dir.is_relative_to(root) and not ctx.cache_dir.is_relative_to(root)


def test_clean_cache_lists_gate_results_of_the_shared_cache_and_of_an_older_home(template, tmp_path, monkeypatch):
    root = _checkout_without_home(template, tmp_path, monkeypatch)
    shared = paths.verify_cache_dir() / "gates" / "ab"
    older = root / ".patchkit" / "cache" / "verify" / "pyindex" / "cd"
    wheel = root / ".patchkit" / "cache" / "sglang-0.0.1-py3-none-any.whl"
    for folder in (shared, older):
        folder.mkdir(parents=True)
        (folder / "entry.json").write_text("{}")
    wheel.write_bytes(b"PK")
    code, doc = helpers.invoke_json("clean", "--cache", "--dry-run")
    listed = {(item["kind"], item["path"]) for item in doc["result"]["items"]}
    assert ("gate-results", str(shared.parent)) in listed
    assert ("gate-results", str(older.parent)) in listed
    assert ("wheel", str(wheel)) in listed
    assert code == 0 and shared.exists() and older.exists(), "a dry run removes nothing"
    code, doc = helpers.invoke_json("clean", "--cache")
    assert code == 0 and not shared.exists() and not older.exists() and not wheel.exists()
