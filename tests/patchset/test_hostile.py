"""Hostile-patch corpus: one case per attack class. Each must exit 2 with the tree untouched."""

from __future__ import annotations

import pytest

from patchkit.manifest import Lock, LockedPatch, load, write_lock
from patchkit.patchset.series import sha256_file
from tests.patchset import helpers

HEADER = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Mallory <mallory@example.org>
Date: Sun, 1 Mar 2026 00:00:00 +0000
Subject: [PATCH] innocent looking change

---
"""


def new_file(path: str, quoted: bool = False) -> str:
    a, b = (f'"a/{path}"', f'"b/{path}"') if quoted else (f"a/{path}", f"b/{path}")
    return (
        f"diff --git {a} {b}\nnew file mode 100644\nindex 0000000..e69de29\n"
        f"--- /dev/null\n+++ {b}\n@@ -0,0 +1 @@\n+pwned\n"
    )


def symlink(path: str, target: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )


def rename(src: str, dst: str, kind: str = "rename") -> str:
    return f"diff --git a/{src} b/{dst}\nsimilarity index 100%\n{kind} from {src}\n{kind} to {dst}\n"


def cases(outside: str) -> dict[str, tuple[str, str]]:
    """class -> (diff text, words the error must contain)."""
    return {
        "absolute-path": (new_file(f"/{outside}/evil.txt"), "absolute path"),
        "dotdot": (new_file("../outside/evil.txt"), "'..'"),
        "dot-git": (new_file(".git/hooks/post-checkout"), "'.git'"),
        "dot-git-case": (new_file("pkg/.GIT/config"), "'.git'"),
        "write-through-existing-symlink": (new_file("linkdir/evil.py"), "through the symlink 'linkdir'"),
        "symlink-then-write": (symlink("pkg/hop", "..") + new_file("pkg/hop/evil.py"), "through the symlink 'pkg/hop'"),
        "rename-source-outside": (rename("../outside/secret.txt", "pkg/stolen.txt"), "'..'"),
        "rename-target-outside": (rename("pkg/util.py", "../outside/util.py"), "'..'"),
        "copy-target-outside": (rename("pkg/core.py", "../outside/core.py", "copy"), "'..'"),
        "symlink-to-outside": (symlink("pkg/evil", "../../outside/secret.txt"), "points outside the tree"),
        "symlink-absolute": (symlink("pkg/evil", "/etc/passwd"), "absolute"),
        "retarget-existing-symlink": (
            "diff --git a/linkdir b/linkdir\nindex 1111111..2222222 120000\n--- a/linkdir\n+++ b/linkdir\n"
            "@@ -1 +1 @@\n-pkg\n\\ No newline at end of file\n+../../outside\n\\ No newline at end of file\n",
            "points outside the tree",
        ),
        "quoted-name-traversal": (new_file("\\056\\056/outside/evil.txt", quoted=True), "'..'"),
        "quoted-name-dot-git": (new_file("\\056git/config", quoted=True), "'.git'"),
        "binary-undeclared": (
            "diff --git a/pkg/blob.bin b/pkg/blob.bin\nnew file mode 100644\nindex 0000000..1111111\n"
            "GIT binary patch\nliteral 5\nMcmZ?wbYx%v00Es2I{*Lx\n\nliteral 0\nHcmV?d00001\n\n",
            "binary diff",
        ),
    }


def add_hostile_patch(set_dir, diff: str) -> str:
    """Append a hostile patch as patch 6 and pin its hash (as an attacker editing the set would)."""
    name = "0006-innocent-looking-change.patch"
    (set_dir / name).write_text(HEADER + diff)
    with open(set_dir / "series", "a") as series:
        series.write(name + "\n")
    lock = load(set_dir).lock
    write_lock(
        set_dir, Lock(lock.base_tree, lock.patches + (LockedPatch(name, sha256_file(set_dir / name)),), lock.post_image)
    )
    return name


def outside_snapshot(tmp_path):
    """Every file next to the target (the target's own files are checked separately)."""
    return {k: v for k, v in helpers.tree_snapshot(tmp_path).items() if not k.startswith("target/")}


@pytest.mark.parametrize("attack", sorted(cases("x")))
def test_hostile_patch_is_refused_exit_2_and_nothing_changes(fx, tmp_path, attack):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    diff, words = cases(str(outside).lstrip("/"))[attack]
    name = add_hostile_patch(fx.set_dir, diff)
    before_tree, before_outside, head = helpers.tree_snapshot(fx.target), outside_snapshot(tmp_path), fx.head()
    objects = helpers.object_files(fx.target)

    code, doc = helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target))

    assert code == 2, doc
    assert doc["error"]["type"] == "UnsafePatch"
    assert words in doc["error"]["message"]
    assert doc["error"]["file"].endswith(name)
    assert fx.head() == head
    assert helpers.tree_snapshot(fx.target) == before_tree
    assert helpers.object_files(fx.target) == objects, "not even unreachable objects are left behind"
    assert outside_snapshot(tmp_path) == before_outside, "nothing written anywhere outside the tree"
    assert not (fx.target / ".git/hooks/post-checkout").exists()
    # lock refuses it as well, so such a set cannot be locked in the first place
    assert helpers.invoke("lock", "--set", str(fx.set_dir), "--base", str(fx.target)).exit_code == 2


def test_declared_binary_patch_is_allowed(fx):
    manifest = fx.set_dir / "manifest.toml"
    name = "0006-innocent-looking-change.patch"
    manifest.write_text(
        manifest.read_text().replace('python = ["3.11"]', f'python = ["3.11"]\nallow_binary = ["{name}"]')
    )
    data = bytes(range(256))
    target = fx.target
    (target / "pkg/blob.bin").write_bytes(data)
    helpers.commit_all(fx.repo(), "binary\n", "2026-03-01T00:00:00+0000")
    diff = fx.repo().run("format-patch", "--stdout", "--binary", "--full-index", "-1", "HEAD")
    fx.repo().run("reset", "-q", "--hard", fx.base_commit)
    (fx.set_dir / name).write_text(diff + "\n")
    (fx.set_dir / "series").write_text((fx.set_dir / "series").read_text() + name + "\n")
    assert helpers.invoke("lock", "--set", str(fx.set_dir), "--base", str(target)).exit_code == 0
    result = helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(target))
    assert result.exit_code == 0, result.output
    assert (target / "pkg/blob.bin").read_bytes() == data
