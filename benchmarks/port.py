"""Time `patchkit port` on a real set: the port's own time, patch resolution aside.

Runs ``python -m patchkit port --set SET --to VERSION`` in a scratch patchkit home, resolves every stop
the way tests/patchset/test_port_sglang.py does (``git merge-file --ours``, then the recorded
``<patch>.resolution.diff``), and runs ``--continue`` until the set is written. The time counted is
the wall time of the port commands (interpreter start included), not of the resolutions between them.

Two runs: **cold** (a fresh home: the base trees are built and every dispatch-scan fact is parsed;
the wheels are copied from ``--wheels`` when given, so no download is timed) and **warm** (the same
home again: trees and facts cached). The per-phase seconds come from the commands' ``--json`` timings.

    python benchmarks/port.py --set ddtree_patches/v1 --to 0.5.13 \\
        --resolutions tests/patchset/fixtures/port_v1_sglang_0.5.13 --wheels ~/.patchkit/cache [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.patchset.port_fixture import resolve_ours_then_edit  # noqa: E402


def port(home: Path, *args: str) -> tuple[float, dict]:
    env = {**os.environ, "PATCHKIT_HOME": str(home), "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "patchkit", "port", *args, "--json"], env=env, cwd=REPO,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"patchkit port {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, json.loads(done.stdout)["result"]


def one_port(home: Path, set_dir: Path, version: str, out: Path, resolutions: Path) -> dict:
    wall, result = port(home, "--set", str(set_dir), "--to", version, "--out", str(out))
    commands, phases, stops = 1, Counter(result["timings"]), []
    while result["state"] == "stopped":
        stops.append(result["stopped"]["patch"])
        resolve_ours_then_edit(Path(result["stopped"]["tree"]), result["stopped"]["patch"], resolutions)
        seconds, result = port(home, "--continue", "--set", str(set_dir))
        wall, commands = wall + seconds, commands + 1
        phases.update(result["timings"])
    phases.pop("total (this run)", None)
    statuses = Counter(p["status"] for p in result["report"]["patches"])
    return {"wall_s": round(wall, 2), "commands": commands, "stops": len(stops), "statuses": dict(statuses),
            "phases_s": {k: round(v, 2) for k, v in phases.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="set_dir", type=Path, required=True)
    parser.add_argument("--to", dest="version", required=True)
    parser.add_argument("--resolutions", type=Path, required=True, help="directory of <patch>.resolution.diff")
    parser.add_argument("--wheels", type=Path, help="a wheel cache to copy in (no download is timed)")
    parser.add_argument("--json", dest="json_out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-port-") as tmp:
        home = Path(tmp) / "home"
        (home / "cache").mkdir(parents=True)
        for wheel in sorted(args.wheels.glob("*.whl")) if args.wheels else []:
            shutil.copy2(wheel, home / "cache" / wheel.name)
        src = Path(tmp) / "set"
        shutil.copytree(args.set_dir, src, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        runs = {name: one_port(home, src, args.version, Path(tmp) / f"out-{name}", args.resolutions.resolve())
                for name in ("cold", "warm")}
    load = os.getloadavg()
    doc = {"set": str(args.set_dir), "to": args.version, "cpus": os.cpu_count(), "load_avg_1m": round(load[0], 2),
           "runs": runs}
    print(json.dumps(doc, indent=1))
    if args.json_out:
        args.json_out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
