#!/usr/bin/env python3
"""Variants of the public IOPDDL problems: a proxy for the contest's hidden ones.

The contest's twenty private problems come from the same model families as
the public A, G, M and S (and reach 65,000 nodes). A solver tuned on the four
public graphs can fit them and still fail on their siblings, so the benchmark
set (bench/problem_set.sh) also solves problems derived from them here, on the
fly and never committed:

  tight   the memory limit lowered towards the smallest usages' peak
          (the public limits are 1.10x that peak; tight: 1.03x)
  loose   the limit 1.25x the given one (other peaks bind, or none)
  costs   every node cost and every edge entry times its own random
          factor (log-normal, sigma 0.5): the same graph, other optima
  half    the connected subgraph grown from a random node by breadth-first
          search to half of the nodes, its limit 1.10x its own smallest peak
  twice   two copies (costs perturbed independently), the second's time
          shifted by a third of the horizon so their peaks overlap in part,
          limit 1.10x the union's smallest peak: 57,000-70,000 nodes,
          two components joined by memory alone

Every variant stays feasible (each limit is at least the smallest usages'
peak). Seeded: the same files on every run.

  bench/iopddl_variants.py SHARED_IOPDDL_DIR OUT_DIR [--only A,M,S,G]
"""
import argparse
import gzip
import json
import os
import random
from collections import deque

KINDS = {"A": ["tight", "loose", "costs", "half", "twice"],
         "M": ["tight", "loose", "costs", "half", "twice"],
         "S": ["tight", "loose", "costs", "half", "twice"],
         "G": ["tight", "costs"]}
FORBIDDEN = 500_000_000_000_000_000  # costs at or above it are forbidden


def load(path):
    with gzip.open(path) if path.endswith(".gz") else open(path) as f:
        return json.load(f)["problem"]


def smallest_peak(p):
    """The peak of every node at its smallest usage: no limit below it fits."""
    delta = {}
    for (lo, hi), usage in zip(p["nodes"]["intervals"], p["nodes"]["usages"]):
        if lo < hi:
            u = min(usage)
            delta[lo] = delta.get(lo, 0) + u
            delta[hi] = delta.get(hi, 0) - u
    cur = peak = 0
    for t in sorted(delta):
        cur += delta[t]
        peak = max(peak, cur)
    return peak


def perturb(value, rng, sigma):
    if value >= FORBIDDEN or value == 0:
        return value
    return max(1, int(value * rng.lognormvariate(0, sigma)))


def with_costs(p, rng, sigma=0.5):
    q = json.loads(json.dumps(p))
    q["nodes"]["costs"] = [[perturb(c, rng, sigma) for c in cs] for cs in p["nodes"]["costs"]]
    q["edges"]["costs"] = [[perturb(c, rng, sigma) for c in cs] for cs in p["edges"]["costs"]]
    return q


def subgraph(p, keep):
    """The nodes in `keep` (a set) and the edges between them, renumbered."""
    order = sorted(keep)
    index = {v: i for i, v in enumerate(order)}
    nodes = {k: [p["nodes"][k][v] for v in order] for k in ("intervals", "costs", "usages")}
    pairs, costs = [], []
    for (u, v), c in zip(p["edges"]["nodes"], p["edges"]["costs"]):
        if u in index and v in index:
            pairs.append([index[u], index[v]])
            costs.append(c)
    return {"nodes": nodes, "edges": {"nodes": pairs, "costs": costs}}


def half(p, rng):
    n = len(p["nodes"]["costs"])
    adj = [[] for _ in range(n)]
    for u, v in p["edges"]["nodes"]:
        adj[u].append(v)
        adj[v].append(u)
    # A start in a large component: retry until the search reaches half.
    for _ in range(50):
        start = rng.randrange(n)
        seen, queue = {start}, deque([start])
        while queue and len(seen) < n // 2:
            for w in adj[queue.popleft()]:
                if w not in seen:
                    seen.add(w)
                    queue.append(w)
        if len(seen) >= n // 2:
            break
    q = subgraph(p, seen)
    q["usage_limit"] = int(1.10 * smallest_peak(q))
    return q


def twice(p, rng):
    a, b = with_costs(p, rng, 0.2), with_costs(p, rng, 0.2)
    n = len(p["nodes"]["costs"])
    horizon = max(hi for _, hi in p["nodes"]["intervals"])
    shift = horizon // 3
    q = {"nodes": {k: a["nodes"][k] + b["nodes"][k] for k in ("costs", "usages")},
         "edges": {"nodes": a["edges"]["nodes"] + [[u + n, v + n] for u, v in b["edges"]["nodes"]],
                   "costs": a["edges"]["costs"] + b["edges"]["costs"]}}
    q["nodes"]["intervals"] = a["nodes"]["intervals"] + [
        [lo + shift, hi + shift] if lo < hi else [lo, hi] for lo, hi in b["nodes"]["intervals"]]
    q["usage_limit"] = int(1.10 * smallest_peak(q))
    return q


def variant(p, kind, rng):
    floor = smallest_peak(p)
    if kind == "tight":
        q = dict(p)
        q["usage_limit"] = int(1.03 * floor)
    elif kind == "loose":
        q = dict(p)
        q["usage_limit"] = int(1.25 * p["usage_limit"])
    elif kind == "costs":
        q = with_costs(p, rng)
        q["usage_limit"] = p["usage_limit"]
    elif kind == "half":
        q = half(p, rng)
    else:
        q = twice(p, rng)
    assert q["usage_limit"] >= smallest_peak(q), kind
    return q


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shared")
    ap.add_argument("out")
    ap.add_argument("--only", default="A,G,M,S")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.only.split(","):
        path = os.path.join(args.shared, f"asplos-2025-iopddl-{name}.json.gz")
        if not os.path.exists(path):
            continue
        p = load(path)
        for kind in KINDS[name]:
            rng = random.Random(f"{name}-{kind}")
            q = variant(p, kind, rng)
            q["name"] = f"{name}-{kind}"
            with open(os.path.join(args.out, f"iopddl-{name}-{kind}.json"), "w") as f:
                json.dump({"problem": q}, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
