"""The DDTree draft top-k over a TP-sharded LM head equals the dense top-k.

Runs tp_topk_worker.py as one real subprocess per rank (gloo on the CPU).
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# Each rank imports the patched worker; skip (with the import error) where SGLang cannot import.
pytest.importorskip("sglang.srt.speculative.dflash_worker")

WORKER = Path(__file__).with_name("tp_topk_worker.py")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# k=450 exceeds the smaller shard (400 ids), so shard results are padded.
@pytest.mark.parametrize("world_size,topk", [(1, 20), (2, 20), (2, 450)])
def test_vocab_parallel_topk_matches_dense(world_size, topk):
    env = dict(os.environ)
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(world_size),
        TOPK=str(topk),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER)],
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world_size)
    ]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out[-3000:]
    assert "match=True" in outputs[0]
