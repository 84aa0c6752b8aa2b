"""Real Keras files, saved by other people's Keras (../shared/keras-files),
loaded as a Keras user loads them: compiled from the file, their layers
walked through ``model.layers``, a base frozen layer by layer for
fine-tuning."""

import json
import pathlib
import zipfile

import numpy as np
import pytest

from autoshard import _native, keras

SHARED = pathlib.Path(__file__).resolve().parents[3] / "shared" / "keras-files"
FILES = ["fashion_cnn.keras", "gru_forecast.keras", "bi_lstm.keras", "cnn_lstm_forecast.keras",
         "next_word_lstm.h5", "lenet5.h5"]

pytestmark = pytest.mark.skipif(not SHARED.exists(), reason=f"no {SHARED}")


def _keras3_layer_names(path):
    """The layer names Keras 3's model.layers lists, from the file itself
    (config.json), written independently of the reader: a Sequential's
    layers without its InputLayer."""
    config = json.loads(zipfile.ZipFile(path).read("config.json"))
    names = [e["config"]["name"] for e in config["config"]["layers"]]
    if config["class_name"] == "Sequential":
        names = [n for n, e in zip(names, config["config"]["layers"])
                 if e["class_name"] != "InputLayer"]
    return names


def _batch(model, path, n, rng):
    (given,) = _native.KerasFile.read(str(path), False).inputs
    shape = [n] + [d if d > 0 else 5 for d in given["shape"]]
    x = rng.standard_normal(shape).astype(np.float32)
    if given["dtype"] != "f32":
        x = rng.integers(0, 20, size=shape).astype(np.int32)
    out = model.predict(x, verbose=0)
    y = rng.standard_normal(out.shape).astype(np.float32)
    if out.ndim == 2 and out.shape[1] > 1:  # a softmax over classes
        y = np.eye(out.shape[1], dtype=np.float32)[rng.integers(0, out.shape[1], n)]
    return x, y


@pytest.mark.parametrize("name", [f for f in FILES if f.endswith(".keras")])
def test_model_layers_are_the_files_layers(name):
    model = keras.models.load_model(SHARED / name)
    assert [layer.name for layer in model.layers] == _keras3_layer_names(SHARED / name)
    # Stock classes: isinstance holds, and each layer's weights are the model's.
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert dense
    config = json.loads(zipfile.ZipFile(SHARED / name).read("config.json"))
    units = {e["config"]["name"]: e["config"].get("units") for e in config["config"]["layers"]}
    kernel = dense[-1].get_weights()[0]
    assert kernel.shape[1] == units[dense[-1].name]
    np.testing.assert_array_equal(kernel, model.get_layer(dense[-1].name).weights[0].numpy())
    with pytest.raises(ValueError, match="read from a file"):
        dense[-1](keras.Input((kernel.shape[0],)))


def test_a_loaded_base_nests_through_the_way_its_refusal_names():
    """Calling a loaded model on new inputs is refused, naming the way:
    model_from_json(base.to_json()) with base's weights, which predicts as
    base and nests under a new head (the transfer-learning recipe)."""
    base = keras.models.load_model(SHARED / "fashion_cnn.keras")
    inputs = keras.Input((28, 28, 1))
    with pytest.raises(ValueError, match="model_from_json"):
        base(inputs)
    py = keras.models.model_from_json(base.to_json())
    py.set_weights(base.get_weights())
    x = np.random.default_rng(4).random((4, 28, 28, 1)).astype(np.float32)
    np.testing.assert_allclose(py.predict(x, verbose=0), base.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-6)
    py.trainable = False
    model = keras.Model(inputs, keras.layers.Dense(3, name="head")(py(inputs)))
    model.compile(optimizer="adam", loss="mse")
    frozen = py.get_weights()
    model.fit(x, np.zeros((4, 3), np.float32), epochs=1, verbose=0)
    for a, b in zip(frozen, py.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_compile_config_without_an_optimizer_compiles_with_rmsprop():
    # Keras 3.8 saved this one's compile config without "optimizer"; Keras's
    # compile_from_config calls compile(**config), so compile's default
    # optimizer, RMSprop, is what Keras trains it with.
    # RMSprop's first step from zero state moves a weight by about
    # lr * g / sqrt((1 - rho) g^2) = lr / sqrt(0.1) where |g| >> sqrt(eps)
    # (Adam's first step: lr; SGD's: lr * g).
    path = SHARED / "cnn_lstm_forecast.keras"
    model = keras.models.load_model(path)
    assert model.optimizer.learning_rate == pytest.approx(1e-3)
    x, y = _batch(model, path, 8, np.random.default_rng(0))
    before = model.get_weights()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    step = max(float(np.max(np.abs(a - b))) for a, b in zip(before, model.get_weights()))
    assert step == pytest.approx(1e-3 / np.sqrt(0.1), rel=0.02)


@pytest.mark.parametrize("name", FILES)
def test_freezing_a_loaded_base_layer_by_layer(name):
    """The fine-tuning recipe on a loaded model: every layer but the last
    frozen through model.layers, recompiled, trained one step: only the
    last layer's weights change, and trainable_weights are the last layer's."""
    model = keras.models.load_model(SHARED / name, compile=False)
    layers = [layer for layer in model.layers if layer.weights]
    for layer in layers[:-1]:
        layer.trainable = False
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, y = _batch(model, SHARED / name, 4, np.random.default_rng(1))
    frozen = {v.path: v.numpy() for layer in layers[:-1] for v in layer.weights}
    last = {v.path: v.numpy() for v in layers[-1].weights}
    assert {v.path for v in model.trainable_weights} == set(last)
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    for layer in layers[:-1]:
        for v in layer.weights:
            np.testing.assert_array_equal(v.numpy(), frozen[v.path])
    assert any(not np.array_equal(v.numpy(), last[v.path]) for v in layers[-1].weights)
    # Set trainable again (and recompiled), a layer trains again.
    layers[0].trainable = True
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    first = [v.numpy() for v in layers[0].weights]
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert any(not np.array_equal(v.numpy(), f) for v, f in zip(layers[0].weights, first))


@pytest.mark.parametrize("name", [f for f in FILES if f.endswith(".keras")])
def test_model_from_json_of_a_real_files_config(name):
    """The file's config rebuilt in Python (model_from_json, as load_model
    with custom_objects and clone_model do): every field newer Keras writes
    (GRU's unroll and initializers, Dense's quantization_config, the
    initializers' input_axes) is taken; with the file's weights set, it
    predicts what the loaded model predicts."""
    config = zipfile.ZipFile(SHARED / name).read("config.json").decode()
    rebuilt = keras.models.model_from_json(config)
    loaded = keras.models.load_model(SHARED / name, compile=False)
    assert [layer.name for layer in rebuilt.layers] == [layer.name for layer in loaded.layers]
    rebuilt.set_weights(loaded.get_weights())
    x, _ = _batch(loaded, SHARED / name, 3, np.random.default_rng(2))
    np.testing.assert_allclose(rebuilt.predict(x, verbose=0), loaded.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-6)


def test_keras_fields_a_class_does_not_read_go_to_the_layer_table():
    lstm = keras.layers.LSTM(3, kernel_initializer="zeros", recurrent_initializer="zeros",
                             unroll=True, unit_forget_bias=False, implementation=2)
    model = keras.Sequential([keras.Input((4, 2)), lstm])
    assert all(not np.any(w) for w in lstm.get_weights())  # no forget-gate bias of 1
    with_forget = keras.layers.LSTM(3)
    keras.Sequential([keras.Input((4, 2)), with_forget])
    np.testing.assert_array_equal(with_forget.get_weights()[2][3:6], np.ones(3))
    assert model.predict(np.ones((1, 4, 2), np.float32), verbose=0).shape == (1, 3)
    keras.layers.Dense(2, quantization_config=None)  # Keras 3.13's field, at its default
    with pytest.raises(ValueError, match="time_major"):
        keras.layers.GRU(3, time_major=True)
    with pytest.raises(ValueError, match="'bogus'"):
        keras.layers.Dense(2, bogus=1)
    with pytest.raises(ValueError, match="input_axes"):
        keras.initializers.GlorotUniform(input_axes=[0])


def test_an_initializer_the_table_does_not_draw_with_must_be_kerass_default():
    keras.layers.BatchNormalization(gamma_initializer="ones", beta_initializer="zeros")
    with pytest.raises(ValueError, match="gamma_initializer"):
        keras.layers.BatchNormalization(gamma_initializer="zeros")
