#!/usr/bin/python3
"""The overhead of Python: fit() of a 2-layer MLP on batches of 32 through
autoshard.keras against the same fit through the C++ API
(bench_python_overhead, bench/python_overhead.cc), per step.

    PYTHONPATH=python /usr/bin/python3 bench/python_overhead.py \
        [--driver build/bench/bench_python_overhead] [--steps 200] [--repeats 5] [--rounds 5]

The model: 784 -> 128 relu -> 10, Adam, sparse categorical cross-entropy
from logits, STEPS batches of 32 per fit() of one epoch, after a warm-up fit
that compiles the step. Rounds alternate the two engines (the C++ driver in
its own process, then Python in this one), REPEATS timed fits each, so
that load from elsewhere falls on both; the figure per engine is the fastest
fit (the least disturbed), the median is printed beside it. Python is timed
as Keras users call it: shuffle=False (one engine call; the target is <= 5%
over C++), and Keras's default shuffle=True (one call per epoch after
NumPy's permutation of x and y: that copy is the user's choice, shown for
information).

Prints a table on stderr and one JSON object per engine on stdout; exits 1
when Python is more than 5% slower per step.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

import autoshard.keras as keras  # noqa: E402

BATCH, HIDDEN, LIMIT = 32, 128, 1.05


def data(steps):
    n = steps * BATCH
    x = np.random.default_rng(0).normal(size=(n, 784)).astype(np.float32)
    y = (np.arange(n) % 10).astype(np.int32)
    return x, y


def python_model():
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(keras.optimizers.Adam(),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def time_python(model, x, y, steps, repeats, shuffle):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=shuffle, verbose=0)
        out.append((time.perf_counter() - t0) / steps)
    return out


def time_cpp(driver, steps, repeats):
    run = subprocess.run([driver, "--steps", str(steps), "--repeats", str(repeats), "--hidden",
                          str(HIDDEN), "--batch", str(BATCH)],
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(run.stdout)["repeats_s"]


def summary(engine, times, steps):
    return {"engine": engine, "steps": steps, "batch": BATCH, "hidden": HIDDEN,
            "step_s": min(times), "median_step_s": statistics.median(times),
            "fits": len(times)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", default=os.path.join(REPO, "build", "bench",
                                                     "bench_python_overhead"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if not os.access(a.driver, os.X_OK):
        sys.exit(f"python_overhead: no C++ driver at {a.driver}; build bench_python_overhead "
                 "or pass --driver")
    x, y = data(a.steps)
    model = python_model()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)  # warm-up
    times = {"c++": [], "python": [], "python, shuffle=True": []}
    for _ in range(a.rounds):
        times["c++"] += time_cpp(a.driver, a.steps, a.repeats)
        times["python"] += time_python(model, x, y, a.steps, a.repeats, False)
        times["python, shuffle=True"] += time_python(model, x, y, a.steps, a.repeats, True)
    rows = [summary(k, v, a.steps) for k, v in times.items()]
    base = rows[0]["step_s"]
    for r in rows:
        r["ratio_to_cpp"] = r["step_s"] / base
        print(json.dumps(r))
    print(f"fit, 2-layer MLP 784-{HIDDEN}-10, batch {BATCH}, {a.steps} steps per fit, "
          f"{a.rounds} rounds x {a.repeats} fits", file=sys.stderr)
    print(f"{'engine':<22} {'step (fastest)':>15} {'step (median)':>15} {'vs C++':>8}",
          file=sys.stderr)
    for r in rows:
        print(f"{r['engine']:<22} {r['step_s'] * 1e6:>12.1f} us {r['median_step_s'] * 1e6:>12.1f}"
              f" us {r['ratio_to_cpp']:>7.3f}x", file=sys.stderr)
    ratio = rows[1]["ratio_to_cpp"]
    print(f"Python (shuffle=False) over C++: {ratio:.3f}x (limit {LIMIT})", file=sys.stderr)
    return 0 if ratio <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
