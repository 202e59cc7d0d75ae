"""The patch-set format and its lock: edit -> refused (exit 2, says run lock) -> lock -> accepted."""

from __future__ import annotations

import pytest

from patchkit import manifest

from patchkit.patchset import series as patchset
from patchkit.errors import BadInput
from tests.patchset import helpers


def apply_json(fx):
    return helpers.invoke_json("apply", "--set", str(fx.set_dir), "--target", str(fx.target), "--dry-run")


def test_edited_patch_is_refused_until_locked(fx):
    patch = fx.set_dir / "0002-Add-pkg-extra.py.patch"
    patch.write_text(
        patch.read_text().replace("Subject: [PATCH] Add pkg/extra.py", "Subject: [PATCH] Add pkg/extra.py module")
    )
    code, doc = apply_json(fx)
    assert code == 2
    assert "0002-Add-pkg-extra.py.patch has sha256" in doc["error"]["message"]
    assert f"patchkit lock --set {fx.set_dir}" in doc["error"]["hint"]
    human = helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert human.exit_code == 2 and "patchkit lock --set" in human.output

    code, lock_doc = helpers.invoke_json("lock", "--set", str(fx.set_dir), "--base", str(fx.target))
    assert code == 0 and lock_doc["result"]["changed"] is True
    assert apply_json(fx)[0] == 0
    assert helpers.invoke("apply", "--set", str(fx.set_dir), "--target", str(fx.target)).exit_code == 0
    assert fx.repo().run("log", "-1", "--format=%s", "HEAD~3") == "Add pkg/extra.py module"


def test_series_order_change_is_refused(fx):
    series = fx.set_dir / "series"
    lines = series.read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    series.write_text("\n".join(lines) + "\n")
    code, doc = apply_json(fx)
    assert code == 2 and "in another order" in doc["error"]["message"]


def test_edited_post_image_is_refused(fx):
    text = (fx.set_dir / "manifest.toml").read_text()
    good = manifest.load(fx.set_dir).lock.post_image["pkg/util.py"]
    (fx.set_dir / "manifest.toml").write_text(text.replace(good, "0" * 64))
    code, doc = apply_json(fx)
    assert code == 2 and "pkg/util.py" in doc["error"]["message"] and "patchkit lock" in doc["error"]["hint"]


def test_lock_rewrites_only_below_the_marker_and_is_idempotent(fx):
    path = fx.set_dir / "manifest.toml"
    human = manifest.human_part(path.read_text())
    assert human.startswith("# Test set for the tiny upstream fixture.")
    before = path.read_bytes()
    code, doc = helpers.invoke_json("lock", "--set", str(fx.set_dir), "--base", str(fx.target))
    assert code == 0 and doc["result"]["changed"] is False and path.read_bytes() == before
    assert doc["result"]["post_image_files"] == 7
    # a new comment in the human part survives a relock; the lock part is regenerated
    path.write_text(path.read_text().replace("[verify.compile]", "# verify config, owned by verify\n[verify.compile]"))
    path.write_text(path.read_text().replace('base_tree = "', 'base_tree = "f'))
    assert helpers.invoke("lock", "--set", str(fx.set_dir), "--base", str(fx.target)).exit_code == 0
    text = path.read_text()
    assert "# verify config, owned by verify\n[verify.compile]" in text
    assert manifest.load(fx.set_dir).lock == manifest.load(fx.set_dir).lock  # parses
    assert text.count(manifest.LOCK_MARKER) == 1


def test_manifest_without_lock_says_run_lock(fx):
    path = fx.set_dir / "manifest.toml"
    path.write_text(manifest.human_part(path.read_text()))
    code, doc = apply_json(fx)
    assert code == 2 and "no [lock]" in doc["error"]["message"] and "patchkit lock" in doc["error"]["hint"]


def test_foreign_tables_are_kept_opaque(fx):
    man = manifest.load(fx.set_dir)
    assert man.section("verify") == {"compile": {"enabled": True}}
    assert man.section("smoke") == {}


@pytest.mark.parametrize(
    "edit,words,line",
    [
        (('commit = "', 'commit = "zz'), "[base.git] commit", 13),
        (('kind = "git"', 'kind = "svn"'), 'expected "pypi" or "git"', 9),
        (('version = "1.0.0"', "version = 1"), "[set] version must be a non-empty string", 4),
        (('name = "tiny"', 'name = "tiny'), "invalid TOML", 3),
    ],
)
def test_manifest_errors_name_file_and_line(fx, edit, words, line):
    path = fx.set_dir / "manifest.toml"
    path.write_text(path.read_text().replace(*edit, 1))
    with pytest.raises(BadInput) as info:
        manifest.load(fx.set_dir)
    assert words in info.value.message
    assert info.value.location.file == str(path) and info.value.location.line == line
    result = helpers.invoke("status", "--set", str(fx.set_dir), "--target", str(fx.target))
    assert result.exit_code == 2 and f"manifest.toml:{line}:" in result.output


@pytest.mark.parametrize(
    "series,words,line",
    [
        ("0001-Patch-f2-in-core.patch -p0\n", "has options", 1),
        ("# c\n../evil.patch\n", "must be a file name", 2),
        ("missing.patch\n", "does not exist", 1),
    ],
)
def test_series_errors_name_file_and_line(fx, series, words, line):
    (fx.set_dir / "series").write_text(series)
    with pytest.raises(BadInput) as info:
        patchset.read_series(fx.set_dir)
    assert words in info.value.message and info.value.location.line == line


def test_patch_header_and_dep3_fields_are_parsed(fx):
    patch = patchset.parse_patch(fx.set_dir / "0001-Patch-f2-in-core.patch")
    assert patch.header.author_name == "Ada Lovelace" and patch.header.author_email == "ada@example.org"
    assert patch.header.subject == "Patch f2 in core"
    assert patch.fields == {"Upstream-Status": "Pending"}
    assert patch.diff.startswith(b"diff --git a/pkg/core.py b/pkg/core.py\n")


def test_bad_upstream_status_is_refused(fx):
    patch = fx.set_dir / "0001-Patch-f2-in-core.patch"
    patch.write_text(patch.read_text().replace("Upstream-Status: Pending", "Upstream-Status: Someday"))
    with pytest.raises(BadInput, match="Upstream-Status"):
        patchset.parse_patch(patch)


def test_trailer_block_round_trips():
    header = patchset.PatchHeader(
        author_name="A", author_email="a@x", date="Sun, 1 Mar 2026 00:00:00 +0000", subject="subject",
        body="body\n\nUpstream-Status: Pending",
    )
    message = patchset.message_with_trailers(header, "tiny@1.0.0", "0001-x.patch")
    assert patchset.split_trailers(message) == (header.message(), "0001-x.patch")
    assert patchset.trailer_set(message) == "tiny@1.0.0"
