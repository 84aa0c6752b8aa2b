"""fit/evaluate/train_on_batch with sample_weight and class_weight, and
compile's weighted_metrics, against NumPy (Keras's "sum_over_batch_size":
the weighted sum over the number of values), and on data=2,model=2 against
one device."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import DeviceMesh, LayoutMap, ModelParallel, set_distribution


@pytest.fixture(autouse=True)
def no_distribution():
    set_distribution(None)
    yield
    set_distribution(None)


def data(n=8, seed=4):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    y = rng.normal(size=(n, 3)).astype(np.float32)
    w = rng.uniform(0.2, 3.0, size=n).astype(np.float32)
    return x, y, w


def regression(lr=0.1, **compile_args):
    model = keras.Sequential([keras.Input((5,)), layers.Dense(3, name="d")])
    model.compile(keras.optimizers.SGD(learning_rate=lr), "mse", **compile_args)
    return model


def test_a_weighted_step_is_numpys():
    x, y, w = data()
    model = regression()
    k, b = [a.astype(np.float64) for a in model.get_weights()]
    p = x @ k + b
    # Keras: each example's mean over its last axis, times its weight, summed,
    # over the number of examples (not the weights' sum).
    per_example = ((p - y) ** 2).mean(axis=1)
    want = (w * per_example).sum() / len(w)
    assert model.test_on_batch(x, y, sample_weight=w) == pytest.approx(want, rel=1e-5)
    assert model.evaluate(x, y, sample_weight=w, verbose=0) == pytest.approx(want, rel=1e-5)
    assert model.train_on_batch(x, y, sample_weight=w) == pytest.approx(want, rel=1e-5)
    g = 2 * (p - y) * w[:, None] / y.size
    np.testing.assert_allclose(model.get_weights()[0], k - 0.1 * x.T @ g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.get_weights()[1], b - 0.1 * g.sum(0), rtol=1e-5, atol=1e-6)
    # Without weights again: the plain loss.
    p = x @ model.get_weights()[0] + model.get_weights()[1]
    assert model.test_on_batch(x, y) == pytest.approx(np.mean((p - y) ** 2), rel=1e-5)


def test_fit_with_sample_weight_trains_as_numpy():
    x, y, w = data(n=12)
    model = regression(lr=0.05)
    k, b = [a.astype(np.float64) for a in model.get_weights()]
    history = model.fit(x, y, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0)
    losses = []
    for _ in range(2):
        epoch = []
        for s in range(0, 12, 4):
            xb, yb, wb = x[s:s + 4], y[s:s + 4], w[s:s + 4]
            p = xb @ k + b
            epoch.append((wb * ((p - yb) ** 2).mean(1)).sum() / 4)
            g = 2 * (p - yb) * wb[:, None] / yb.size
            k, b = k - 0.05 * xb.T @ g, b - 0.05 * g.sum(0)
        losses.append(np.mean(epoch))
    np.testing.assert_allclose(history.history["loss"], losses, rtol=1e-5)
    np.testing.assert_allclose(model.get_weights()[0], k, rtol=1e-5, atol=1e-6)


def classifier():
    model = keras.Sequential([keras.Input((5,)), layers.Dense(4, name="logits")])
    model.compile(keras.optimizers.SGD(learning_rate=0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], weighted_metrics=["accuracy"])
    return model


def cross_entropy(logits, ids):
    z = logits - logits.max(1, keepdims=True)
    return np.log(np.exp(z).sum(1)) - z[np.arange(len(ids)), ids]


def test_class_weight_and_weighted_metrics():
    x, _, _ = data(n=10)
    ids = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 0])
    model = classifier()
    k, b = model.get_weights()
    logits = x @ k + b
    class_weight = {0: 0.5, 2: 4.0}  # classes 1 and 3: weight 1
    cw = np.array([class_weight.get(int(i), 1.0) for i in ids])
    want = (cw * cross_entropy(logits, ids)).sum() / len(ids)
    got = model.train_on_batch(x, ids, class_weight=class_weight, return_dict=True)
    assert got["loss"] == pytest.approx(want, rel=1e-5)
    # The same weights as sample weights: the weighted metric is a weighted mean.
    k, b = model.get_weights()
    logits = x @ k + b
    right = (np.argmax(logits, 1) == ids).astype(np.float64)
    logs = model.evaluate(x, ids, sample_weight=cw, verbose=0, return_dict=True)
    assert logs["accuracy"] == pytest.approx(right.mean())
    assert logs["weighted_accuracy"] == pytest.approx((cw * right).sum() / cw.sum())
    assert logs["loss"] == pytest.approx((cw * cross_entropy(logits, ids)).sum() / 10, rel=1e-5)
    # Without sample weights the weighted metric is the plain one (Keras's).
    logs = model.evaluate(x, ids, verbose=0, return_dict=True)
    assert logs["weighted_accuracy"] == logs["accuracy"]


def sharded():
    mesh = DeviceMesh((2, 2), ("data", "model"))
    layout_map = LayoutMap(mesh)
    layout_map["h.kernel"] = (None, "model")
    layout_map["out.kernel"] = ("model", None)
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


def two_layers():
    model = keras.Sequential([keras.Input((5,)), layers.Dense(8, activation="tanh", name="h"),
                              layers.Dense(3, name="out")])
    model.compile(keras.optimizers.Adam(0.01), "mse", weighted_metrics=["mae"])
    return model


def test_sharded_weighted_training_equals_one_device():
    x, y, w = data(n=10)
    single = two_layers()
    set_distribution(sharded())
    split = two_layers()
    set_distribution(None)
    split.set_weights(single.get_weights())
    h1 = single.fit(x, y, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0,
                    validation_data=(x, y, w))
    h2 = split.fit(x, y, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0,
                   validation_data=(x, y, w))
    for key in ("loss", "mae", "val_loss", "val_mae"):
        np.testing.assert_allclose(h1.history[key], h2.history[key], rtol=1e-5)
    for a, b in zip(single.get_weights(), split.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_bad_weights_are_refused():
    x, y, w = data()
    model = regression()
    with pytest.raises(ValueError, match="not both"):
        model.fit(x, y, sample_weight=w, class_weight={0: 1.0}, verbose=0)
    with pytest.raises(ValueError, match=r"one weight per example, shape \(8,\)"):
        model.fit(x, y, sample_weight=w[:5], verbose=0)
    with pytest.raises(ValueError, match="negative"):
        model.evaluate(x, y, sample_weight=-w, verbose=0)


# Per-time-step ("temporal") weights of a sequence output, [n, steps]: Keras's
# reduce_weighted_values weighs each step's loss (its mean over the last
# axis) and divides by the number of steps of the batch; weighted_metrics'
# Mean divides by the weights' sum (keras/src/metrics/reduction_metrics.py).


def sequence_data(n=8, seed=6):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5, 3)).astype(np.float32)
    y = rng.normal(size=(n, 5, 2)).astype(np.float32)
    ids = rng.integers(0, 4, size=(n, 5))
    w = rng.uniform(0.0, 2.0, size=(n, 5)).astype(np.float32)
    w[:, -1] = 0  # the last step counts for nothing
    return x, y, ids, w


def sequence_model(units=2, loss="mse", **compile_args):
    model = keras.Sequential([keras.Input((5, 3)), layers.LSTM(4, return_sequences=True),
                              layers.Dense(units)])
    model.compile(keras.optimizers.SGD(learning_rate=0.1), loss, **compile_args)
    return model


def test_per_time_step_weights_are_numpys():
    x, y, ids, w = sequence_data()
    model = sequence_model(weighted_metrics=["mae"])
    p = model.predict(x, verbose=0).astype(np.float64)
    per_step = ((p - y) ** 2).mean(-1)
    loss, mae = model.evaluate(x, y, sample_weight=w, batch_size=8, verbose=0)
    np.testing.assert_allclose(loss, (per_step * w).sum() / w.size, rtol=1e-5)
    np.testing.assert_allclose(mae, (np.abs(p - y).mean(-1) * w).sum() / w.sum(), rtol=1e-5)
    # Sparse class ids per step, from logits.
    sparse = sequence_model(4, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    logits = sparse.predict(x, verbose=0).astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, ids[..., None], -1)[..., 0]
    got = sparse.evaluate(x, ids, sample_weight=w, batch_size=8, verbose=0)
    np.testing.assert_allclose(got, (nll * w).sum() / w.size, rtol=1e-5)


def test_zero_weighted_steps_do_not_train_and_sharding_equals_one_device():
    x, y, _, w = sequence_data()
    single = sequence_model()
    start = single.get_weights()
    other = y.copy()
    other[:, -1] += 100.0  # changes only the steps of weight 0
    moved = sequence_model()
    moved.set_weights(start)
    set_distribution(keras.distribution.AutoShard(DeviceMesh((2, 2), ("data", "model")),
                                                  batch_dim_name="data"))
    split = sequence_model()
    set_distribution(None)
    split.set_weights(start)
    h1 = single.fit(x, y, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h2 = split.fit(x, y, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h3 = moved.fit(x, other, sample_weight=w, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(h1.history["loss"], h3.history["loss"], rtol=1e-6)
    for a, b, c in zip(single.get_weights(), split.get_weights(), moved.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-7)


def test_per_step_weights_of_the_wrong_shape_are_refused():
    x, y, _, w = sequence_data()
    with pytest.raises(ValueError, match=r"does not match the targets' \(8, 5\)"):
        sequence_model().fit(x, y, sample_weight=w[:, :3], verbose=0)
