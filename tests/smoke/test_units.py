"""Pure functions of the smoke package: comparison, summaries, prompt files, manifest, GPU parsing."""

from __future__ import annotations

import pytest

from patchkit.errors import BadInput
from patchkit.smoke.client import Generation
from patchkit.smoke.compare import compare, first_mismatch, summarize
from patchkit.smoke.preflight import _parse_nvidia_smi, check_port
from patchkit.smoke.prompts import load_prompts
from patchkit.manifest import load
from tests.smoke.conftest import SET_HEADER


def gen(ids, verify=None, accept=None, total=1.0, ttft=0.1):
    return Generation(tuple(ids), ttft, total, accept, verify)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [([1, 2, 3], [1, 2, 3], None), ([1, 2, 3], [1, 9, 3], 1), ([1, 2], [1, 2, 3], 2), ([], [4], 0), ([], [], None)],
)
def test_first_mismatch(a, b, expected):
    assert first_mismatch(a, b) == expected


def test_compare_shows_both_continuations_from_the_mismatch():
    result = compare("p", gen(range(20)), gen([*range(10), 99, 98, *range(12, 20)]))
    assert not result.matched and result.first_mismatch == 10
    assert result.baseline_continuation == (10, 11, 12, 13, 14, 15, 16, 17)
    assert result.ddtree_continuation == (99, 98, 12, 13, 14, 15, 16, 17)


def test_summary_accept_length_is_tokens_over_verify_steps():
    stats = summarize([gen(range(12), verify=4, accept=3.0, total=2.0), gen(range(6), verify=6, accept=1.0)])
    assert stats.accept_length == pytest.approx(18 / 10)
    assert stats.verify_ct == 10 and stats.output_tokens == 18
    assert stats.tokens_per_s == pytest.approx((6.0 + 6.0) / 2)
    assert summarize([gen(range(3))]).accept_length is None


def test_prompts_skip_comments_and_reject_duplicates(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('# comment\n\n{"id": "a", "input_ids": [1, 2]}\n{"id": "b", "text": "hi"}\n')
    prompts = load_prompts(path)
    assert [(p.id, p.needs_tokenizer) for p in prompts] == [("a", False), ("b", True)]
    path.write_text('{"id": "a", "input_ids": [1]}\n{"id": "a", "text": "x"}\n')
    with pytest.raises(BadInput, match="duplicate prompt id 'a'"):
        load_prompts(path)


def test_shipped_prompt_set_loads():
    from tests.smoke.conftest import REPO_ROOT

    prompts = load_prompts(REPO_ROOT / "ddtree_patches" / "v1" / "smoke" / "prompts.jsonl")
    ids = [p for p in prompts if not p.needs_tokenizer]
    assert len(ids) >= 6 and len(prompts) > len(ids)
    assert all(max(p.input_ids) < 256 for p in ids)


def test_profile_defaults_and_set_identity(tmp_path):
    (tmp_path / "manifest.toml").write_text(SET_HEADER + '[smoke]\ngrace_period_s = 2\n')
    profile = load(tmp_path, with_lock=False).smoke
    assert profile.set_id == "ddtree@1" and profile.grace_period_s == 2
    assert profile.prompts == tmp_path / "smoke" / "prompts.jsonl"
    assert profile.profile_args == () and profile.draft_model_flag == "--speculative-draft-model-path"


def test_manifest_toml_error_names_line(tmp_path):
    (tmp_path / "manifest.toml").write_text('[set]\nname = "x"\nversion = \n')
    with pytest.raises(BadInput) as caught:
        load(tmp_path, with_lock=False)
    assert caught.value.location.line == 3


def test_nvidia_smi_parsing():
    gpus = _parse_nvidia_smi("0, NVIDIA H200, 140000, 143771\n1, NVIDIA H200, 12, 143771\n")
    assert [(g.index, g.name, g.free_mib) for g in gpus] == [(0, "NVIDIA H200", 140000), (1, "NVIDIA H200", 12)]


def test_port_out_of_range():
    assert not check_port(70000).ok


def test_a_server_that_cannot_be_started_is_a_server_failure_that_was_never_signalled(tmp_path):
    from patchkit.smoke.launch import teardown_words
    from patchkit.smoke.server import ServerFailed, ServerGroup

    broken = tmp_path / "python-broken"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    server = ServerGroup("baseline", [str(broken), "-m", "sglang.launch_server"], env={}, log=tmp_path / "b.log",
                         port=1)
    with pytest.raises(ServerFailed, match="could not start"):
        server.start()
    assert teardown_words(server.teardown(1.0)) == "never started"


@pytest.mark.parametrize(("log", "first"), [
    ("$ python -m sglang.launch_server --error: not this\nloading\nTraceback (most recent call last):\n"
     '  File "x.py", line 1, in <module>\nModuleNotFoundError: No module named \'numpy\'\nlater: error: too\n',
     "ModuleNotFoundError: No module named 'numpy'"),
    ("starting\nsglang serve: error: argument --tp-size: invalid int value: 'x'\n",
     "sglang serve: error: argument --tp-size: invalid int value: 'x'"),
    ("[2026-12-04 10:00:00] ERROR scheduler died\n", "[2026-12-04 10:00:00] ERROR scheduler died"),
    ("starting\nbye\n", "bye"),
    ("", ""),
])
def test_the_first_error_line_of_a_server_log(tmp_path, log, first):
    from patchkit.smoke.server import first_error_line

    path = tmp_path / "server.log"
    path.write_text(log)
    assert first_error_line(path) == first


def test_a_log_line_that_only_mentions_errors_is_not_the_error(tmp_path):
    from patchkit.smoke.server import first_error_line

    path = tmp_path / "server.log"
    path.write_text("INFO: error handling is on; 0 errors so far\nValueError: bad --tp-size\n")
    assert first_error_line(path) == "ValueError: bad --tp-size"
