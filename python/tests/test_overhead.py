"""fit/evaluate/predict read C-ordered float32 arrays in place (no copy), with
the same numbers as copied ones; bench/python_overhead.py runs."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import autoshard.keras as keras

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("AUTOSHARD_CLI", os.path.join(REPO, "build", "autoshard"))


def model():
    m = keras.Sequential([keras.Input((12,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(3)])
    m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def test_lent_arrays_give_the_numbers_of_copied_ones_and_are_released():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 12)).astype(np.float32)  # lent: C-ordered float32
    y = (np.arange(40) % 3).astype(np.int32)
    x_before, refs = x.copy(), (sys.getrefcount(x), sys.getrefcount(y))
    a, b = model(), model()
    b.set_weights(a.get_weights())
    ha = a.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    hb = b.fit(x.astype(np.float64), y.astype(np.int64), batch_size=8, epochs=2, shuffle=False,
               verbose=0).history  # copied (cast)
    assert ha == hb
    np.testing.assert_array_equal(a.predict(x, verbose=0), b.predict(np.asfortranarray(x), verbose=0))
    assert a.evaluate(x, y, verbose=0) == b.evaluate(x.astype(np.float64), y, verbose=0)
    np.testing.assert_array_equal(x, x_before)  # the engine only read it
    assert (sys.getrefcount(x), sys.getrefcount(y)) == refs  # and let go of it


class CountRefs(keras.callbacks.Callback):
    def __init__(self, array):
        super().__init__()
        self.array, self.during = array, None

    def on_train_batch_end(self, batch, logs=None):
        self.during = sys.getrefcount(self.array)


def test_fit_lends_c_ordered_float32_arrays_and_copies_others():
    y = np.zeros(16, dtype=np.int32)
    extra = {}
    for name, x in (("lent", np.ones((16, 12), np.float32)),
                    ("copied", np.asfortranarray(np.ones((16, 12), np.float32)))):
        count = CountRefs(x)
        before = sys.getrefcount(x)
        model().fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[count])
        extra[name] = count.during - before
    assert extra["lent"] == extra["copied"] + 1  # the engine's tensor holds the array


def test_python_overhead_benchmark_runs():
    driver = os.path.join(os.path.dirname(CLI), "bench", "bench_python_overhead")
    if not os.access(driver, os.X_OK):
        pytest.skip("bench_python_overhead is not built (AUTOSHARD_BENCH=OFF)")
    out = subprocess.run([sys.executable, os.path.join(REPO, "bench", "python_overhead.py"),
                          "--driver", driver, "--steps", "4", "--repeats", "1", "--rounds", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr  # 1: over the limit (a 4-step run is noise)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["engine"] for r in rows] == ["c++", "python", "python, shuffle=True"]
    assert all(r["step_s"] > 0 for r in rows) and "over C++" in out.stderr
