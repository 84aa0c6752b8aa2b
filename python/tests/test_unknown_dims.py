"""keras.Input(shape=(None, ...)): sizes known only when data arrives. Each
distinct batch shape is traced and compiled once, on one set of weights; the
numbers equal those of a model built for that shape with the same weights,
on one device and sharded."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras.distribution import (AutoShard, DataParallel, DeviceMesh, LayoutMap,
                                          ModelParallel, set_distribution)


def _sequence_model(length):
    """Dense per step, an LSTM over the steps, a Dense head: weights that
    depend only on the last dimension."""
    x = keras.Input((length, 5))
    h = keras.layers.Dense(8, activation="tanh", name="d1")(x)
    h = keras.layers.LSTM(6, name="lstm")(h)
    y = keras.layers.Dense(1, name="out")(h)
    model = keras.Model(x, y)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def _batches(length, n=10, seed=0):
    rng = np.random.default_rng(seed + length)
    return (rng.normal(size=(n, length, 5)).astype(np.float32),
            rng.normal(size=(n, 1)).astype(np.float32))


def test_input_shape_keeps_none():
    assert keras.Input((None, 24)).shape == (None, None, 24)
    assert keras.Input(batch_shape=(None, None, None, 1)).shape == (None, None, None, 1)


def test_unknown_length_equals_fixed_models_at_each_length_with_a_last_short_batch():
    keras.utils.set_random_seed(4)
    free = _sequence_model(None)
    weights = free.get_weights()
    # Two lengths, then the first again (its step comes from the cache); 10
    # examples in batches of 4 end with a short batch of 2.
    for length in (6, 9, 6):
        x, y = _batches(length)
        fixed = _sequence_model(length)
        fixed.set_weights(weights)
        np.testing.assert_allclose(free.predict(x, verbose=0), fixed.predict(x, verbose=0),
                                   rtol=1e-5, atol=1e-6)
        got = free.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
        want = fixed.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
        np.testing.assert_allclose(got, want, rtol=1e-5)
        for a, b in zip(free.get_weights(), fixed.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        weights = free.get_weights()
        np.testing.assert_allclose(free.evaluate(x, y, batch_size=4, verbose=0),
                                   fixed.evaluate(x, y, batch_size=4, verbose=0), rtol=1e-5)


def test_token_ids_of_any_length_through_embedding_and_pooling():
    def build(length):
        x = keras.Input((length,), dtype="int32")
        h = keras.layers.Embedding(20, 8, name="emb")(x)
        h = keras.layers.Conv1D(4, 3, padding="same", activation="relu", name="conv")(h)
        h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
        model = keras.Model(x, keras.layers.Dense(3, name="head")(h))
        model.compile("adam", "sparse_categorical_crossentropy")
        return model

    free = build(None)
    rng = np.random.default_rng(1)
    for length in (7, 12):
        ids = rng.integers(0, 20, size=(9, length))
        fixed = build(length)
        fixed.set_weights(free.get_weights())
        np.testing.assert_allclose(free.predict(ids, verbose=0), fixed.predict(ids, verbose=0),
                                   rtol=1e-5, atol=1e-6)


def test_images_of_unknown_height_and_width():
    def build(h, w):
        x = keras.Input((h, w, 1))
        y = keras.layers.Conv2D(3, 3, activation="relu", name="conv")(x)
        y = keras.layers.GlobalMaxPooling2D(name="pool")(y)
        model = keras.Model(x, keras.layers.Dense(2, name="head")(y))
        model.compile("sgd", "mse")
        return model

    free = build(None, None)
    rng = np.random.default_rng(2)
    for h, w in ((8, 8), (10, 6)):
        x = rng.normal(size=(4, h, w, 1)).astype(np.float32)
        fixed = build(h, w)
        fixed.set_weights(free.get_weights())
        np.testing.assert_allclose(free.predict(x, verbose=0), fixed.predict(x, verbose=0),
                                   rtol=1e-5, atol=1e-6)


def _flatten_then_dense():
    x = keras.Input((None, 5))
    h = keras.layers.Flatten(name="flat")(x)
    model = keras.Model(x, keras.layers.Dense(1, name="head")(h))
    model.compile("sgd", "mse")
    return model


def test_a_layer_that_needs_the_unknown_dimension_is_named():
    # At the first batch, whatever its length (the weights are made at two
    # probe lengths first), and when the weights are first asked for.
    with pytest.raises(ValueError, match="layer 'head' needs an input dimension that keras.Input "
                                         "leaves unknown"):
        _flatten_then_dense().fit(np.zeros((4, 6, 5), np.float32), np.zeros((4, 1)), verbose=0)
    with pytest.raises(ValueError, match="layer 'head'"):
        _flatten_then_dense().get_weights()


def test_a_shape_that_does_not_fit_the_known_dimensions_is_refused():
    model = _sequence_model(None)
    with pytest.raises(ValueError, match=r"does not match the model's input shape"):
        model.predict(np.zeros((2, 6, 4), np.float32), verbose=0)


def test_save_and_load_keep_the_unknown_length(tmp_path):
    model = _sequence_model(None)
    path = str(tmp_path / "free.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    for length in (3, 11):
        x, _ = _batches(length)
        np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                                   rtol=1e-6, atol=1e-7)


def _losses_at_two_lengths():
    keras.utils.set_random_seed(7)
    model = _sequence_model(None)
    losses = []
    for length in (6, 9):
        x, y = _batches(length, n=12)
        losses += model.fit(x, y, batch_size=8, epochs=2, shuffle=False,
                            verbose=0).history["loss"]
    return losses


def test_sharded_runs_equal_one_device():
    one = _losses_at_two_lengths()
    set_distribution(DataParallel(devices=["cpu:0", "cpu:1"]))
    np.testing.assert_allclose(_losses_at_two_lengths(), one, rtol=1e-5)
    layout_map = LayoutMap(DeviceMesh((1, 2), ("data", "model")))
    layout_map["d1.kernel"] = (None, "model")
    layout_map["lstm.kernel"] = (None, "model")
    set_distribution(ModelParallel(layout_map=layout_map, batch_dim_name="data"))
    np.testing.assert_allclose(_losses_at_two_lengths(), one, rtol=1e-5)
    # AutoShard plans each traced shape's step on a 2x2 mesh
    set_distribution(AutoShard(DeviceMesh((2, 2), ("data", "model"))))
    np.testing.assert_allclose(_losses_at_two_lengths(), one, rtol=1e-5)


def test_planning_one_shape_needs_every_size():
    import autoshard

    with pytest.raises(ValueError, match=r"per example \(-1: a size known only from data\)"):
        autoshard.plan(_sequence_model(None), 2, 4)


def test_a_sequential_built_for_an_unknown_length():
    model = keras.Sequential([keras.layers.Dense(3, name="d"),
                              keras.layers.GlobalAveragePooling1D(name="p")])
    model.build((None, None, 4))
    w, b = model.get_weights()
    for length in (2, 7):
        x = np.random.default_rng(length).normal(size=(3, length, 4)).astype(np.float32)
        np.testing.assert_allclose(model.predict(x, verbose=0), (x @ w + b).mean(1), rtol=1e-5,
                                   atol=1e-6)
