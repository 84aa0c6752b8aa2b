"""Frozen layers (Keras's trainable = False): no gradient, no optimizer state
and no collective for their weights; a frozen BatchNormalization runs in
inference mode; trainability is fixed at compile (Keras 3's rule)."""

import numpy as np
import pytest

import autoshard
import autoshard.keras as keras
from autoshard.keras import layers
from autoshard.keras.distribution import DeviceMesh, LayoutMap, ModelParallel, set_distribution


@pytest.fixture(autouse=True)
def no_distribution():
    set_distribution(None)
    yield
    set_distribution(None)


def data(n=12, features=6, outputs=3, seed=3):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, features)).astype(np.float32),
            rng.normal(size=(n, outputs)).astype(np.float32))


def two_layer_model(frozen_first=True):
    model = keras.Sequential([keras.Input((6,)),
                              layers.Dense(8, activation="relu", name="base",
                                           trainable=not frozen_first),
                              layers.Dense(3, name="head")])
    model.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    return model


def numpy_head_training(weights, x, y, batch_size, epochs, lr=0.1):
    """The head's SGD on MSE with the base fixed, in NumPy: the reference."""
    w1, b1, w2, b2 = [w.astype(np.float64) for w in weights]
    for _ in range(epochs):
        for start in range(0, len(x), batch_size):
            xb, yb = x[start:start + batch_size], y[start:start + batch_size]
            h = np.maximum(xb @ w1 + b1, 0)
            grad = 2 * (h @ w2 + b2 - yb) / yb.size
            w2, b2 = w2 - lr * h.T @ grad, b2 - lr * grad.sum(0)
    return w2, b2


def test_a_frozen_layer_keeps_its_weights_and_the_head_trains_as_numpy():
    x, y = data()
    model = two_layer_model()
    before = model.get_weights()
    model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    after = model.get_weights()
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    w2, b2 = numpy_head_training(before, x, y, 4, 3)
    np.testing.assert_allclose(after[2], w2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after[3], b2, rtol=1e-5, atol=1e-6)
    assert [v.path for v in model.trainable_weights] == ["head/kernel", "head/bias"]
    assert [v.path for v in model.non_trainable_weights] == ["base/kernel", "base/bias"]


def sharded():
    mesh = DeviceMesh((2, 2), ("data", "model"))
    layout_map = LayoutMap(mesh)
    layout_map["base.kernel"] = (None, "model")
    layout_map["head.kernel"] = ("model", None)
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


def test_frozen_training_on_data_2_model_2_equals_one_device():
    x, y = data(n=10)
    single = two_layer_model()
    set_distribution(sharded())
    split = two_layer_model()
    set_distribution(None)
    split.set_weights(single.get_weights())
    h1 = single.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h2 = split.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    for a, b in zip(single.get_weights(), split.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(split.get_weights()[0], single.get_weights()[0])


def test_frozen_weights_get_no_optimizer_state_and_no_gradient_collective():
    """The plan on data=4 (the weights replicated, each gradient summed over
    the data axis): freezing the base removes its Adam slots and the
    all-reduces of its kernel's and bias's gradients, and nothing else."""
    def plan(frozen):
        model = keras.Sequential([keras.Input((64,)),
                                  layers.Dense(128, activation="relu", name="base",
                                               trainable=not frozen),
                                  layers.Dense(128, name="head")])
        model.compile("adam", "mse")
        return autoshard.plan(model, DeviceMesh((4,), ("data",)), batch=512, cluster="a100-80g")

    frozen, free = plan(True), plan(False)
    head, base = 128 * 128 + 128, 64 * 128 + 128
    assert frozen.memory_per_device["optimizer_state"] == 2 * head * 4  # Adam's m and v
    assert free.memory_per_device["optimizer_state"] == 2 * (head + base) * 4
    reduced = lambda p: sorted(c["bytes"] for c in p.collectives if c["kind"] == "all_reduce")
    # The base's gradients: [64, 128] and [128] floats, summed over data when trained.
    assert sorted(reduced(frozen) + [64 * 128 * 4, 128 * 4]) == reduced(free)


def bn_model(trainable):
    bn = layers.BatchNormalization(name="bn")
    model = keras.Sequential([keras.Input((4,)), bn, layers.Dense(2, name="out")])
    bn.trainable = trainable
    model.compile(keras.optimizers.SGD(learning_rate=0.05), "mse")
    return model


def test_a_frozen_batch_normalization_runs_in_inference_mode():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(16, 4)) * 3 + 2).astype(np.float32)
    y = rng.normal(size=(16, 2)).astype(np.float32)
    frozen, free = bn_model(False), bn_model(True)
    free.set_weights(frozen.get_weights())
    # Inference mode: the training step's loss is the evaluation's.
    # (train_on_batch returns the loss before its step.)
    evaluated = frozen.test_on_batch(x, y)
    assert frozen.train_on_batch(x, y) == pytest.approx(evaluated, rel=1e-6)
    evaluated = free.test_on_batch(x, y)
    assert free.train_on_batch(x, y) != pytest.approx(evaluated, rel=1e-3)
    before = dict(zip([v.path.replace("/", ".") for v in frozen.weights], frozen.get_weights()))
    frozen.fit(x, y, batch_size=8, epochs=2, verbose=0)
    after = dict(zip([v.path.replace("/", ".") for v in frozen.weights], frozen.get_weights()))
    for w in ("bn.gamma", "bn.beta", "bn.moving_mean", "bn.moving_variance"):
        np.testing.assert_array_equal(after[w], before[w])
    assert not np.array_equal(after["out.kernel"], before["out.kernel"])
    assert [v.path for v in frozen.non_trainable_weights] == [
        "bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance"]
    assert [v.path for v in free.non_trainable_weights] == ["bn/moving_mean",
                                                            "bn/moving_variance"]


def test_a_change_after_compile_takes_effect_at_the_next_compile():
    x, y = data()
    model = two_layer_model(frozen_first=False)
    model.layers[0].trainable = False
    w0 = model.get_weights()[0]
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    w1 = model.get_weights()[0]
    assert not np.array_equal(w0, w1)  # compiled trainable: still trains
    # as set now
    assert [v.path for v in model.non_trainable_weights] == ["base/kernel", "base/bias"]
    model.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    np.testing.assert_array_equal(model.get_weights()[0], w1)


def test_a_whole_model_frozen_and_unfrozen():
    x, y = data()
    model = two_layer_model(frozen_first=False)
    model.trainable = False
    assert all(not l.trainable for l in model.layers)
    assert [v.path for v in model.trainable_weights] == []
    model.trainable = True
    assert model.layers[0].trainable and model.layers[1].trainable
    assert len(model.trainable_weights) == 4
    model.layers[1].trainable = False
    model.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    before = model.get_weights()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    after = model.get_weights()
    assert not np.array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[2], after[2])


def test_a_file_with_a_frozen_layer_loads_frozen_and_trains(tmp_path):
    x, y = data()
    model = two_layer_model()
    path = str(tmp_path / "frozen.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert [v.path for v in loaded.non_trainable_weights] == ["base/kernel", "base/bias"]
    before = loaded.get_weights()
    loaded.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    after = loaded.get_weights()
    np.testing.assert_array_equal(after[0], before[0])
    w2, _ = numpy_head_training(before, x, y, 4, 2)
    np.testing.assert_allclose(after[2], w2, rtol=1e-5, atol=1e-6)
    # Unfrozen and recompiled, the base trains too.
    loaded.trainable = True
    loaded.compile(keras.optimizers.SGD(learning_rate=0.1), "mse")
    loaded.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert not np.array_equal(loaded.get_weights()[0], before[0])
