"""Keras 3's variable paths ("d1/kernel") in model.weights and LayoutMaps: the
distribution guide's layout_map["d1/kernel"] shards that kernel (a
collective in the step, the one-device numbers), autoshard's older
"d1.kernel" still works, and a key that matches no variable is a ValueError
naming it and the nearest paths."""

import json

import numpy as np
import pytest

import autoshard
import autoshard.keras as keras
from autoshard.keras.distribution import (DeviceMesh, LayoutMap, ModelParallel,
                                          set_distribution)


def _mlp():
    # The distribution guide's model: two Dense layers named d1 and d2.
    x = keras.Input((8,))
    h = keras.layers.Dense(16, activation="relu", name="d1")(x)
    model = keras.Model(x, keras.layers.Dense(4, name="d2")(h))
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)


def test_weights_carry_keras_3_paths():
    model = _mlp()
    assert [w.path for w in model.weights] == ["d1/kernel", "d1/bias", "d2/kernel", "d2/bias"]
    kernel = model.weights[0]
    assert kernel.name == "kernel" and kernel.shape == (8, 16) and kernel.trainable
    np.testing.assert_array_equal(kernel.numpy(), model.get_weights()[0])
    kernel.assign(np.ones((8, 16)))
    np.testing.assert_array_equal(model.get_weights()[0], np.ones((8, 16)))

    x = keras.Input((5, 3))
    h = keras.layers.LSTM(4, return_sequences=True, name="lstm")(x)
    h = keras.layers.MultiHeadAttention(2, 4, name="mha")(h)
    paths = [w.path for w in keras.Model(x, h).weights]
    assert "lstm/lstm_cell/kernel" in paths and "lstm/lstm_cell/recurrent_kernel" in paths
    assert "mha/query/kernel" in paths


def _fit_traced(tmp_path, layout_map=None):
    keras.utils.set_random_seed(2)
    if layout_map is not None:
        set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))
    model = _mlp()
    x, y = _data()
    path = str(tmp_path / "fit.json")
    with autoshard.trace(path, steps="1:1"):
        losses = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    events = json.load(open(path))["traceEvents"]
    ops = {e["name"].split(" ")[0] for e in events if e["ph"] == "X" and e["cat"] != "step"}
    set_distribution(None)
    return losses, ops


def _guide_map(kernel="d1/kernel", bias="d1/bias", second="d2/kernel"):
    layout_map = LayoutMap(DeviceMesh((1, 2), ("data", "model")))
    layout_map[kernel] = (None, "model")
    layout_map[bias] = ("model",)
    layout_map[second] = ("model", None)
    return layout_map


@pytest.mark.parametrize("keys", [("d1/kernel", "d1/bias", "d2/kernel"),
                                  ("d1.kernel", "d1.bias", "d2.kernel"),
                                  (".*d1/kernel$", "d1/b.*", r"d2/kernel")])
def test_the_guides_layout_map_shards_and_equals_one_device(tmp_path, keys):
    one, one_ops = _fit_traced(tmp_path)
    assert "all_reduce" not in one_ops
    sharded, ops = _fit_traced(tmp_path, _guide_map(*keys))
    assert "all_reduce" in ops  # d2's row-parallel product sums its halves
    np.testing.assert_allclose(sharded, one, rtol=1e-5)


def test_a_key_that_matches_no_variable_is_named_with_the_nearest_paths():
    set_distribution(ModelParallel(layout_map=_guide_map(kernel="d1/kernal"),
                                   batch_dim_name="data"))
    with pytest.raises(ValueError, match=r"LayoutMap: key 'd1/kernal' matches no variable of "
                                         r"model '.*' \(nearest: d1/kernel"):
        _mlp()


def test_a_variable_matched_by_two_keys_is_refused():
    layout_map = _guide_map(kernel="d1/ker.*")
    layout_map[".*1/kernel"] = (None, "model")
    set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))
    with pytest.raises(ValueError, match="variable 'd1/kernel' matches several keys"):
        _mlp()


def test_a_key_every_match_of_which_has_an_exact_key_is_named():
    layout_map = _guide_map()
    layout_map["d1/.*"] = (None, "model")
    set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))
    with pytest.raises(ValueError, match="key 'd1/.\\*' lays out no variable"):
        _mlp()


def test_a_layer_output_key_is_accepted_with_a_warning():
    # The distribution guide's layout_map["d2/output"]: Keras lays out that
    # layer's output; the engine chooses activation layouts itself.
    layout_map = _guide_map()
    layout_map["d2/output"] = ("data", None)
    set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))
    with pytest.warns(UserWarning, match="'d2/output' lays out a layer's output"):
        _mlp()


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_a_loaded_model_shows_the_recurrent_paths_a_built_one_does(tmp_path, suffix):
    """A model loaded from a file names its recurrent weights under the
    cell (lstm/lstm_cell/kernel) as Keras 3 and a model built in Python do,
    and a LayoutMap key of that form shards the loaded model."""
    keras.utils.set_random_seed(4)
    x = keras.Input((5, 3))
    h = keras.layers.LSTM(4, return_sequences=True, name="lstm")(x)
    h = keras.layers.GRU(4, name="gru")(h)
    model = keras.Model(x, keras.layers.Dense(2, name="d")(h))
    model.compile(keras.optimizers.SGD(0.1), "mse")
    built = [w.path for w in model.weights]
    assert "lstm/lstm_cell/kernel" in built and "gru/gru_cell/recurrent_kernel" in built
    path = str(tmp_path / f"rnn{suffix}")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert [w.path for w in loaded.weights] == built

    rng = np.random.default_rng(1)
    xs = rng.normal(size=(8, 5, 3)).astype(np.float32)
    ys = rng.normal(size=(8, 2)).astype(np.float32)
    one = keras.models.load_model(path).fit(xs, ys, batch_size=8, epochs=2, shuffle=False,
                                           verbose=0).history["loss"]
    layout_map = LayoutMap(DeviceMesh((1, 2), ("data", "model")))
    layout_map["lstm/lstm_cell/kernel"] = (None, "model")
    set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))
    sharded = keras.models.load_model(path).fit(xs, ys, batch_size=8, epochs=2, shuffle=False,
                                               verbose=0).history["loss"]
    set_distribution(None)
    np.testing.assert_allclose(sharded, one, rtol=1e-5)
