#!/usr/bin/env python3
"""bench/problem_set.sh's table: each answer's cost against the best found.

  problem_set_report.py ROWS.jsonl [ROWS.jsonl ...] [--best BEST.json] [--markdown]

Rows are JSON lines (problem, nodes, limit_s, cost, found_s, seconds,
proven_optimal, and "solver" when not autoshard). The best of a problem is
the lowest cost of any row given, of the BEST file (updated with the rows'
own), and the best known result for the public problems. With several row
files (a run before a change and one after, say) or solvers, each gets its
own columns, all against the same best; with another solver, a count of the
problems where autoshard's answer is at or below its answer, per limit.
"""
import argparse
import json
import math
import os
import sys

KNOWN = {"iopddl-A": 6548641531, "iopddl-G": 217039, "iopddl-M": 49928460991,
         "iopddl-S": 1534613444}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", nargs="+")
    ap.add_argument("--best")
    ap.add_argument("--markdown", action="store_true", help="the table as Markdown (stdout)")
    args = ap.parse_args()
    runs, solvers, files = [], [], []
    for k, f in enumerate(args.rows):
        rows = [json.loads(l) for l in open(f) if l.strip()]
        for solver in sorted({r.get("solver", "autoshard") for r in rows}):
            runs.append([r for r in rows if r.get("solver", "autoshard") == solver])
            solvers.append(solver)
            files.append(k + 1)
    # Named by solver where that tells the runs apart, else by file too.
    if len(runs) == 1:
        labels = [""]
    elif len(set(solvers)) == len(runs):
        labels = solvers
    else:
        labels = [f"run {k} {s}" for k, s in zip(files, solvers)]
    best = dict(KNOWN)
    if args.best and os.path.exists(args.best):
        for k, v in json.load(open(args.best)).items():
            best[k] = min(best.get(k, v), v)
    for rows in runs:
        for r in rows:
            if r["cost"] is not None:
                best[r["problem"]] = min(best.get(r["problem"], r["cost"]), r["cost"])
    if args.best:
        json.dump(dict(sorted(best.items())), open(args.best, "w"), indent=1)
    limits = sorted({r["limit_s"] for rows in runs for r in rows})
    names = sorted({r["problem"] for rows in runs for r in rows})
    nodes = {r["problem"]: r["nodes"] for rows in runs for r in rows}
    head = f"{'problem':24} {'nodes':>6}"
    for k in range(len(runs)):
        for l in limits:
            tag = f"{labels[k] + ' ' if labels[k] else ''}@{l}s"
            head += f" {'cost/best ' + tag:>22} {'found s':>7} {'wall s':>6}"
    print(head, file=sys.stderr)
    for name in names:
        line = f"{name:24} {nodes[name]:6}"
        for rows in runs:
            by = {r["limit_s"]: r for r in rows if r["problem"] == name}
            for l in limits:
                r = by.get(l)
                if not r:
                    line += f" {'-':>22} {'-':>7} {'-':>6}"
                    continue
                ratio = "none" if r["cost"] is None else f"{r['cost'] / best[name]:.4f}"
                if r["proven_optimal"]:
                    ratio += " (opt)"
                found = "-" if r.get("found_s") is None else f"{r['found_s']:.1f}"
                line += f" {ratio:>22} {found:>7} {r['seconds']:6.1f}"
        print(line, file=sys.stderr)
    for k, rows in enumerate(runs):
        for l in limits:
            at = [r for r in rows if r["limit_s"] == l]
            ok = [r["cost"] / best[r["problem"]] for r in at if r["cost"] is not None]
            missing = len(at) - len(ok)
            if not ok:
                continue
            gm = math.exp(sum(map(math.log, ok)) / len(ok))
            over = max(r["seconds"] / l for r in at)
            loads = sorted(r["load"] for r in at if "load" in r)
            load = f", load {loads[0]:.1f}-{loads[-1]:.1f}" if loads else ""
            print(f"{labels[k] + ', ' if labels[k] else ''}at {l} s: geometric mean "
                  f"{gm:.4f} of the best over {len(ok)} problems, worst {max(ok):.4f}"
                  f"{f', {missing} without an answer' if missing else ''}; slowest answer "
                  f"{over:.2f}x the limit{load}", file=sys.stderr)
    head_to_head(runs, labels, limits)
    if args.markdown:
        markdown(runs, labels, limits, names, nodes, best)
    else:
        print(json.dumps([r for rows in runs for r in rows]))


def head_to_head(runs, labels, limits):
    """Per limit, on the problems both solvers ran: where autoshard's cost
    is at or below each other solver's (no answer: above every answer)."""
    ours = [k for k, run in enumerate(runs) if all("solver" not in r for r in run)]
    for k in range(len(runs)):
        if k in ours:
            continue
        for o in ours:
            for l in limits:
                mine = {r["problem"]: r["cost"] for r in runs[o] if r["limit_s"] == l}
                theirs = {r["problem"]: r["cost"] for r in runs[k] if r["limit_s"] == l}
                both = sorted(set(mine) & set(theirs))
                if not both:
                    continue
                inf = float("inf")
                behind = [p for p in both
                          if (mine[p] if mine[p] is not None else inf)
                          > (theirs[p] if theirs[p] is not None else inf)]
                print(f"at {l} s: {labels[o] or 'autoshard'} at or below {labels[k]} on "
                      f"{len(both) - len(behind)} of {len(both)} problems"
                      f"{'; above on ' + ', '.join(behind) if behind else ''}", file=sys.stderr)


def markdown(runs, labels, limits, names, nodes, best):
    """One row per problem: cost / best and the time the answer was found
    (of the wall time), per run and limit."""
    cols = [(k, l) for k in range(len(runs)) for l in limits]
    head = ["problem", "nodes"] + [f"{labels[k] + ', ' if labels[k] else ''}{l} s"
                                   for k, l in cols]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in names:
        cells = [name, f"{nodes[name]:,}"]
        for k, l in cols:
            r = next((r for r in runs[k] if r["problem"] == name and r["limit_s"] == l), None)
            if r is None:
                cells.append("-")
            elif r["cost"] is None:
                cells.append(f"none ({r['seconds']:.1f} s)")
            else:
                found = "" if r.get("found_s") is None else f"{r['found_s']:.1f} of "
                opt = " opt" if r["proven_optimal"] else ""
                cells.append(f"{r['cost'] / best[name]:.4f}{opt} ({found}{r['seconds']:.1f} s)")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
