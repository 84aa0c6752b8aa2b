"""model.save / keras.models.load_model / save_weights over the C++ Keras files."""

import os
import subprocess
import zipfile

import numpy as np
import pytest

import autoshard.keras as keras

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "keras_files")


def _cli():
    ref = os.environ.get("AUTOSHARD_PY_REFERENCE", "")
    cli = os.path.join(os.path.dirname(os.path.dirname(ref)), "autoshard") if ref else ""
    return cli if cli and os.access(cli, os.X_OK) else None


def _classifier():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([
        keras.Input((6,)),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.Dropout(0.1),
        keras.layers.Dense(3),
    ])
    model.compile(keras.optimizers.Adam(0.02),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")


def _same_weights(a, b):
    wa, wb = a.get_weights(), b.get_weights()
    return len(wa) == len(wb) and all(np.array_equal(u, v) for u, v in zip(wa, wb))


def test_sequential_round_trip(tmp_path):
    x, y = _data()
    model = _classifier()
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    assert zipfile.is_zipfile(path)
    loaded = keras.models.load_model(path)
    assert np.array_equal(loaded.predict(x), model.predict(x))
    assert _same_weights(loaded, model)
    # The compile config came with it: the same loss and accuracy.
    assert loaded.evaluate(x, y, return_dict=True) == model.evaluate(x, y, return_dict=True)
    assert loaded.optimizer.learning_rate == pytest.approx(0.02)
    # keras.saving.load_model is the same function.
    again = keras.saving.load_model(str(path))
    assert np.array_equal(again.predict(x), model.predict(x))


def test_functional_round_trip(tmp_path):
    keras.utils.set_random_seed(5)
    image = keras.Input((6, 6, 2), name="image")
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(image)
    h = keras.layers.MaxPooling2D()(h)
    flat = keras.layers.Flatten()(h)
    shared = keras.layers.Dense(5, activation="tanh", name="trunk")
    t = shared(flat)
    classes = keras.layers.Dense(3, name="classes")(t)
    value = keras.layers.Dense(1, name="value")(keras.layers.Concatenate()([t, classes]))
    model = keras.Model(image, [classes, value])
    model.compile("sgd", ["mse", "mae"], loss_weights=[1.0, 0.5])
    x = np.random.default_rng(1).normal(size=(8, 6, 6, 2)).astype("float32")
    model.save(tmp_path / "f.keras")
    loaded = keras.models.load_model(tmp_path / "f.keras")
    for a, b in zip(loaded.predict(x), model.predict(x)):
        assert np.array_equal(a, b)
    assert _same_weights(loaded, model)
    assert loaded.output_names == model.output_names


def test_sequence_model_round_trip(tmp_path):
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(9, 4),
                              keras.layers.LSTM(6, return_sequences=True),
                              keras.layers.GRU(3), keras.layers.Dense(2)])
    ids = np.random.default_rng(0).integers(0, 9, size=(4, 5)).astype("int32")
    model.save(tmp_path / "s.keras")  # uncompiled: no compile config
    loaded = keras.models.load_model(tmp_path / "s.keras")
    assert np.array_equal(loaded.predict(ids), model.predict(ids))
    with pytest.raises(ValueError):
        loaded.fit(ids, np.zeros((4, 2), "float32"), verbose=0)  # not compiled


@pytest.mark.parametrize("where", ["m.h5", "web"])
def test_python_model_as_h5_and_tfjs(tmp_path, where):
    x, y = _data()
    model = _classifier()
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    if where == "web":
        with pytest.raises(ValueError, match="no TensorFlow.js form"):
            model.save(tmp_path / where, save_format="tfjs")  # from_logits: TF.js has none
        assert not (tmp_path / where).exists()
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.save(tmp_path / where, **({"save_format": "tfjs"} if where == "web" else {}))
    loaded = keras.models.load_model(tmp_path / where)
    assert _same_weights(loaded, model)
    assert np.array_equal(loaded.predict(x), model.predict(x))
    assert loaded.evaluate(x, y, verbose=0, return_dict=True) == pytest.approx(
        model.evaluate(x, y, verbose=0, return_dict=True), rel=1e-6)
    keras.utils.set_random_seed(4)
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    t = keras.layers.Dense(3, name="t")(keras.layers.Concatenate()([a, b]))
    functional = keras.Model([a, b], [t, keras.layers.Add()([t, keras.layers.Dense(3)(a)])])
    functional.save(tmp_path / ("f.h5" if where == "m.h5" else "fweb"),
                    **({"save_format": "tfjs"} if where == "web" else {}))
    again = keras.models.load_model(tmp_path / ("f.h5" if where == "m.h5" else "fweb"))
    xs = [x[:, :4], x[:, 2:]]
    for got, want in zip(again.predict(xs), functional.predict(xs)):
        assert np.array_equal(got, want)


def test_sharded_model_round_trip(tmp_path):
    x, y = _data()
    mesh = keras.distribution.DeviceMesh((2, 2), ("data", "model"))
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[r"dense.*kernel"] = (None, "model")
    with keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="data").scope():
        model = _classifier()
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    model.save(tmp_path / "sharded.keras")  # the weights gathered from the mesh
    single = keras.models.load_model(tmp_path / "sharded.keras")
    assert _same_weights(single, model)
    assert np.allclose(single.predict(x), model.predict(x), rtol=1e-5, atol=1e-6)
    with keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="data").scope():
        again = keras.models.load_model(tmp_path / "sharded.keras")
    assert np.array_equal(again.predict(x), model.predict(x))


def test_load_without_compile(tmp_path):
    model = _classifier()
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras", compile=False)
    with pytest.raises(ValueError, match="compile"):
        loaded.evaluate(*_data())
    loaded.compile("sgd", "sparse_categorical_crossentropy")
    loaded.save(tmp_path / "recompiled.keras")  # the new compile config is written
    again = keras.models.load_model(tmp_path / "recompiled.keras")
    assert type(again.optimizer).__name__ == "Optimizer"
    assert again.optimizer.learning_rate == pytest.approx(0.01)  # SGD's default


def test_unwritable_layer_and_lazy_sequential(tmp_path):
    tokens = keras.Input((4, 8))
    op_layer = keras.Model(tokens, keras.ops.sum(tokens, axis=1))  # keras.ops on a model's tensor
    with pytest.raises(ValueError, match="cannot be saved as a Keras config"):
        op_layer.save(tmp_path / "ops.keras")
    assert not os.listdir(tmp_path)
    lazy = keras.Sequential([keras.layers.Dense(3)])  # built by its first batch
    lazy.compile("sgd", "mse")
    lazy.fit(np.zeros((4, 5), "float32"), np.zeros((4, 3), "float32"), verbose=0)
    lazy.save(tmp_path / "lazy.keras")
    x = np.ones((2, 5), "float32")
    assert np.array_equal(keras.models.load_model(tmp_path / "lazy.keras").predict(x),
                          lazy.predict(x))


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_multi_head_attention_round_trips(tmp_path, suffix):
    # Built by the Keras layer table (src/io/keras/layers/attention.cc), whose
    # roles write Keras 3.3+'s query_dense/vars/0 ... and Keras 2's query/kernel.
    tokens = keras.Input((4, 8))
    model = keras.Model(tokens, keras.layers.MultiHeadAttention(2, 4, value_dim=3)(tokens))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    model.predict(x, verbose=0)  # builds the weights, then moved off their initial draws
    model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
    model.save(tmp_path / f"mha{suffix}")
    loaded = keras.models.load_model(tmp_path / f"mha{suffix}")
    assert [w.shape for w in loaded.get_weights()] == [w.shape for w in model.get_weights()]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


L = keras.layers
EVERY_LAYER = {  # per-example input shape (None: int32 ids) and the layers after it
    "Dense": ((6,), lambda: [L.Dense(4, activation="tanh", use_bias=False)]),
    "Conv1D": ((8, 3), lambda: [L.Conv1D(4, 3, strides=2, padding="same", activation="relu")]),
    "Conv2D": ((6, 6, 2), lambda: [L.Conv2D(4, (3, 2), padding="valid")]),
    "Conv2D groups": ((6, 6, 4), lambda: [L.Conv2D(4, 3, groups=2)]),
    "DepthwiseConv2D": ((6, 6, 2), lambda: [L.DepthwiseConv2D(3, depth_multiplier=2)]),
    "SeparableConv2D": ((6, 6, 2), lambda: [L.SeparableConv2D(4, 3, padding="same")]),
    "Conv2DTranspose": ((4, 4, 2), lambda: [L.Conv2DTranspose(3, 3, strides=2, padding="same")]),
    "pooling": ((6, 6, 2), lambda: [L.MaxPooling2D((2, 2), strides=1),
                                    L.AveragePooling2D(padding="same"),
                                    L.GlobalMaxPooling2D(keepdims=True)]),
    "pooling 1D": ((8, 3), lambda: [L.MaxPooling1D(2), L.AveragePooling1D(2),
                                    L.GlobalAveragePooling1D()]),
    "reshaping": ((12,), lambda: [L.Reshape((3, 4)), L.Permute((2, 1)), L.Flatten(),
                                  L.RepeatVector(2), L.Flatten()]),
    "elementwise": ((4,), lambda: [L.Rescaling(0.5, offset=1.0), L.Dropout(0.3),
                                   L.Activation("gelu"), L.ReLU(), L.Softmax()]),
    "normalization": ((4, 4), lambda: [L.LayerNormalization(epsilon=1e-5),
                                       L.LayerNormalization(rms_scaling=True),
                                       L.BatchNormalization(momentum=0.9),
                                       L.GroupNormalization(groups=2)]),
    "recurrent": ((5, 3), lambda: [L.LSTM(4, return_sequences=True),
                                   L.SimpleRNN(4, go_backwards=True, return_sequences=True),
                                   L.GRU(4)]),
    "Embedding": (None, lambda: [L.Embedding(10, 3)]),
}


@pytest.mark.parametrize("ext", [".keras", ".h5"])
@pytest.mark.parametrize("name", sorted(EVERY_LAYER))
def test_every_writable_layer_round_trips(tmp_path, name, ext):
    shape, make = EVERY_LAYER[name]
    rng = np.random.default_rng(0)
    if shape is None:
        first, x = keras.Input((5,), dtype="int32"), rng.integers(0, 10, (3, 5)).astype("int32")
    else:
        first, x = keras.Input(shape), rng.normal(size=(3,) + shape).astype("float32")
    model = keras.Sequential([first] + make())
    # Not the initial values (zeros, ones): every weight must land in its place.
    model.set_weights([w + rng.normal(scale=0.1, size=w.shape).astype("float32")
                       for w in model.get_weights()])
    model.save(tmp_path / ("m" + ext))
    loaded = keras.models.load_model(tmp_path / ("m" + ext))
    assert _same_weights(loaded, model)
    assert np.array_equal(loaded.predict(x), model.predict(x))


def test_a_layers_config_is_the_one_the_layer_table_built_it_from():
    """model.save writes the Keras 3 config the layer was built from (one
    mapping of arguments, layers._from_table), with what the model applies
    itself (trainable, seed, regularizers and constraints)."""
    from autoshard.keras._model_files import layer_config

    conv = layer_config(L.Conv2D(4, 3, name="c"))["config"]
    assert conv["kernel_size"] == [3, 3] and conv["strides"] == [1, 1]  # as Keras's get_config
    assert conv["kernel_initializer"]["class_name"] == "GlorotUniform"
    # Keras's DepthwiseConv2D and SeparableConv2D have no kernel_initializer
    # (keras/src/layers/convolutional/depthwise_conv2d.py: depthwise_initializer).
    for layer in (L.DepthwiseConv2D(3), L.SeparableConv2D(4, 3)):
        assert "kernel_initializer" not in layer_config(layer)["config"]
    with pytest.raises(ValueError, match="depthwise_initializer is"):
        L.DepthwiseConv2D(3, kernel_initializer="zeros")
    gru = layer_config(L.GRU(3, seed=4))["config"]  # reset_after: Keras 2 and TF.js read it so
    assert gru["reset_after"] is True and gru["stateful"] is False and gru["seed"] == 4
    dense = layer_config(L.Dense(2, kernel_regularizer=keras.regularizers.L2(0.5),
                                 trainable=False))["config"]
    assert dense["kernel_regularizer"]["config"]["l2"] == 0.5 and dense["trainable"] is False
    assert "reset_after" not in layer_config(L.LSTM(3))["config"]


def test_merge_layers_round_trip(tmp_path):
    a, b = keras.Input((4,)), keras.Input((4,))
    outs = [getattr(L, k)()([a, b]) for k in ("Add", "Subtract", "Multiply", "Average",
                                               "Maximum", "Minimum")]
    model = keras.Model([a, b], outs + [L.Concatenate(axis=-1)([a, b])])
    model.save(tmp_path / "merge.keras")
    loaded = keras.models.load_model(tmp_path / "merge.keras")
    xa = np.random.default_rng(0).normal(size=(2, 4)).astype("float32")
    for got, want in zip(loaded.predict([xa, xa[::-1].copy()]), model.predict([xa, xa[::-1].copy()])):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_training_resumes_from_the_saved_optimizer_state(tmp_path, optimizer):
    x, y = _data(32)
    make = {"adam": lambda: keras.optimizers.Adam(0.01),
            "sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9)}[optimizer]
    def model():  # no Dropout: its masks are drawn per model
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                                 keras.layers.BatchNormalization(), keras.layers.Dense(3)])

    first = model()
    first.compile(make(), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = first.get_weights()
    first.fit(x, y, epochs=2, batch_size=8, shuffle=False, verbose=0)
    first.save(tmp_path / "half.keras")  # with the moments and the step count
    resumed = keras.models.load_model(tmp_path / "half.keras")
    resumed.fit(x, y, epochs=1, batch_size=8, shuffle=False, verbose=0)
    straight = model()
    straight.compile(make(), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    straight.set_weights(start)
    straight.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0)
    for a, b in zip(resumed.get_weights(), straight.get_weights()):
        if optimizer == "adam":
            assert np.array_equal(a, b)
        else:  # Keras's SGD keeps its momentum scaled by -lr: a rounding apart
            assert np.allclose(a, b, rtol=0, atol=1e-6)


def test_overwrite(tmp_path):
    model = _classifier()
    path = tmp_path / "m.keras"
    model.save(path)
    x, y = _data()
    model.fit(x, y, epochs=1, verbose=0)
    model.save(path)  # overwrite=True, Keras's default, replaces it
    assert np.array_equal(keras.models.load_model(path).predict(x), model.predict(x))
    with pytest.raises(FileExistsError):
        model.save(path, overwrite=False)
    assert sorted(os.listdir(tmp_path)) == ["m.keras"]  # nothing left aside


def test_weights_only(tmp_path):
    x, _ = _data()
    model = _classifier()
    path = tmp_path / "w.weights.h5"
    model.save_weights(path)
    other = _classifier()  # another seed's draws would differ; make them differ anyway
    other.set_weights([w + 1 for w in other.get_weights()])
    other.load_weights(path)
    assert _same_weights(other, model)
    assert np.array_equal(other.predict(x), model.predict(x))
    with pytest.raises(ValueError, match="weights.h5"):
        model.save_weights(tmp_path / "w.h5")
    small = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError):
        small.load_weights(path)


@pytest.mark.parametrize("name", ["batch_normalization_dense", "two_outputs", "resnet_cnn",
                                  "lstm_language_model"])
@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_fixture_predicts_as_the_cli(tmp_path, name, ext):
    path = os.path.join(DATA, name + ext)
    model = keras.models.load_model(path)
    rng = np.random.default_rng(7)
    shape = {"batch_normalization_dense": (7,), "two_outputs": (5,), "resnet_cnn": (11, 11, 3),
             "lstm_language_model": (6,)}[name]
    if name == "lstm_language_model":
        x = rng.integers(0, 11, size=(5,) + shape).astype("int32")
    else:
        x = rng.normal(size=(5,) + shape).astype("float32")
    ours = model.predict(x)
    cli = _cli()
    if cli is None:
        pytest.skip("the CLI (build/autoshard) is not built")
    np.save(tmp_path / "x.npy", x)
    multi = isinstance(ours, list)
    out = tmp_path / ("p.npz" if multi else "p.npy")
    subprocess.run([cli, "predict", "--model", path, "--x", str(tmp_path / "x.npy"), "--out",
                    str(out)], check=True, capture_output=True, timeout=60)
    if multi:
        theirs = np.load(out)
        for got, key in zip(ours, model.output_names):
            assert np.array_equal(got, theirs[key])
    else:
        assert np.array_equal(ours, np.load(out))


def test_fixture_trains_with_its_compile_config():
    model = keras.models.load_model(os.path.join(DATA, "batch_normalization_dense.keras"))
    assert model.optimizer is not None
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 7)).astype("float32")
    y = np.stack([x[:, 0], x[:, 1] - x[:, 2], 0.5 * x[:, 3]], axis=1)  # mse, as compiled
    history = model.fit(x, y, epochs=6, batch_size=16, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0]
    assert {"mae", "mean_absolute_error"} & set(history.history)  # the file's metrics


def test_h5_and_tfjs_written_back(tmp_path):
    path = os.path.join(DATA, "two_outputs.h5")
    model = keras.models.load_model(path)
    x = np.random.default_rng(3).normal(size=(4, 5)).astype("float32")
    want = model.predict(x)
    model.save(tmp_path / "again.h5")
    model.save(tmp_path / "web", save_format="tfjs")
    assert os.path.isfile(tmp_path / "web" / "model.json")
    for saved in (tmp_path / "again.h5", tmp_path / "web", tmp_path / "web" / "model.json"):
        got = keras.models.load_model(saved).predict(x)
        for a, b in zip(got, want):
            assert np.array_equal(a, b)


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        keras.models.load_model(tmp_path / "missing.keras")
    with pytest.raises(OSError):
        keras.models.load_model(tmp_path)  # a directory without model.json
    (tmp_path / "text.keras").write_text("not a zip")
    with pytest.raises(ValueError):
        keras.models.load_model(tmp_path / "text.keras")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a Keras model file"):
        keras.models.load_model(tmp_path / "notes.txt")
    model = _classifier()
    with pytest.raises(ValueError, match="extension"):
        model.save(tmp_path / "model.pkl")
    with pytest.raises(OSError):
        model.save(tmp_path / "no" / "such" / "dir" / "m.keras")

