#!/usr/bin/python3
"""Small calls: the time a one-row `predict`, `predict_on_batch`, `model(x)`
and `train_on_batch` spends outside the engine's ops, for the small models
Keras's examples call in a loop (the character-level text generation example
calls `predict` on one row 1,600 times).

    PYTHONPATH=python /usr/bin/python3 bench/small_calls.py [--calls 400] [--rounds 5]

Each call is timed whole (wall clock, Python included); the baseline is the
time of the same call's ops, measured in the same process by the engine's
own timeline (`autoshard.trace`: every op of a run is a slice on its
device's track; their sum per run is the op time). Outside = whole - ops:
the Python wrapper, argument checks, the compiled-step lookup, copies in and
out. Rounds alternate the plain and the traced calls; each figure is the
median over the rounds' medians, since other work may share the cores.

Prints a table on stderr and one JSON object per (model, call) on stdout;
exits 1 when any call spends more than --target-ms (0.3) outside the ops.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

import autoshard  # noqa: E402
import autoshard.keras as keras  # noqa: E402


def mlp():
    """A small regression MLP: 8 -> 16 relu -> 1."""
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model, np.random.rand(1, 8).astype("float32"), np.zeros((1, 1), "float32")


def char_lstm():
    """Keras's character-level text generation example: LSTM(128) over 40
    one-hot characters of a 57-letter alphabet, softmax over the next one."""
    chars, maxlen = 57, 40
    model = keras.Sequential([keras.Input((maxlen, chars)), keras.layers.LSTM(128),
                              keras.layers.Dense(chars, activation="softmax")])
    model.compile(optimizer="rmsprop", loss="categorical_crossentropy")
    x = np.zeros((1, maxlen, chars), "float32")
    x[0, np.arange(maxlen), np.random.randint(0, chars, maxlen)] = 1
    return model, x, np.eye(chars, dtype="float32")[[3]]


def small_cnn():
    """A small convnet on one 28x28 image (Keras's MNIST example, narrower)."""
    model = keras.Sequential([keras.Input((28, 28, 1)),
                              keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.MaxPooling2D(2), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model, np.random.rand(1, 28, 28, 1).astype("float32"), np.array([3], "int32")


MODELS = {"mlp": mlp, "char_lstm": char_lstm, "small_cnn": small_cnn}


def calls(model, x, y):
    return {
        "predict": lambda: model.predict(x, verbose=0),
        "predict_on_batch": lambda: model.predict_on_batch(x),
        "__call__": lambda: model(x),
        "train_on_batch": lambda: model.train_on_batch(x, y),
    }


def wall_ms(call, n):
    """Median wall time of n calls, in ms."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def op_ms(call, n):
    """Median time of the ops of one call, in ms, from the engine's timeline:
    each run's op slices (every device track) summed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "calls.json")
        with autoshard.trace(path):
            for _ in range(n):
                call()
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "step")
    ops = [e for e in events if e.get("ph") == "X" and e.get("tid", 0) >= 1]
    per_run = [0.0] * len(runs)
    starts = [r[0] for r in runs]
    for e in ops:
        i = max(0, np.searchsorted(starts, e["ts"], side="right") - 1)
        per_run[i] += e["dur"]
    if not per_run:
        raise SystemExit("small_calls: the timeline recorded no runs")
    return statistics.median(per_run) / 1e3


def measure(name, calls_per_round, rounds):
    model, x, y = MODELS[name]()
    rows = []
    for call_name, call in calls(model, x, y).items():
        for _ in range(3):  # compiles the step for this shape
            call()
        walls, ops = [], []
        for _ in range(rounds):
            walls.append(wall_ms(call, calls_per_round))
            ops.append(op_ms(call, max(20, calls_per_round // 4)))
        whole, inside = statistics.median(walls), statistics.median(ops)
        rows.append({"model": name, "call": call_name, "whole_ms": round(whole, 4),
                     "ops_ms": round(inside, 4), "outside_ms": round(whole - inside, 4)})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=400, help="calls per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--target-ms", type=float, default=0.3)
    p.add_argument("--models", default=",".join(MODELS))
    a = p.parse_args()
    rows = []
    for name in a.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"small_calls: unknown model {name!r} (one of {', '.join(MODELS)})")
        rows += measure(name, a.calls, a.rounds)
    print(f"{'model':<10} {'call':<17} {'whole ms':>9} {'ops ms':>8} {'outside ms':>11}",
          file=sys.stderr)
    for r in rows:
        print(f"{r['model']:<10} {r['call']:<17} {r['whole_ms']:>9.4f} {r['ops_ms']:>8.4f} "
              f"{r['outside_ms']:>11.4f}", file=sys.stderr)
        print(json.dumps(r))
    worst = max(r["outside_ms"] for r in rows)
    print(f"worst outside the ops: {worst:.4f} ms (target {a.target_ms} ms)", file=sys.stderr)
    return 0 if worst <= a.target_ms else 1


if __name__ == "__main__":
    sys.exit(main())
