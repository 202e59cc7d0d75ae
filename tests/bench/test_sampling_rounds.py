"""What the sampling check reads from a DDTREE server's round lines: how much went through the tree, or why
that is not known (a server that times no rounds, or one whose rounds carry no tree counts)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from patchkit.bench import phases, sampling


def _line(t: float, bs: int, tree: list[int] | None = None) -> str:
    record = {"t": t, "bs": bs, "gpu": {"round": 1.0}, "host": {"round": 0.5}, "width": 8, "budget": 7}
    if tree is not None:
        record["tree"] = tree
    return json.dumps(record)


def _setup(tmp_path, lines: list[str] | None):
    launch = SimpleNamespace(logs=tmp_path)
    variant = SimpleNamespace(name="ddtree-b8")
    if lines is not None:
        sampling.round_file(launch, variant).write_text("\n".join(lines) + "\n")
    return launch, variant


def test_the_rounds_inside_the_sampling_window_are_summed(tmp_path):
    lines = [_line(5.0, 4, [4, 4, 9, 12]),  # before the window (another request): left out
             _line(10.0, 16, [16, 3, 5, 20]), _line(11.0, 8, [6, 0, 0, 7]),
             _line(30.0, 1, [1, 1, 1, 1])]  # the flush probe after the window: left out
    launch, variant = _setup(tmp_path, lines)
    usage, note = sampling.counted_rounds(launch, variant, phases.Window(concurrency=16, start=9.0, end=20.0))
    assert note is None
    assert usage == sampling.TreeUsage(rounds=2, request_rounds=24, branched=22, off_chain=3, off_chain_tokens=5,
                                       accepted_tokens=27)
    assert usage.exercised


def test_a_pass_whose_rounds_never_left_the_chain_is_not_exercised():
    usage = sampling.tree_usage([json.loads(_line(1.0, 8, [8, 0, 0, 14]))])
    assert usage is not None and usage.branched == 8 and not usage.exercised


def test_why_the_tree_use_is_unknown(tmp_path):
    window = phases.Window(concurrency=1, start=0.0, end=100.0)
    launch, variant = _setup(tmp_path, None)
    assert sampling.counted_rounds(launch, variant, None) == (None, "the server's rounds were not timed")
    usage, note = sampling.counted_rounds(launch, variant, window)  # no file: a server without the phase timer
    assert usage is None and "wrote no round records" in note
    launch, variant = _setup(tmp_path, [_line(1.0, 4), _line(2.0, 4)])  # ddtree@2.3.0: rounds without counts
    usage, note = sampling.counted_rounds(launch, variant, window)
    assert usage is None and "carry no tree counts" in note
