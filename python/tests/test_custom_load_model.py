"""load_model of a .keras file holding custom layers or a subclassed model
(saved by autoshard): rebuilt from custom_objects or the registry with the
trained weights, predictions equal; the command line still refuses such a
file by its class and runs no code from it."""

import os
import subprocess

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras import layers, ops

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("AUTOSHARD_CLI", os.path.join(REPO, "build", "autoshard"))
RNG = np.random.default_rng(2)
X = RNG.normal(size=(24, 6)).astype(np.float32)
Y = RNG.normal(size=(24, 3)).astype(np.float32)


class Scale(layers.Layer):
    """A weight per feature, and a sublayer."""

    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.proj = layers.Dense(units, name="proj")

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(input_shape[-1],), initializer="random_normal",
                                    name="gain")

    def call(self, x):
        return self.proj(ops.tanh(x * self.gain))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


class Residual(keras.Model):
    def __init__(self, width=6, **kwargs):
        super().__init__(**kwargs)
        self.width = width
        self.inner = layers.Dense(width, activation="relu", name="inner")
        self.out = layers.Dense(3, name="out")

    def call(self, x):
        return self.out(x + self.inner(x))

    def get_config(self):
        return {"width": self.width}


def trained(model):
    model.compile(keras.optimizers.Adam(0.01), "mse")
    model.fit(X, Y, batch_size=8, epochs=3, verbose=0)
    return model


def functional():
    x = keras.Input((6,))
    h = layers.Dense(6, name="pre")(x)
    return keras.Model(x, Scale(name="scale")(h))


@pytest.mark.parametrize("build", [
    functional,
    lambda: keras.Sequential([keras.Input((6,)), Scale(name="scale")]),
    lambda: Residual(name="residual"),
], ids=["functional", "sequential", "subclassed"])
def test_load_model_with_custom_objects_keeps_the_trained_weights(tmp_path, build):
    model = trained(build())
    path = str(tmp_path / "custom.keras")
    model.save(path)
    loaded = keras.models.load_model(path, custom_objects={"Scale": Scale,
                                                           "Residual": Residual})
    assert type(loaded) is type(model)
    want = model.predict(X, verbose=0)
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), want)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]
    # Compiled from the file's compile config: it trains on.
    assert loaded.optimizer is not None
    loaded.fit(X, Y, batch_size=8, epochs=1, verbose=0)


def test_load_model_of_a_registered_class_needs_no_custom_objects(tmp_path):
    @keras.saving.register_keras_serializable(package="load_test")
    class Registered(Scale):
        pass

    x = keras.Input((6,))
    model = trained(keras.Model(x, Registered(name="reg")(x)))
    path = str(tmp_path / "registered.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.get_layer("reg")) is Registered
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), model.predict(X, verbose=0))


def test_load_model_without_the_class_names_it(tmp_path):
    model = trained(keras.Sequential([keras.Input((6,)), Scale(name="scale")]))
    path = str(tmp_path / "unknown.keras")
    model.save(path)
    with pytest.raises(ValueError, match="Scale"):
        keras.models.load_model(path)


@pytest.mark.skipif(not os.path.exists(CLI), reason="the autoshard command line is not built")
def test_the_command_line_still_refuses_the_file(tmp_path):
    model = trained(Residual(name="residual"))
    path = str(tmp_path / "sub.keras")
    model.save(path)
    x = str(tmp_path / "x.npy")
    np.save(x, X[:2])
    out = subprocess.run([CLI, "predict", "--model", path, "--x", x, "--out",
                          str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "Residual" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
