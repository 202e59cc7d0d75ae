"""The one manifest reader: typed [set], [base], [lock] and [smoke], raw [verify] and [bundle] tables,
and errors that name manifest.toml and the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit import manifest
from patchkit.cli import cli
from patchkit.errors import BadInput, Location

REPO = Path(__file__).resolve().parents[1]
HEAD = """\
[set]
name = "tiny"
version = "1.0.0"
description = "a set"
python = ["3.11"]

[base]
kind = "git"

[base.git]
url = "https://example.invalid/up.git"
commit = "0123456789abcdef0123456789abcdef01234567"
"""


def write_set(tmp_path: Path, tail: str = "", head: str = HEAD) -> Path:
    set_dir = tmp_path / "set"
    set_dir.mkdir(exist_ok=True)
    (set_dir / "manifest.toml").write_text(head + tail)
    return set_dir


def load_error(set_dir: Path) -> BadInput:
    with pytest.raises(BadInput) as info:
        manifest.load(set_dir)
    return info.value


def test_the_shipped_set_reads_into_typed_tables():
    man = manifest.load(REPO / "ddtree_patches" / "v1")
    assert man.label == f"{man.set.name}@{man.set.version}" == man.smoke.set_id
    assert man.base_kind == "pypi" and man.pypi is not None and man.pypi.package == "sglang"
    assert man.lock is not None and len(man.lock.patches) == 9
    assert man.smoke.max_new_tokens == 64 and man.smoke.startup_timeout_s == 1200.0
    assert man.smoke.prompts == man.set_dir / "smoke" / "prompts.jsonl"
    assert man.smoke.profile_args[:2] == ("--speculative-algorithm", "DDTREE")
    assert man.verify["source_root"] == "python" and "packages" in man.verify_table("env")
    assert "server-triton" in man.bundle["profiles"]


def test_a_set_without_smoke_verify_or_bundle_gets_defaults(tmp_path):
    man = manifest.load(write_set(tmp_path))
    assert man.smoke.prompts == man.set_dir / "smoke" / "prompts.jsonl"
    assert (man.smoke.max_new_tokens, man.smoke.grace_period_s, man.smoke.server_args) == (32, 20.0, ())
    assert man.smoke.set_id == "tiny@1.0.0"
    assert man.verify == {} and man.bundle == {} and man.verify_table("compile") == {}
    assert man.git is not None and man.pypi is None and man.lock is None


def test_verify_table_is_a_copy_of_the_gate_table(tmp_path):
    man = manifest.load(write_set(tmp_path, '\n[verify.xref]\nfamily = "X"\n'))
    config = man.verify_table("xref")
    config["family"] = "changed"
    assert man.verify_table("xref") == {"family": "X"}


@pytest.mark.parametrize(
    ("tail", "words", "line"),
    [
        ("\n[smoke]\nmax_new_tokens = 0\n", "[smoke] max_new_tokens must be a positive number", 15),
        ("\n[smoke]\nmax_new_tokens = 2.5\n", "[smoke] max_new_tokens must be a whole number", 15),
        ("\n[smoke]\nstartup_timeout_s = true\n", "[smoke] startup_timeout_s must be a positive number", 15),
        ('\n[smoke]\nserver_args = "--dtype bf16"\n', "[smoke] server_args must be a list of strings", 15),
        ('\n[smoke]\nprompts = ""\n', "[smoke] prompts must be a non-empty string", 15),
    ],
)
def test_a_bad_smoke_table_names_its_line(tmp_path, tail, words, line):
    error = load_error(write_set(tmp_path, tail))
    assert words in error.message and error.location is not None
    assert error.location.line == line and error.location.file.endswith("manifest.toml")


def test_a_table_that_is_a_value_names_the_key_line(tmp_path):
    error = load_error(write_set(tmp_path, head="verify = 3\n" + HEAD))
    assert "[verify] must be a table" in error.message and error.location and error.location.line == 1


def test_a_gate_entry_that_is_not_a_table_is_bad_input_with_its_line(tmp_path):
    man = manifest.load(write_set(tmp_path, '\n[verify]\nsource_root = "python"\nxref = "DDTREE"\n'))
    with pytest.raises(BadInput) as info:
        man.verify_table("xref")
    assert "[verify] xref must be a table" in info.value.message
    assert info.value.location and info.value.location.line == 16


def test_a_manifest_that_is_not_utf8_is_bad_input_naming_file_and_line(tmp_path):
    set_dir = write_set(tmp_path)
    path = set_dir / "manifest.toml"
    path.write_bytes(path.read_bytes().replace(b'"a set"', b'"caf\xe9"'))
    error = load_error(set_dir)
    assert "not UTF-8" in error.message and "0xe9" in error.message
    assert error.location == Location(str(path), 4)
    result = CliRunner().invoke(cli, ["status", "--set", str(set_dir), "--target", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"{path}:4: manifest.toml is not UTF-8 text" in result.output


def test_every_result_type_of_the_reader_is_keyword_only():
    with pytest.raises(TypeError):
        manifest.SetInfo("n", "1", "d", ())  # type: ignore[misc]
    with pytest.raises(TypeError):
        manifest.GitBase("url", "0" * 40)  # type: ignore[misc]
