"""Preflight through the CLI: every failure exits 2 before anything starts; GPUs via a fake nvidia-smi."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from tests.smoke.conftest import git, make_target

FAKE_NVIDIA_SMI = """#!/bin/sh
# Answers the query patchkit sends, like nvidia-smi on an H200 host.
printf '%s\\n' {rows}
"""
ONE_H200 = '"0, NVIDIA H200, 140000, 143771"'


def fake_gpu_path(tmp_path, rows=ONE_H200):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(FAKE_NVIDIA_SMI.format(rows=rows))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_preflight_only_passes_and_starts_nothing(smoke_env):
    out = smoke_env.run("--preflight-only")
    assert out.code == 0, out.stderr
    checks = {c["name"]: c for c in out.doc["result"]["preflight"]["checks"]}
    assert set(checks) == {"gpus", "python", "port", "model", "draft-model", "target", "server imports",
                           "server args"}
    assert all(c["ok"] for c in checks.values())
    assert "CPU stand-in mode" in checks["gpus"]["detail"]
    assert "numpy" in checks["server imports"]["detail"] and "torch" in checks["server imports"]["detail"]
    assert "accepts the 2 server command line(s)" in checks["server args"]["detail"]
    assert out.doc["result"]["servers"] == []
    assert not smoke_env.logs.exists()


def test_gpus_listed_with_names_and_free_memory(smoke_env):
    smoke_env.env["PATH"] = fake_gpu_path(smoke_env.tmp)
    out = smoke_env.run("--preflight-only", "--gpus", "1")
    assert out.code == 0, out.stderr
    assert out.doc["result"]["preflight"]["gpus"] == [
        {"index": 0, "name": "NVIDIA H200", "free_mib": 140000, "total_mib": 143771}
    ]
    assert out.doc["result"]["preflight"]["gpu_source"] == "nvidia-smi"


def test_too_few_gpus_fails_with_the_listing(smoke_env):
    smoke_env.env["PATH"] = fake_gpu_path(smoke_env.tmp)
    out = smoke_env.run("--gpus", "2")
    assert out.code == 2
    message = out.doc["error"]["message"]
    assert "2 GPUs wanted, 1 visible (0: NVIDIA H200 (140000 MiB free of 143771))" in message
    assert not smoke_env.logs.exists()


def test_gpu_held_by_another_process_fails(smoke_env):
    rows = '"0, NVIDIA H200, 140000, 143771" "1, NVIDIA H200, 3000, 143771"'
    smoke_env.env["PATH"] = fake_gpu_path(smoke_env.tmp, rows)
    out = smoke_env.run("--preflight-only", "--gpus", "2")
    assert out.code == 2 and out.doc["ok"] is False
    gpus = next(c for c in out.doc["result"]["preflight"]["checks"] if c["name"] == "gpus")
    assert "GPU 1 has 3000 of 143771 MiB free; another process holds it" in gpus["detail"]
    human = smoke_env.run("--preflight-only", "--gpus", "2", as_json=False)
    assert human.code == 2 and "FAILED" in human.stdout and "smoke: preflight FAILED (nothing started)" in human.stdout


def test_cuda_visible_devices_selects_the_gpus(smoke_env):
    rows = '"0, NVIDIA H200, 3000, 143771" "1, NVIDIA H200, 140000, 143771"'
    smoke_env.env["PATH"] = fake_gpu_path(smoke_env.tmp, rows)
    smoke_env.env["CUDA_VISIBLE_DEVICES"] = "1"
    out = smoke_env.run("--preflight-only", "--gpus", "1")
    assert out.code == 0, out.stderr
    assert [g["index"] for g in out.doc["result"]["preflight"]["gpus"]] == [1]


def test_every_preflight_failure_is_named_at_once(smoke_env):
    (smoke_env.model / "config.json").unlink()
    unpatched = make_target(smoke_env.tmp / "unpatched", trailer="Patchkit-Set: ddtree@0")
    out = smoke_env.run("--target", str(unpatched), "--draft-model", str(smoke_env.tmp / "nowhere"))
    assert out.code == 2
    message = out.doc["error"]["message"]
    assert f"model: {smoke_env.model / 'config.json'} not found" in message
    assert f"draft-model: {smoke_env.tmp / 'nowhere'} is not a directory" in message
    assert f"target: {unpatched} is not patched by ddtree@1" in message
    assert "nothing was started" in out.doc["error"]["hint"]
    assert not smoke_env.logs.exists()


def test_human_preflight_error_is_one_line_on_stderr(smoke_env):
    (smoke_env.draft / "config.json").write_text("{not json")
    out = smoke_env.run(as_json=False)
    assert out.code == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("patchkit smoke: error: preflight failed: draft-model:")


def test_bad_prompt_line_names_file_and_line(smoke_env):
    prompts = smoke_env.tmp / "bad.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [1]}\n{"id": "b", "input_ids": []}\n')
    out = smoke_env.run("--prompts", str(prompts))
    assert out.code == 2
    assert out.doc["error"]["file"] == str(prompts) and out.doc["error"]["line"] == 2
    assert "non-empty list" in out.doc["error"]["message"]


def test_bad_manifest_smoke_table_names_the_file(smoke_env):
    manifest = smoke_env.set_dir / "manifest.toml"
    manifest.write_text(manifest.read_text().replace('profile_args = [', 'profile_args = [1, '))
    out = smoke_env.run()
    assert out.code == 2
    assert out.doc["error"]["file"] == str(manifest)
    assert "profile_args must be a list of strings" in out.doc["error"]["message"]


def test_only_text_prompts_without_tokenizer_is_bad_input(smoke_env):
    prompts = smoke_env.tmp / "text.jsonl"
    prompts.write_text('{"id": "a", "text": "hello"}\n')
    out = smoke_env.run("--prompts", str(prompts), "--", "--skip-tokenizer-init")
    assert out.code == 2
    assert "every prompt is text" in out.doc["error"]["message"]


def test_typo_in_an_option_is_a_usage_error(smoke_env):
    out = smoke_env.run("--max-new-token", "4")
    assert out.code == 2
    assert "No such option" in out.stderr


def test_target_that_is_not_a_repository_is_reported_as_unknown(smoke_env):
    plain = smoke_env.tmp / "plain"
    (plain / "python" / "sglang").mkdir(parents=True)
    out = smoke_env.run("--target", str(plain))
    assert out.code == 2
    message = out.doc["error"]["message"]
    assert f"cannot tell whether {plain} is patched by ddtree@1: target {plain} is not a git repository" in message


def test_sglangs_own_parser_refuses_an_extra_server_argument(smoke_env):
    out = smoke_env.run("--preflight-only", "--", "--speculative-ddtree-budget", "abc")
    assert out.code == 2 and out.doc["result"]["servers"] == []
    checks = {c["name"]: c for c in out.doc["result"]["preflight"]["checks"]}
    assert checks["server imports"]["ok"] and not checks["server args"]["ok"]
    assert "argument --speculative-ddtree-budget: invalid ddtree_budget value: 'abc'" in checks["server args"]["detail"]

    human = smoke_env.run("--", "--speculative-ddtree-budget", "abc", as_json=False)
    lines = human.stderr.strip().splitlines()
    assert human.code == 2 and len(lines) == 1, human.stderr
    assert "server args: SGLang refuses the server arguments: argument --speculative-ddtree-budget" in lines[0]
    assert "fix that argument" in lines[0] and not smoke_env.logs.exists()


def test_an_interpreter_without_numpy_fails_preflight_naming_it_and_the_fix(smoke_env):
    bare = smoke_env.tmp / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = str(bare / "bin" / "python")
    out = smoke_env.run("--python", python, as_json=False)
    lines = out.stderr.strip().splitlines()
    assert out.code == 2 and len(lines) == 1, out.stderr
    assert f"server imports: {python} cannot import numpy (ModuleNotFoundError: No module named 'numpy')" in lines[0]
    assert f"install numpy into that interpreter (`{python} -m pip install numpy`)" in lines[0]
    assert not smoke_env.logs.exists(), "no server was started"


def test_a_module_of_the_set_that_cannot_import_is_named(smoke_env):
    (smoke_env.target / "python" / "sglang" / "ddtree.py").write_text("import ddtree_kernel_lib\n")
    git(smoke_env.target, "commit", "-q", "-a", "--amend", "--no-edit")
    out = smoke_env.run("--preflight-only")
    checks = {c["name"]: c for c in out.doc["result"]["preflight"]["checks"]}
    assert out.code == 2 and "server args" not in checks
    assert "cannot import sglang.ddtree (ModuleNotFoundError: No module named 'ddtree_kernel_lib'); install " \
           "ddtree_kernel_lib into that interpreter" in checks["server imports"]["detail"]
