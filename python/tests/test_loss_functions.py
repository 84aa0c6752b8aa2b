"""Keras's loss functions (keras.losses.binary_crossentropy, mse, ...:
keras/src/losses/losses.py): per example over the last axis, on arrays
against NumPy; given to compile as they are, each trains as its class."""

import numpy as np
import pytest

import autoshard.keras as keras

RNG = np.random.default_rng(12)
T = (RNG.random((4, 3)) > 0.5).astype(np.float32)
P = RNG.uniform(0.05, 0.95, size=(4, 3)).astype(np.float32)
L = RNG.normal(size=(4, 3)).astype(np.float32)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_the_functions_are_numpys():
    losses = keras.losses
    np.testing.assert_allclose(losses.mean_squared_error(T, P), ((T - P) ** 2).mean(-1),
                               rtol=1e-6)
    np.testing.assert_allclose(losses.mae(T, P), np.abs(T - P).mean(-1), rtol=1e-6)
    np.testing.assert_allclose(losses.binary_crossentropy(T, P),
                               -(T * np.log(P) + (1 - T) * np.log(1 - P)).mean(-1), rtol=1e-5)
    np.testing.assert_allclose(losses.binary_crossentropy(T, L, from_logits=True),
                               (np.log1p(np.exp(L)) - T * L).mean(-1), rtol=1e-5)
    onehot = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
    probs = P / P.sum(-1, keepdims=True)
    np.testing.assert_allclose(losses.categorical_crossentropy(onehot, P),
                               -(onehot * np.log(probs)).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(losses.sparse_categorical_crossentropy(
        np.array([0, 2, 1, 2]), L, from_logits=True), -(onehot * _log_softmax(L)).sum(-1),
        rtol=1e-5)
    e = np.abs(L - T)
    np.testing.assert_allclose(losses.huber(T, L), np.where(e <= 1, 0.5 * e ** 2, e - 0.5).mean(-1),
                               rtol=1e-5)


@pytest.mark.parametrize("fn,cls", [
    (keras.losses.binary_crossentropy, keras.losses.BinaryCrossentropy),
    (keras.losses.mean_squared_error, keras.losses.MeanSquaredError),
    (keras.losses.mae, keras.losses.MeanAbsoluteError)])
def test_compile_takes_a_function_as_its_class(fn, cls):
    def model(loss):
        keras.utils.set_random_seed(4)
        m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3, activation="sigmoid")])
        m.compile(keras.optimizers.SGD(0.1), loss)
        return m
    a, b = model(fn), model(cls())
    b.set_weights(a.get_weights())
    h1 = a.fit(P, T, batch_size=2, epochs=2, shuffle=False, verbose=0).history["loss"]
    h2 = b.fit(P, T, batch_size=2, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h1, h2, rtol=1e-6)
    p = a.predict(P, verbose=0)
    np.testing.assert_allclose(a.evaluate(P, T, verbose=0), np.mean(fn(T, p)), rtol=1e-5)
