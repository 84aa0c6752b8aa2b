"""Custom keras.layers.Layer and keras.Model subclasses, traced into the
engine's step graph: forward against NumPy, gradients against finite
differences, sharded training against one device, AutoShard splitting a
custom weight, saving."""

import json
import os
import subprocess
import zipfile

import numpy as np
import pytest

import autoshard
import autoshard.keras as keras
from autoshard.keras import layers, ops
from autoshard.keras.distribution import (DataParallel, DeviceMesh, LayoutMap, ModelParallel,
                                          set_distribution)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("AUTOSHARD_CLI", os.path.join(REPO, "build", "autoshard"))


class Antirectifier(layers.Layer):
    """Keras's antirectifier example: centre, then relu of x and of -x."""

    def __init__(self, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.initializer = initializer

    def build(self, input_shape):
        dim = input_shape[-1]
        self.kernel = self.add_weight(shape=(dim * 2, dim), initializer=self.initializer,
                                      name="kernel", trainable=True)

    def call(self, inputs):
        inputs -= ops.mean(inputs, axis=-1, keepdims=True)
        concatenated = ops.concatenate([ops.relu(inputs), ops.relu(-inputs)], axis=-1)
        return ops.matmul(concatenated, self.kernel)

    def get_config(self):
        return {**super().get_config(), "initializer": self.initializer}


class TransformerBlock(layers.Layer):
    """Self-attention written from ops and Dense, then a feed-forward MLP."""

    def __init__(self, dim, heads, hidden, **kwargs):
        super().__init__(**kwargs)
        self.heads = heads
        self.qkv = layers.Dense(3 * dim)
        self.out = layers.Dense(dim)
        self.ff = [layers.Dense(hidden, activation="gelu"), layers.Dense(dim)]
        self.norm1 = layers.LayerNormalization()
        self.norm2 = layers.LayerNormalization()

    def call(self, x, training=None):
        b, t, d = ops.shape(x)
        h = self.heads
        q, k, v = ops.split(self.qkv(x), 3, axis=-1)
        q, k, v = (ops.reshape(z, (b, t, h, d // h)) for z in (q, k, v))
        scores = ops.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // h)
        attended = ops.einsum("bhqk,bkhd->bqhd", ops.softmax(scores, axis=-1), v)
        x = self.norm1(x + self.out(ops.reshape(attended, (b, t, d))))
        y = x
        for layer in self.ff:
            y = layer(y)
        return self.norm2(x + y)


class ResidualMLP(keras.Model):
    """A subclassed model: layers in __init__, a residual call."""

    def __init__(self, width=16, depth=2, classes=5, **kwargs):
        super().__init__(**kwargs)
        self.stem = layers.Dense(width, activation="relu")
        self.blocks = [layers.Dense(width, activation="relu") for _ in range(depth)]
        self.head = layers.Dense(classes)

    def call(self, inputs):
        h = self.stem(inputs)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def antirectifier_model():
    inp = keras.Input((6,))
    x = layers.Dense(8, name="d1")(inp)
    x = Antirectifier(name="anti")(x)
    return keras.Model(inp, layers.Dense(4, name="d2")(x))


def transformer_model():
    inp = keras.Input((5, 8))
    x = TransformerBlock(8, 2, 16, name="block")(inp)
    x = ops.mean(x, axis=1)
    return keras.Model(inp, layers.Dense(3, name="head")(x))


def data(shape, classes, n=21, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n,) + shape).astype(np.float32),
            rng.integers(0, classes, size=n).astype(np.int32))


def test_custom_layer_forward_equals_numpy():
    model = antirectifier_model()
    assert [v.path for v in model.weights] == ["d1/kernel", "d1/bias", "anti/kernel", "d2/kernel",
                                              "d2/bias"]
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    x = rng.normal(size=(7, 6)).astype(np.float32)
    k1, b1, anti, k2, b2 = [w.astype(np.float64) for w in weights]
    h = x @ k1 + b1
    h = h - h.mean(-1, keepdims=True)
    h = np.concatenate([np.maximum(h, 0), np.maximum(-h, 0)], -1) @ anti
    np.testing.assert_allclose(model.predict(x, verbose=0), h @ k2 + b2, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.get_weights()[2], weights[2])


def test_transformer_block_forward_equals_numpy():
    model = transformer_model()
    rng = np.random.default_rng(2)
    weights = [rng.normal(size=w.shape).astype(np.float32) * 0.3 for w in model.get_weights()]
    model.set_weights(weights)
    paths = [v.path.replace("/", ".") for v in model.weights]
    assert paths[0].startswith("block.") and paths[-1] == "head.bias"
    w = dict(zip(paths, [a.astype(np.float64) for a in weights]))
    x = rng.normal(size=(3, 5, 8)).astype(np.float32)
    got = model.predict(x, verbose=0)

    def dense(name, z):
        return z @ w[f"block.{name}.kernel"] + w[f"block.{name}.bias"]

    names = sorted({p.split(".")[1] for p in paths if p.startswith("block.dense")},
                   key=lambda n: paths.index(f"block.{n}.kernel"))
    norms = sorted({p.split(".")[1] for p in paths if "layer_normalization" in p},
                   key=lambda n: paths.index(f"block.{n}.gamma"))

    def norm(name, z):
        mu, var = z.mean(-1, keepdims=True), z.var(-1, keepdims=True)
        return (z - mu) / np.sqrt(var + 1e-3) * w[f"block.{name}.gamma"] + w[f"block.{name}.beta"]

    b, t, d, h = 3, 5, 8, 2
    q, k, v = np.split(dense(names[0], x), 3, -1)
    q, k, v = (z.reshape(b, t, h, d // h) for z in (q, k, v))
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // h)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    a = np.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, t, d)
    y = norm(norms[0], x + dense(names[1], a))
    f = dense(names[2], y)
    f = 0.5 * f * (1 + np.tanh(np.sqrt(2 / np.pi) * (f + 0.044715 * f ** 3)))  # gelu (tanh)
    y = norm(norms[1], y + dense(names[3], f))
    want = y.mean(1) @ w["head.kernel"] + w["head.bias"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_one_sgd_step_follows_the_finite_difference_gradient():
    model = antirectifier_model()
    model.compile(keras.optimizers.SGD(learning_rate=1.0), "mse")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(6, 6)).astype(np.float32)
    y = rng.normal(size=(6, 4)).astype(np.float32)
    start = model.get_weights()
    grads = []
    for k, w in enumerate(start):
        g = np.zeros(w.shape)
        for i in np.ndindex(w.shape):
            losses = []
            for sign in (1, -1):
                trial = [a.copy() for a in start]
                trial[k][i] += sign * 1e-3
                model.set_weights(trial)
                losses.append(model.evaluate(x, y, batch_size=6, verbose=0))
            g[i] = (losses[0] - losses[1]) / 2e-3
        grads.append(g)
    model.set_weights(start)
    model.train_on_batch(x, y)
    for w0, w1, g in zip(start, model.get_weights(), grads):
        np.testing.assert_allclose(w0 - w1, g, rtol=1e-2, atol=1e-3)
    assert np.abs(start[2] - model.get_weights()[2]).max() > 1e-4  # the custom weight moved


# Each model's own keys: a key that matches no variable is an error.
LAYOUT_KEYS = {
    "antirectifier": {"d1/kernel": (None, "model"), "anti/kernel": ("model", None)},
    "transformer": {"block/dense.*kernel": (None, "model"), "head/kernel": ("model", None)},
    "residual_mlp": {"residual_mlp.*kernel": (None, "model")},
}


def layout(mesh_shape, name):
    mesh = DeviceMesh(mesh_shape, ("data", "model"))
    layout_map = LayoutMap(mesh)
    for key, value in LAYOUT_KEYS[name].items():
        layout_map[key] = value
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


DISTRIBUTIONS = {
    "data=2": lambda name: DataParallel(devices=["cpu:0", "cpu:1"]),
    "model=2": lambda name: layout((1, 2), name),
    "data=2,model=2": lambda name: layout((2, 2), name),
}
MODELS = {
    "antirectifier": (antirectifier_model, (6,), 4),
    "transformer": (transformer_model, (5, 8), 3),
    "residual_mlp": (lambda: ResidualMLP(width=16, depth=2, classes=5), (7,), 5),
}


def train(model, x, y):
    # SGD: Adam turns the rounding noise of a gradient that is zero in exact
    # arithmetic (the key bias's, under a softmax) into full-size steps.
    model.compile(keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=5, epochs=3, shuffle=False, verbose=0)
    return history.history["loss"], model.predict(x, batch_size=5, verbose=0)


@pytest.mark.parametrize("mesh", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_sharded_training_equals_one_device(name, mesh):
    make, shape, classes = MODELS[name]
    x, y = data(shape, classes)
    single = make()
    single.build((None,) + shape)
    start = single.get_weights()
    set_distribution(DISTRIBUTIONS[mesh](name))
    try:
        sharded = make()
        sharded.build((None,) + shape)
        sharded.set_weights(start)
        loss2, pred2 = train(sharded, x, y)
    finally:
        set_distribution(None)
    loss1, pred1 = train(single, x, y)
    assert loss1[-1] < loss1[0]
    np.testing.assert_allclose(loss2, loss1, rtol=1e-5)
    np.testing.assert_allclose(pred2, pred1, rtol=1e-4, atol=1e-5)
    for a, b in zip(single.get_weights(), sharded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


class WideMixer(layers.Layer):
    """A custom layer with a large weight (a Dense-like product written in ops)."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 2048), name="w")
        self.v = self.add_weight(shape=(2048, input_shape[-1]), name="v")

    def call(self, x):
        return ops.matmul(ops.gelu(ops.matmul(x, self.w)), self.v)


def test_autoshard_splits_a_custom_layer_weight():
    inp = keras.Input((512,))
    out = layers.Dense(10, name="head")(WideMixer(name="mixer")(inp))
    model = keras.Model(inp, out)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    plan = autoshard.plan(model, DeviceMesh((1, 4), ("data", "model")), batch=8,
                          cluster="a100-80g")
    assert set(plan.layouts) >= {"mixer.w", "mixer.v"}
    assert "model" in plan.layouts["mixer.w"] + plan.layouts["mixer.v"], plan.layouts
    # And TensorParallel trains it as one device does.
    x, y = data((512,), 10, n=16)
    # Models of their own layers (models built on the same layers share
    # their weights, as in Keras).
    def make():
        i = keras.Input((512,))
        return keras.Model(i, layers.Dense(10, name="head")(WideMixer(name="mixer")(i)))

    single = make()
    single.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = single.get_weights()
    tp_model = make()
    tp_model.set_weights(start)
    tp = autoshard.TensorParallel(tp_model, world_size=4, batch_size=8, cluster="a100-80g")
    tp.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h2 = tp.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    h1 = single.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h2, h1, rtol=1e-5)


class Halved(layers.Layer):
    def call(self, x, training=None):
        return x * 0.5 if training else x


class Outer(layers.Layer):
    """Passes training positionally to a custom sublayer, and a stock one."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = Halved()
        self.drop = layers.Dropout(0.0)

    def call(self, x, training=None):
        return self.drop(self.inner(x, training), training)


def test_training_given_positionally_reaches_sublayers():
    inp = keras.Input((3,))
    dense = layers.Dense(3, kernel_initializer="ones", use_bias=False)
    model = keras.Model(inp, Outer()(dense(inp)))
    model.compile(keras.optimizers.SGD(learning_rate=0.01), "mse")
    x = np.ones((2, 3), np.float32)
    y = np.zeros((2, 3), np.float32)
    assert model.evaluate(x, y, verbose=0) == pytest.approx(9.0)
    assert model.train_on_batch(x, y) == pytest.approx(9.0 / 4)


class Scaled(layers.Layer):
    """training reaches call: doubles its input while training."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(), initializer="ones", name="w")

    def call(self, x, training=None):
        return x * self.w * (2.0 if training else 1.0)


def test_training_reaches_call():
    inp = keras.Input((3,))
    model = keras.Model(inp, Scaled()(inp))
    model.compile(keras.optimizers.SGD(learning_rate=0.01), "mse")
    x = np.ones((4, 3), np.float32)
    y = np.zeros((4, 3), np.float32)
    np.testing.assert_allclose(model.predict(x, verbose=0), x)
    assert model.evaluate(x, y, verbose=0) == pytest.approx(1.0)
    assert model.train_on_batch(x, y) == pytest.approx(4.0)


def test_weights_variables_and_config():
    layer = Antirectifier(name="anti2")
    inp = keras.Input((4,))
    model = keras.Model(inp, layer(inp))
    assert [v.path for v in model.weights] == ["anti2/kernel"]
    (kernel,) = layer.weights
    assert kernel.path == "anti2/kernel" and kernel.shape == (8, 4) and kernel.trainable
    assert layer.get_config() == {"name": "anti2", "trainable": True, "dtype": "float32",
                                  "initializer": "glorot_uniform"}
    fresh = Antirectifier(name="anti4")
    keras.Model(inp, fresh(inp))
    assert fresh.get_weights()[0].shape == (8, 4)
    np.testing.assert_array_equal(layer.get_weights()[0], model.get_weights()[0])
    layer.set_weights([np.ones((8, 4), np.float32)])
    np.testing.assert_array_equal(model.get_weights()[0], np.ones((8, 4)))
    clone = Antirectifier.from_config(layer.get_config() | {"name": "anti3"})
    assert clone.name == "anti3"
    assert Antirectifier().name.startswith("antirectifier")


def test_subclassed_model_fits_saves_and_loads_weights(tmp_path, capsys):
    x, y = data((7,), 5, n=40)
    model = ResidualMLP(name="res")
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert [l.name for l in model.layers][0].startswith("dense")
    assert len(model.layers) == 4
    assert model.weights[0].path.startswith("res/dense")
    loss, acc = model.evaluate(x, y, verbose=0)
    path = str(tmp_path / "res.weights.h5")
    model.save_weights(path)
    other = ResidualMLP(name="res")
    other.build((None, 7))
    other.load_weights(path)
    np.testing.assert_array_equal(other.predict(x, verbose=0), model.predict(x, verbose=0))
    model.summary()
    assert "res.dense" in capsys.readouterr().out
    np.testing.assert_array_equal(model(x[:3]), model.predict(x[:3], verbose=0))


def test_train_step_override_is_refused():
    class Custom(keras.Model):
        def call(self, x):
            return x

        def train_step(self, data):
            return {}

    with pytest.raises(ValueError, match="overrides train_step.*compile"):
        Custom()


def test_custom_layer_saves_its_class_and_the_cli_refuses_it(tmp_path):
    """model.save writes the custom class with its config and the weights;
    load_weights reads them back; the command line, which never runs code
    from a file, refuses the file in one line naming the class."""
    model = antirectifier_model()
    model.compile("adam", "mse")
    path = str(tmp_path / "anti.keras")
    model.save(path)
    with zipfile.ZipFile(path) as z:
        config = json.loads(z.read("config.json"))
        assert "model.weights.h5" in z.namelist()
    entry = next(l for l in config["config"]["layers"] if l["config"]["name"] == "anti")
    assert entry["class_name"] == "Antirectifier"
    assert entry["registered_name"] == "Antirectifier"
    assert entry["config"]["initializer"] == "glorot_uniform"
    other = antirectifier_model()
    other.load_weights(path)
    for a, b in zip(model.get_weights(), other.get_weights()):
        np.testing.assert_array_equal(a, b)
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((2, 6), np.float32))
    out = subprocess.run([CLI, "predict", "--model", path, "--x", str(x), "--out",
                          str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "Antirectifier" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_errors_name_the_problem():
    class ReturnsTwo(layers.Layer):
        def call(self, x):
            return x, x

    inp = keras.Input((3,))
    model = keras.Model(inp, ReturnsTwo(name="two")(inp))
    with pytest.raises(ValueError, match="layer 'two': call returned a tuple"):
        model.predict(np.zeros((1, 3), np.float32), verbose=0)

    class Branches(layers.Layer):
        def call(self, x):
            return x if x > 0 else -x

    model = keras.Model(inp, Branches()(inp))
    with pytest.raises(TypeError, match="ops.where"):
        model.predict(np.zeros((1, 3), np.float32), verbose=0)


def huber_like(y_true, y_pred):
    error = y_pred - y_true
    return ops.mean(ops.where(ops.abs(error) < 0.5, 0.5 * error ** 2,
                              0.5 * (ops.abs(error) - 0.25)), axis=-1)


class WeightedSquares(keras.losses.Loss):
    def __init__(self, weight=2.0, name="weighted_squares", **kwargs):
        super().__init__(name=name, **kwargs)
        self.weight = weight

    def call(self, y_true, y_pred):
        return self.weight * ops.square(y_pred - y_true)


@pytest.mark.parametrize("loss", [huber_like, WeightedSquares()])
def test_custom_loss_equals_numpy_and_trains_sharded_as_one_device(loss):
    x, _ = data((6,), 4, n=20)
    y = np.random.default_rng(9).normal(size=(20, 4)).astype(np.float32)
    model = antirectifier_model()
    model.compile(keras.optimizers.SGD(learning_rate=0.05), loss)
    pred = model.predict(x, verbose=0).astype(np.float64)
    e = pred - y
    want = (np.where(np.abs(e) < 0.5, 0.5 * e ** 2, 0.5 * (np.abs(e) - 0.25)).mean()
            if loss is huber_like else (2.0 * e ** 2).mean())
    assert model.evaluate(x, y, batch_size=20, verbose=0) == pytest.approx(want, rel=1e-5)
    start = model.get_weights()
    h1 = model.fit(x, y, batch_size=5, epochs=3, shuffle=False, verbose=0).history["loss"]
    assert h1[-1] < h1[0]
    set_distribution(layout((2, 2), "antirectifier"))
    try:
        sharded = antirectifier_model()
        sharded.set_weights(start)
        sharded.compile(keras.optimizers.SGD(learning_rate=0.05), loss)
        h2 = sharded.fit(x, y, batch_size=5, epochs=3, shuffle=False, verbose=0)
    finally:
        set_distribution(None)
    np.testing.assert_allclose(h2.history["loss"], h1, rtol=1e-5)


def test_integer_targets_reach_a_custom_loss_as_floats():
    x, y = data((6,), 4, n=8)
    model = antirectifier_model()
    model.compile("sgd", lambda t, p: ops.mean(ops.square(p - t[:, None]), axis=-1))
    pred = model.predict(x, verbose=0)
    assert model.evaluate(x, y, verbose=0) == pytest.approx(
        ((pred - y[:, None].astype(np.float64)) ** 2).mean(), rel=1e-5)


def mean_abs_error(y_true, y_pred):
    return ops.mean(ops.abs(y_pred - y_true), axis=-1)


def test_a_metric_function_is_logged_as_its_mean_over_the_epoch():
    x, _ = data((6,), 4, n=10)
    y = np.random.default_rng(3).normal(size=(10, 4)).astype(np.float32)
    model = antirectifier_model()
    model.compile(keras.optimizers.SGD(learning_rate=0.01), "mse", metrics=[mean_abs_error])
    pred = model.predict(x, verbose=0)
    logs = model.evaluate(x, y, batch_size=3, verbose=0, return_dict=True)
    assert logs["mean_abs_error"] == pytest.approx(np.abs(pred - y).mean(), rel=1e-5)
    history = model.fit(x, y, batch_size=5, epochs=2, verbose=0)
    assert len(history.history["mean_abs_error"]) == 2
