#!/usr/bin/env python3
"""Summary of the host-side round diagnostics that diag/sitecustomize.py wrote (standard library only).

    python3 rounds.py DIAG_DIR

Per worker class and batch size: decode rounds, host ms per round (p50, p99, max), rounds over 20 ms
(stalls) and what happened during them (Triton compilations, device allocations, GC collections);
then the head of each cProfile summary. Never raises on a missing or broken file.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

STALL_MS = 20.0


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(folder: Path) -> None:
    rounds: dict[tuple[str, int], list[tuple[float, int, int, int]]] = defaultdict(list)
    for path in sorted(folder.glob("rounds-*.tsv")):
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) != 6:
                continue
            try:
                label, bs, ms, compiles, allocs, gcs = parts[0], int(parts[1]), float(parts[2]), *map(int, parts[3:])
            except ValueError:
                continue
            rounds[(label, bs)].append((ms, compiles, allocs, gcs))
    print(f"  host round diagnostics ({folder.name}): worker, bs, rounds, host ms p50/p99/max, stalls > {STALL_MS:.0f} ms"
          " (with Triton compiles / device allocs / GC)")
    for (label, bs), rows in sorted(rounds.items()):
        times = [r[0] for r in rows]
        stalls = [r for r in rows if r[0] > STALL_MS]
        causes = (f"compiles {sum(1 for r in stalls if r[1])}, allocs {sum(1 for r in stalls if r[2] > 0)}, "
                  f"gc {sum(1 for r in stalls if r[3])}") if stalls else ""
        print(f"    {label:15s} bs={bs:<3d} n={len(rows):<5d} {statistics.median(times):7.2f} "
              f"{quantile(times, 0.99):7.2f} {max(times):8.2f}  stalls {len(stalls)} {causes}")
        print(f"      all rounds: compiles {sum(r[1] for r in rows)}, device allocs {sum(max(r[2], 0) for r in rows)}, "
              f"gc {sum(r[3] for r in rows)}")
    for path in sorted(folder.glob("profile-*.txt")):
        lines = path.read_text(errors="replace").splitlines()
        head = [ln for ln in lines if ln.strip()][:24]
        print(f"  --- {path.name}")
        for ln in head:
            print(f"    {ln[:160]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
