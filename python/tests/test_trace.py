"""autoshard.trace: a timeline of a Keras fit for Perfetto, as `train --trace` writes it."""

import json

import numpy as np
import pytest

import autoshard
import autoshard.keras as keras


def fit(steps, mesh=None):
    if mesh:
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(devices=["cpu:0", "cpu:1"]))
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(0).normal(size=(8 * steps, 16)).astype("float32")
    model.fit(x, np.arange(8 * steps) % 4, batch_size=8, epochs=1, shuffle=False, verbose=0)


@pytest.mark.parametrize("mesh", [None, "data=2"])
def test_fit_inside_trace_writes_the_steps_asked_for(tmp_path, mesh):
    path = str(tmp_path / "fit.json")
    with autoshard.trace(path, steps="2:3") as t:
        fit(4, mesh)
    assert t.runs == 2
    events = json.load(open(path))["traceEvents"]
    steps = [e["name"] for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert steps == ["step 2", "step 3"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "device 0" in tracks
    if mesh:
        assert "device 1" in tracks
    ops = [e for e in events if e["ph"] == "X" and e["cat"] != "step"]
    assert ops and all(e["dur"] >= 0 for e in ops)


def test_nothing_is_recorded_outside_the_block(tmp_path):
    t = autoshard.trace(str(tmp_path / "none.json"))
    fit(2)
    assert t.runs == 0


def test_bad_path_or_steps_is_one_error(tmp_path):
    with pytest.raises(Exception, match="must end in .json"):
        autoshard.trace(str(tmp_path / "x.txt"))
    with pytest.raises(Exception, match="steps"):
        autoshard.trace(str(tmp_path / "x.json"), steps="3:1")
