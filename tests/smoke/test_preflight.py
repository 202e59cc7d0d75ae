"""Preflight through the CLI: every failure exits 2 before anything starts; GPUs via a fake nvidia-smi."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from tests.smoke.conftest import REPO_ROOT, Outcome, git, make_target

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
                           "server args", "attention backends"}
    assert all(c["ok"] for c in checks.values())
    assert "CPU stand-in mode" in checks["gpus"]["detail"]
    assert "numpy" in checks["server imports"]["detail"] and "torch" in checks["server imports"]["detail"]
    assert "accepts the 2 server command line(s)" in checks["server args"]["detail"]
    assert checks["attention backends"]["detail"] == "SGLang did not say which backend it picks (not checked)"
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


# ------------------------------------------------ attention backends: their kernels in the server's interpreter

FLASH_ATTN = ('try:\n    from sgl_kernel import flash_ops\nexcept:\n'
              '    raise ImportError("Can not import FA3 in sgl_kernel.")\n')


def fake_site(tmp_path, *, flash_ops: bool, flashinfer: bool = False):
    """A site with sgl_kernel as sglang-kernel lays it out (flash_attn.py imports flash_ops, as the real
    one does); ``flash_ops=False`` is a slimmed bundle's: the library is not there."""
    site = tmp_path / "site"
    (site / "sgl_kernel").mkdir(parents=True)
    (site / "sgl_kernel" / "__init__.py").write_text("")
    (site / "sgl_kernel" / "flash_attn.py").write_text(FLASH_ATTN)
    if flash_ops:
        (site / "sgl_kernel" / "flash_ops.py").write_text("LOADED = True\n")
    if flashinfer:
        (site / "flashinfer").mkdir()
        (site / "flashinfer" / "__init__.py").write_text("")
    return site


def on_hopper(smoke_env, site, **env):
    """The stand-in resolves unnamed backends as SGLang on Hopper; ``site`` goes on the server's path."""
    smoke_env.env.update({"SGLANG_STANDIN_GPU": "hopper", "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{site}", **env})


def backend_row(out):
    return {c["name"]: c for c in out.doc["result"]["preflight"]["checks"]}["attention backends"]


def test_the_default_fa3_without_flash_ops_is_refused_before_any_server_starts(smoke_env):
    on_hopper(smoke_env, fake_site(smoke_env.tmp, flash_ops=False))
    out = smoke_env.run("--preflight-only")
    assert out.code == 2 and out.doc["result"]["servers"] == []
    row = backend_row(out)
    # the baseline gets fa3 (SGLang's Hopper default); DDTREE gets triton, which needs nothing more
    assert not row["ok"] and row["detail"].startswith(
        "server 1 (baseline) would run the fa3 attention backend, whose kernels cannot load in ")
    assert "sgl_kernel.flash_ops: ModuleNotFoundError: No module named 'sgl_kernel.flash_ops'" in row["detail"]
    assert "--profile server-fa3" in row["detail"] and "--attention-backend triton" in row["detail"]
    human = smoke_env.run(as_json=False)
    assert human.code == 2 and "attention backends: server 1 (baseline) would run the fa3" in human.stderr
    assert not smoke_env.logs.exists(), "no server was started"


def test_fa3_passes_when_flash_ops_imports_and_a_named_backend_is_honoured(smoke_env):
    on_hopper(smoke_env, fake_site(smoke_env.tmp, flash_ops=True))
    out = smoke_env.run("--preflight-only")
    assert out.code == 0, out.stderr
    row = backend_row(out)
    assert row["ok"] and "server 1 (baseline): fa3; server 2 (DDTREE): triton (target and draft)" in row["detail"]
    assert "fa3: sgl_kernel.flash_ops and sgl_kernel.flash_attn import" in row["detail"]

    on_hopper(smoke_env, fake_site(smoke_env.tmp / "slim", flash_ops=False))
    named = smoke_env.run("--preflight-only", "--", "--attention-backend", "triton")
    assert named.code == 0, named.stderr
    assert "server 1 (baseline): triton" in backend_row(named)["detail"]


def write_trim_record(site, kept):
    record = {"member": "sgl_kernel/flash_ops.abi3.so", "archs": [90], "kept_units": kept}
    (site / "sgl_kernel" / "flash_ops.py.trim.json").write_text(json.dumps(record))


def test_a_trimmed_fa3_library_must_keep_the_models_kernels(smoke_env):
    site = fake_site(smoke_env.tmp, flash_ops=True)
    write_trim_record(site, ["flash_fwd_hdim128_bf16_sm90", "flash_fwd_combine"])
    on_hopper(smoke_env, site)
    for model in (smoke_env.model, smoke_env.draft):
        (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 1536,
                                                      "num_attention_heads": 16, "torch_dtype": "bfloat16"}))
    out = smoke_env.run("--preflight-only")
    assert out.code == 2
    detail = backend_row(out)["detail"]
    assert "flash_ops.py is trimmed" in detail and "keeps flash_fwd_combine, flash_fwd_hdim128_bf16_sm90 for sm_90" \
        in detail
    assert "but the model (head dim 96, bf16) needs flash_fwd_hdim96_bf16_sm90" in detail

    (smoke_env.model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "head_dim": 128,
                                                            "torch_dtype": "bfloat16"}))
    kept = smoke_env.run("--preflight-only")
    assert kept.code == 0, kept.stderr
    assert "(trimmed; keeps what the models need)" in backend_row(kept)["detail"]


def test_flashinfer_without_nvcc_is_refused_naming_its_jit(smoke_env):
    bare_path = os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"])  # no CUDA toolkit on it
    site = fake_site(smoke_env.tmp, flash_ops=False, flashinfer=True)
    on_hopper(smoke_env, site, PATH=bare_path, FLASHINFER_WORKSPACE_BASE=str(smoke_env.tmp / "fi"))
    smoke_env.env.pop("CUDA_HOME", None)
    env_without_cuda = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    out = run_with(smoke_env, env_without_cuda, "--preflight-only", "--", "--attention-backend", "flashinfer")
    assert out.code == 2
    detail = backend_row(out)["detail"]
    assert detail.startswith("server 1 (baseline), server 2 (DDTREE) would run the flashinfer attention backend")
    assert "nvcc not found on PATH, nor in $CUDA_HOME/bin" in detail

    toolkit = smoke_env.tmp / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    with_nvcc = run_with(smoke_env, {**env_without_cuda, "CUDA_HOME": str(toolkit)}, "--preflight-only", "--",
                         "--attention-backend", "flashinfer")
    assert with_nvcc.code == 0, with_nvcc.stderr
    assert f"JIT cache {smoke_env.tmp / 'fi' / '.cache' / 'flashinfer'} writable" in backend_row(with_nvcc)["detail"]


def run_with(smoke_env, base_env, *extra):
    """smoke_env.run with ``base_env`` in place of this process's environment."""
    env = {**base_env, "PYTHONPATH": str(REPO_ROOT), "PATCHKIT_HOME": str(smoke_env.tmp / "home"), **smoke_env.env}
    done = subprocess.run(smoke_env.argv(*extra), env=env, capture_output=True, text=True, timeout=60,
                          cwd=smoke_env.tmp)
    doc = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    return Outcome(done.returncode, doc, done.stdout, done.stderr)
