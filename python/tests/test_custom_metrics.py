"""keras.metrics.Metric subclasses in compile (update_state, result,
reset_state; state summed over an epoch, the same on every mesh) and
add_loss in a custom layer's call (added to the training and evaluation
loss)."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers, ops
from autoshard.keras.distribution import DataParallel, DeviceMesh, LayoutMap, ModelParallel
from autoshard.keras.distribution import set_distribution

RNG = np.random.default_rng(5)
X = RNG.normal(size=(40, 6)).astype(np.float32)
Y = (RNG.normal(size=(40, 1)) > 0).astype(np.float32)


class BinaryTruePositives(keras.metrics.Metric):
    """Keras's guide example ("Writing your own metrics"), with a count to
    make result a ratio: the share of examples that are true positives."""

    def __init__(self, name="binary_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(shape=(), initializer="zeros", name="tp")
        self.count = self.add_weight(name="count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "bool")
        y_pred = ops.cast(y_pred > 0.5, "bool")
        values = ops.cast(ops.logical_and(ops.equal(y_true, True), ops.equal(y_pred, True)),
                          "float32")
        self.true_positives.assign_add(ops.sum(values))
        self.count.assign_add(ops.shape(y_true)[0])

    def result(self):
        return self.true_positives / self.count

    def reset_state(self):
        self.true_positives.assign(0.0)
        self.count.assign(0)


def reference_share(model, x, y, batch_size):
    """The metric over an epoch by hand: predictions of the weights in
    force at each batch are what the metric sees; evaluate's are fixed."""
    p = model.predict(x, batch_size=batch_size, verbose=0)
    return float(np.mean((y > 0.5) & (p > 0.5)))


def classifier():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((6,)), layers.Dense(8, activation="relu", name="h"),
                              layers.Dense(1, activation="sigmoid", name="out")])
    model.compile(keras.optimizers.SGD(0.05), "binary_crossentropy",
                  metrics=[BinaryTruePositives(), "accuracy"])
    return model


def test_metric_subclass_is_computed_over_the_epoch():
    model = classifier()
    got = model.evaluate(X, Y, batch_size=16, return_dict=True, verbose=0)
    # 40 examples in batches of 16, 16, 8: the epoch's share, not the mean
    # of the batches' shares.
    assert got["binary_true_positives"] == pytest.approx(reference_share(model, X, Y, 16),
                                                         abs=1e-7)
    p = model.predict(X, verbose=0)
    batch_means = np.mean([np.mean((Y[i:i + 16] > 0.5) & (p[i:i + 16] > 0.5))
                           for i in (0, 16, 32)])
    assert abs(batch_means - got["binary_true_positives"]) > 1e-3  # the test can tell
    history = model.fit(X, Y, batch_size=16, epochs=2, verbose=0).history
    assert len(history["binary_true_positives"]) == 2
    # The metric object holds the last result, as Keras's.
    assert float(model._compiled[3][0].result()) == pytest.approx(
        history["binary_true_positives"][-1])


def test_metric_subclass_sharded_equals_one_device():
    one = classifier().fit(X, Y, batch_size=8, epochs=2, verbose=0).history
    set_distribution(DataParallel(devices=["cpu:0", "cpu:1"]))
    data = classifier().fit(X, Y, batch_size=8, epochs=2, verbose=0).history
    set_distribution(None)
    layout = LayoutMap(DeviceMesh((1, 2), ["data", "model"]))
    layout["h/kernel"] = (None, "model")
    set_distribution(ModelParallel(layout_map=layout, batch_dim_name="data"))
    model = classifier().fit(X, Y, batch_size=8, epochs=2, verbose=0).history
    for run in (data, model):
        np.testing.assert_allclose(run["binary_true_positives"], one["binary_true_positives"],
                                   rtol=1e-6)
        np.testing.assert_allclose(run["loss"], one["loss"], rtol=1e-5)


def test_metric_subclass_eagerly_and_bad_state():
    m = BinaryTruePositives()
    assert m.name == "binary_true_positives"
    m.update_state(np.array([1, 1, 0, 1.0]), np.array([0.9, 0.2, 0.8, 0.7]))
    assert float(m.result()) == pytest.approx(0.5)
    m.reset_state()
    m.update_state(np.array([1.0]), np.array([0.9]))
    assert float(m.result()) == 1.0
    assert [v.name for v in m.variables] == ["tp", "count"]

    class Max(keras.metrics.Metric):
        def __init__(self):
            super().__init__(name="max")
            self.top = self.add_variable(shape=(), aggregation="max")

    with pytest.raises(ValueError, match="aggregation='max'.*summed"):
        Max()


class Activity(layers.Layer):
    """A layer that adds a penalty on its output's mean square, and one on
    its weight (Keras's add_loss examples)."""

    def __init__(self, rate, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 3), initializer="glorot_uniform",
                                 name="w")

    def call(self, x):
        h = ops.matmul(x, self.w)
        self.add_loss(self.rate * ops.mean(ops.square(h)))
        self.add_loss(ops.square(self.w) * 0.01)  # summed over its elements, as Keras's
        return h


def activity_model(rate):
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((6,)), Activity(rate, name="act")])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def test_add_loss_is_added_to_the_loss():
    y = RNG.normal(size=(40, 3)).astype(np.float32)
    model = activity_model(0.5)
    w = model.get_weights()[0].astype(np.float64)
    h = X.astype(np.float64) @ w
    want = np.mean((h - y) ** 2) + 0.5 * np.mean(h ** 2) + 0.01 * np.sum(w ** 2)
    assert model.evaluate(X, y, batch_size=40, verbose=0) == pytest.approx(want, rel=1e-5)
    # The gradient follows: one step by hand.
    grad = (2 * X.T @ (h - y) / h.size + 0.5 * 2 * X.T @ h / h.size + 0.02 * w)
    model.train_on_batch(X, y)
    np.testing.assert_allclose(model.get_weights()[0], w - 0.1 * grad, rtol=1e-4, atol=1e-6)


def test_add_loss_sharded_equals_one_device():
    y = RNG.normal(size=(40, 3)).astype(np.float32)
    one = activity_model(0.3).fit(X, y, batch_size=8, epochs=2, verbose=0).history["loss"]
    layout = LayoutMap(DeviceMesh((2, 2), ["data", "model"]))
    layout["act/w"] = (None, "model")
    set_distribution(ModelParallel(layout_map=layout, batch_dim_name="data"))
    sharded = activity_model(0.3).fit(X, y, batch_size=8, epochs=2, verbose=0).history["loss"]
    np.testing.assert_allclose(sharded, one, rtol=1e-5)


def test_add_loss_outside_call_is_refused():
    layer = Activity(0.1)
    with pytest.raises(ValueError, match="add_loss is supported inside call"):
        layer.add_loss(1.0)


def test_model_losses_holds_the_terms_of_the_last_call():
    model = activity_model(0.5)
    assert model.losses == []  # no call yet: a step's terms stay in the step
    x = X[:5]
    model(x)
    w = model.get_weights()[0].astype(np.float64)
    h = x.astype(np.float64) @ w
    terms = model.losses
    assert len(terms) == 2
    assert float(terms[0]) == pytest.approx(0.5 * np.mean(h ** 2), rel=1e-5)
    assert float(terms[1]) == pytest.approx(0.01 * np.sum(w ** 2), rel=1e-5)
