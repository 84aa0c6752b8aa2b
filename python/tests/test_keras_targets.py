"""Targets the way Keras takes them: integer, boolean and uint8 targets cast
for losses on numbers, float class ids taken as ids, (n,) targets against
(n, 1) outputs reshaped (keras/src/losses/loss.py,
squeeze_or_expand_to_same_rank), and one-hot / class-id mix-ups named. Every
loss is checked against NumPy on the model's own predictions."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras.distribution import DataParallel, set_distribution

EPS = 1e-7  # Keras's backend epsilon (probabilities are clipped to it)


def _model(units, activation, loss, metrics=None):
    x = keras.Input((3,))
    y = keras.layers.Dense(units, activation=activation, name="out")(x)
    model = keras.Model(x, y)
    model.compile(optimizer="sgd", loss=loss, metrics=metrics)
    return model


def _data(n=10, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)


def _bce(p, t):
    p = np.clip(p, EPS, 1 - EPS)
    return float(-np.mean(t * np.log(p) + (1 - t) * np.log(1 - p)))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, bool])
def test_binary_crossentropy_takes_integer_and_boolean_targets_of_shape_n(dtype):
    x = _data()
    labels = np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 1])
    model = _model(1, "sigmoid", "binary_crossentropy", metrics=["accuracy"])
    p = model.predict(x, verbose=0)
    assert p.shape == (10, 1)
    got = model.evaluate(x, labels.astype(dtype), verbose=0, return_dict=True)
    want = _bce(p, labels.reshape(10, 1).astype(np.float32))
    np.testing.assert_allclose(got["loss"], want, rtol=1e-5)
    acc = np.mean((p[:, 0] > 0.5) == labels.astype(bool))
    np.testing.assert_allclose(got["accuracy"], acc, rtol=1e-6)


def test_mse_with_n_targets_against_n_by_1_outputs_is_not_broadcast():
    # Without Keras's reshape, (n,) - (n, 1) would broadcast to (n, n).
    x = _data()
    y = np.arange(10, dtype=np.float64)
    model = _model(1, None, "mse")
    p = model.predict(x, verbose=0)
    want = float(np.mean((p[:, 0] - y) ** 2))
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), want, rtol=1e-5)
    # and (n, 1) targets against (n, 1) outputs, unchanged
    np.testing.assert_allclose(model.evaluate(x, y.reshape(10, 1), verbose=0), want, rtol=1e-5)
    # and integer (n,) targets, cast to float32
    np.testing.assert_allclose(model.evaluate(x, y.astype(np.int64), verbose=0), want,
                               rtol=1e-5)


def test_training_with_n_targets_follows_numpy_gradient_descent():
    x = _data()
    y = np.arange(10, dtype=np.int32) % 3
    model = _model(1, None, "mse")
    w, b = model.get_weights()
    model.optimizer.learning_rate = 0.1
    model.fit(x, y, batch_size=10, epochs=1, shuffle=False, verbose=0)
    err = (x @ w + b)[:, 0] - y
    grad_w = 2 * x.T @ err[:, None] / 10
    np.testing.assert_allclose(model.get_weights()[0], w - 0.1 * grad_w, rtol=1e-5, atol=1e-6)


def _sparse_ce(p, ids):
    q = np.clip(p / p.sum(-1, keepdims=True), EPS, 1 - EPS)
    return float(-np.mean(np.log(q[np.arange(len(ids)), ids])))


@pytest.mark.parametrize("shape", [(10,), (10, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8])
def test_sparse_crossentropy_takes_float_and_column_class_ids(shape, dtype):
    x = _data()
    ids = np.array([0, 1, 2, 3, 0, 1, 2, 3, 3, 2])
    model = _model(4, "softmax", "sparse_categorical_crossentropy", metrics=["accuracy"])
    p = model.predict(x, verbose=0)
    got = model.evaluate(x, ids.reshape(shape).astype(dtype), verbose=0, return_dict=True)
    np.testing.assert_allclose(got["loss"], _sparse_ce(p, ids), rtol=1e-5)
    np.testing.assert_allclose(got["accuracy"], np.mean(p.argmax(-1) == ids), rtol=1e-6)


def test_categorical_crossentropy_casts_integer_one_hot_targets():
    x = _data()
    ids = np.array([0, 1, 2, 3, 0, 1, 2, 3, 3, 2])
    one_hot = np.eye(4, dtype=np.int64)[ids]
    model = _model(4, "softmax", "categorical_crossentropy")
    p = model.predict(x, verbose=0)
    np.testing.assert_allclose(model.evaluate(x, one_hot, verbose=0), _sparse_ce(p, ids),
                               rtol=1e-5)


def test_one_hot_targets_for_the_sparse_loss_are_named():
    x = _data()
    one_hot = np.eye(4, dtype=np.float32)[np.arange(10) % 4]
    model = _model(4, "softmax", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="look one-hot.*categorical_crossentropy"):
        model.fit(x, one_hot, verbose=0)


@pytest.mark.parametrize("shape", [(10,), (10, 1)])
def test_class_ids_for_the_categorical_loss_are_named(shape):
    x = _data()
    ids = (np.arange(10) % 4).reshape(shape)
    model = _model(4, "softmax", "categorical_crossentropy")
    with pytest.raises(ValueError, match="look like class ids.*to_categorical"):
        model.fit(x, ids, verbose=0)


def test_n_targets_train_the_same_on_two_devices():
    x = _data(16)
    y = (np.arange(16) % 2).astype(bool)

    def run():
        keras.utils.set_random_seed(3)
        model = _model(1, "sigmoid", "binary_crossentropy")
        return model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0).history["loss"]

    one = run()
    set_distribution(DataParallel(devices=["cpu:0", "cpu:1"]))
    two = run()
    np.testing.assert_allclose(two, one, rtol=1e-5)
    assert one[-1] < one[0]
