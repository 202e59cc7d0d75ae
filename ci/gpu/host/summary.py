#!/usr/bin/env python3
"""Compact table of one or more `patchkit bench --json` envelopes (standard library only).

    python3 summary.py STEP FILE.json [FILE.json ...]

Per variant and level: ready time, tok/s per request, aggregate tok/s, ms per verify round, accept
length, x DFLASH (aggregate tok/s over the first chain variant's, same level) and whether the greedy
outputs equal the baseline's. Then tree gains, the projection (--acceptance), the sampling test, the
failures. Never raises on a missing or broken file: it says so in one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def mean(spread):
    return spread.get("mean") if isinstance(spread, dict) else None


def fmt(value, spec=".1f"):
    return "-" if value is None else format(value, spec)


def outputs_cell(result, level):
    if result.get("mode") == "sampling":
        return "-"
    if not result.get("outputs_checked"):
        return "not checked"
    compared, bad = level.get("compared", 0), len(level.get("mismatches") or [])
    if compared == 0:
        return "-"
    return f"yes {compared}/{compared}" if not bad else f"NO {bad}/{compared} differ"


def table(rows):
    header = ("variant", "prompts", "c", "ready s", "tok/s/req", "agg tok/s", "ms/round", "accept", "x DFLASH",
              "outputs same")
    cells = [header, *rows]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(str(v).ljust(w) if i in (0, 1, 9) else str(v).rjust(w)  # noqa: E731
                               for i, (v, w) in enumerate(zip(r, widths)))
    return [line(header), "  ".join("-" * w for w in widths), *[line(r) for r in rows]]


def summarize(path: Path) -> list[str]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return [f"{path.name}: no bench JSON ({type(error).__name__}: {error})"]
    if "error" in doc:
        e = doc["error"] or {}
        return [f"{path.name}: bench exit {doc.get('exit_code')}: {e.get('type')}: {e.get('message')}"
                + (f" (hint: {e['hint']})" if e.get("hint") else "")]
    result = doc.get("result") or {}
    out = [f"{path.name}: bench exit {doc.get('exit_code')} ok={doc.get('ok')} set={result.get('set_id')} "
           f"mode={result.get('mode')} budgets={result.get('budgets')} concurrency={result.get('concurrency')} "
           f"repeats={result.get('repeats')} warmup={result.get('warmup')} max_new_tokens={result.get('max_new_tokens')}"]
    rows = []
    for run in result.get("variants") or []:
        if not run.get("levels"):
            why = run.get("not_started") or ("FAILED: " + str(run.get("failure")))
            rows.append((run.get("label"), "-", "-", fmt(run.get("ready_s"), ".0f"), "-", "-", "-", "-", "-",
                         why[:70]))
        for level in run.get("levels") or []:
            rows.append((run.get("label"), level.get("prompt_set") or "-", level.get("concurrency"),
                         fmt(run.get("ready_s"), ".0f"),
                         fmt(mean(level.get("per_request_tok_s"))), fmt(mean(level.get("aggregate_tok_s"))),
                         fmt(mean(level.get("ms_per_round")), ".2f"), fmt(level.get("accept_length"), ".2f"),
                         fmt(mean(level.get("vs_dflash")), ".2f"), outputs_cell(result, level)))
    if rows:
        out += table(rows)
    for fastest in result.get("fastest_dflash") or []:
        out.append(f"fastest DFLASH at {fastest.get('prompt_set')} c={fastest.get('concurrency')}: "
                   f"{fastest.get('label')} (backend {fastest.get('backend')}, overlap {fastest.get('overlap')}), "
                   f"{fmt(fastest.get('aggregate_tok_s'))} tok/s")
    for note in result.get("notes") or []:
        out.append(f"note: {note}")
    for run in result.get("variants") or []:
        if run.get("failure") and run.get("log_tail"):
            out.append(f"server log tail of {run.get('label')} ({run.get('log')}):")
            out += ["    | " + line for line in str(run["log_tail"]).splitlines()[-12:] if line.strip()]
    timed = [(run, level) for run in result.get("variants") or [] for level in run.get("levels") or []
             if level.get("phases")]
    if timed:
        out.append("phases (device ms per round: draft tree verify commit gap round p50 p99 | host round | graphs d/v | bs)")
        for run, level in timed:
            ph = level["phases"]
            g, h = ph["gpu_ms"], ph["host_ms"]
            out.append(f"  {run.get('label'):<16} {str(level.get('prompt_set') or '-'):<6} c={level.get('concurrency'):<3} "
                       + " ".join(f"{g[k]:6.2f}" for k in ("draft", "tree", "verify", "commit", "gap", "round"))
                       + f" {ph.get('round_p50_ms', 0.0):6.2f} {ph.get('round_p99_ms', 0.0):6.2f}"
                       + f" | {h['round']:6.2f} | {100 * ph['draft_graph_share']:.0f}%/"
                       f"{100 * ph['verify_graph_share']:.0f}% | {ph['mean_bs']:.1f} n={ph['rounds']}"
                       + (f" widths={ph['widths']}" if ph.get("budgets") else ""))
    for gain in result.get("tree_gain") or []:
        out.append(f"tree gain {gain['variant']}: accept {gain['accept_length']:.2f} vs DFLASH "
                   f"{gain['dflash_accept_length']:.2f} = {gain['gain']:.2f}x (expected >= "
                   f"{result.get('expected_tree_gain')}): {'PASS' if gain['ok'] else 'FAIL'}")
    projection = result.get("projection")
    if projection:
        out.append("projected with the acceptance table (measured ms/round, table accept length):")
        for r in projection.get("rows") or []:
            out.append(f"  {r['variant']:<16} {str(r.get('prompt_set') or '-'):<6} c={r['concurrency']:<3} "
                       f"{fmt(r.get('measured_ms_per_round'), '.2f')} ms "
                       f"x {fmt(r.get('accept_length'), '.2f')} -> {fmt(r.get('projected_tok_s'))} tok/s/req, "
                       f"x DFLASH {fmt(r.get('vs_dflash'), '.2f')}, x baseline {fmt(r.get('vs_baseline'), '.2f')}"
                       + (f" ({r['note']})" if r.get("note") else ""))
    sampling = result.get("sampling")
    if sampling:
        for served in sampling.get("servers") or []:
            out.append(f"sampling server {served.get('name', '?')}: ready {fmt(served.get('ready_s'), '.0f')} s"
                       + (f", FAILED: {served.get('failure')}" if served.get("failure") else ""))
            if served.get("failure") and served.get("log_tail"):
                out += ["    | " + line for line in str(served["log_tail"]).splitlines()[-12:] if line.strip()]
        for v in sampling.get("variants") or []:
            positions = v.get("positions") or []
            worst = min(positions, key=lambda p: p["test"]["p_value"]) if positions else None
            pvals = ", ".join(f"{p['test']['p_value']:.3g}" for p in positions)
            out.append(f"sampling {v['label']}: {sampling.get('samples')} samples x {sampling.get('tokens')} tokens, "
                       f"p-values per position [{pvals}], threshold {v['threshold']:.2g}, lowest "
                       f"{fmt(worst['test']['p_value'] if worst else None, '.3g')}, same as baseline "
                       f"{v.get('same_as_baseline')}/{sampling.get('samples')}, power {fmt(v.get('power'), '.3f')}: "
                       f"{'PASS' if v.get('ok') else 'FAIL'}")
            if v.get("tree") or v.get("tree_note"):
                out.append(f"  tree use: {json.dumps(v.get('tree')) if v.get('tree') else v.get('tree_note')}")
    for failure in result.get("failures") or []:
        out.append(f"failure: {failure}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    step, files = argv[0], argv[1:]
    print(f"===== {step}: summary")
    for name in files:
        for line in summarize(Path(name)):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
