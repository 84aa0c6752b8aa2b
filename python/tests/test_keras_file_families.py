"""Files as users' Keras 2 and TensorFlow.js wrote them (issue 57, "real
files"): Keras 2's hard_sigmoid chosen by the file's Keras version, a ReLU
whose max_value is null, the .keras files Keras 2.15 saved on Windows
(backslashes in the weights' group names), masks (Embedding mask_zero
and Masking before recurrent layers, on padded batches) and ConvLSTM2D. The references are TF.js's
predictions and SGD losses (tools/keras_fixtures/file_families.mjs); the
.h5 and Windows .keras forms hold the same weights
(tools/keras_files/make_family_files.py)."""

import json
import os
import shutil
import zipfile

import numpy as np
import pytest

import autoshard.keras as keras

DIR = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "keras_files",
                   "families")

# (the file, the TF.js model whose reference it shares)
FILES = [
    ("hard_sigmoid_dense/model.json", "hard_sigmoid_dense"),
    ("hard_sigmoid_dense.h5", "hard_sigmoid_dense"),
    ("recurrent_keras2_gates/model.json", "recurrent_keras2_gates"),
    ("recurrent_keras2_gates.h5", "recurrent_keras2_gates"),
    ("relu_max_value_null/model.json", "relu_max_value_null"),
    ("relu_max_value_null.h5", "relu_max_value_null"),
    ("conv1d_lstm/model.json", "conv1d_lstm"),
    ("conv1d_lstm_windows.keras", "conv1d_lstm"),
    ("masked_embedding_rnn/model.json", "masked_embedding_rnn"),
    ("masking_lstm/model.json", "masking_lstm"),
    ("conv_lstm2d/model.json", "conv_lstm2d"),
]
INT_INPUTS = {"masked_embedding_rnn"}  # ids for an Embedding
MESHES = [None, ((3,), ("model",)), ((2, 2), ("data", "model"))]


def _reference(name):
    with open(os.path.join(DIR, name, "reference.json")) as f:
        ref = json.load(f)
    ref = {k: np.asarray(v, dtype="float32") if k != "sgd" else v for k, v in ref.items()}
    if name in INT_INPUTS:
        ref["x"] = ref["x"].astype(np.int32)
    return ref


def _load(path, mesh):
    if mesh is None:
        return keras.models.load_model(path, compile=False)
    shape, axes = mesh
    distribution = keras.distribution.AutoShard(
        keras.distribution.DeviceMesh(shape, axes),
        batch_dim_name="data" if "data" in axes else None)
    with distribution.scope():
        return keras.models.load_model(path, compile=False)


@pytest.mark.parametrize("mesh", MESHES, ids=["one", "model3", "data2model2"])
@pytest.mark.parametrize("file,name", FILES, ids=[f for f, _ in FILES])
def test_predicts_and_trains_as_tensorflow_js(file, name, mesh):
    ref = _reference(name)
    model = _load(os.path.join(DIR, file), mesh)
    np.testing.assert_allclose(model.predict(ref["x"], verbose=0), ref["predictions"],
                               rtol=1e-4, atol=1e-5)
    sgd = ref["sgd"]
    model.compile(keras.optimizers.SGD(sgd["learning_rate"]), sgd["loss"])
    history = model.fit(ref["x"], ref["y"], batch_size=sgd["batch_size"],
                        epochs=len(sgd["losses"]), shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], sgd["losses"], rtol=1e-4)


def _keras2_hard_sigmoid(x):  # Keras 2's keras/backend.py hard_sigmoid
    return np.clip(0.2 * x + 0.5, 0, 1)


def _keras3_hard_sigmoid(x):  # Keras 3's keras/src/ops/nn.py hard_sigmoid
    return np.clip(x + 3, 0, 6) / 6


def _dense_hard_sigmoid(model, x, hard_sigmoid):
    k1, b1, k2, b2 = model.get_weights()
    return hard_sigmoid(x @ k1 + b1) @ k2 + b2


def test_hard_sigmoid_follows_the_files_keras_version(tmp_path):
    ref = _reference("hard_sigmoid_dense")
    x = ref["x"]
    keras2 = keras.models.load_model(os.path.join(DIR, "hard_sigmoid_dense.h5"), compile=False)
    want2 = _dense_hard_sigmoid(keras2, x, _keras2_hard_sigmoid)
    want3 = _dense_hard_sigmoid(keras2, x, _keras3_hard_sigmoid)
    assert np.abs(want2 - want3).max() > 0.05  # the two forms tell apart on these inputs
    np.testing.assert_allclose(keras2.predict(x, verbose=0), want2, rtol=1e-4, atol=1e-5)
    # The same file as Keras 3 saves .h5 (keras_version 3.x): Keras 3's form.
    import h5py  # noqa: PLC0415 (only this test edits an HDF5 attribute)
    copy = tmp_path / "keras3.h5"
    shutil.copy(os.path.join(DIR, "hard_sigmoid_dense.h5"), copy)
    with h5py.File(copy, "r+") as h5:
        h5.attrs["keras_version"] = b"3.8.0"
    keras3 = keras.models.load_model(copy, compile=False)
    np.testing.assert_allclose(keras3.predict(x, verbose=0), want3, rtol=1e-4, atol=1e-5)
    # A TF.js model converted from Keras 3 says so in generatedBy.
    web = tmp_path / "web"
    shutil.copytree(os.path.join(DIR, "hard_sigmoid_dense"), web)
    doc = json.loads((web / "model.json").read_text())
    doc["generatedBy"] = "keras v3.8.0"
    doc["modelTopology"]["keras_version"] = "3.8.0"
    (web / "model.json").write_text(json.dumps(doc))
    converted = keras.models.load_model(web / "model.json", compile=False)
    np.testing.assert_allclose(converted.predict(x, verbose=0), want3, rtol=1e-4, atol=1e-5)


def test_windows_keras_file_holds_backslash_groups():
    with zipfile.ZipFile(os.path.join(DIR, "conv1d_lstm_windows.keras")) as z:
        assert json.loads(z.read("metadata.json"))["keras_version"].startswith("2.")
        weights = z.read("model.weights.h5")
    assert b"layers\\lstm\\cell" in weights and b"layers/lstm" not in weights


def test_keras3_file_with_preprocessing_layers_loads_in_python():
    """A .keras file as Keras 3 writes an image model with augmentation,
    an adapted Normalization (its int64 count too) and CenterCrop
    (tools/keras_files/make_family_files.py): load_model rebuilds those
    layers in Python; predict skips the random ones, normalizes with the
    file's statistics and crops, as Keras does in inference."""
    import h5py  # noqa: PLC0415
    path = os.path.join(DIR, "keras3_preprocessing.keras")
    with zipfile.ZipFile(path) as z, h5py.File(z.open("model.weights.h5"), "r") as h5:
        mean = h5["layers/normalization/vars/0"][()]
        variance = h5["layers/normalization/vars/1"][()]
        kernel, bias = h5["layers/dense/vars/0"][()], h5["layers/dense/vars/1"][()]
    x = np.random.default_rng(3).normal(size=(4, 6, 6, 2)).astype("float32")
    want = ((x - mean) / np.sqrt(variance))[:, 1:5, 1:5, :].reshape(4, -1) @ kernel + bias
    for mesh in MESHES:
        model = _load(path, mesh)
        assert [type(l).__name__ for l in model.layers] == [
            "RandomFlip", "RandomRotation", "Normalization", "CenterCrop", "Flatten", "Dense"]
        np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-4, atol=1e-5)
    model.compile(keras.optimizers.SGD(0.01), "mse")  # trains with the augmentation on
    losses = model.fit(x, want + 1, epochs=3, batch_size=4, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses))


def test_hard_sigmoid_keeps_its_meaning_when_saved_again(tmp_path):
    ref = _reference("hard_sigmoid_dense")
    keras2 = keras.models.load_model(os.path.join(DIR, "hard_sigmoid_dense.h5"), compile=False)
    for name, kw in [("again.keras", {}), ("again.h5", {}), ("web", {"save_format": "tfjs"})]:
        keras2.save(tmp_path / name, **kw)  # the .keras metadata keeps version 2.15.0
        again = keras.models.load_model(tmp_path / name, compile=False)
        np.testing.assert_allclose(again.predict(ref["x"], verbose=0), ref["predictions"],
                                   rtol=1e-4, atol=1e-5, err_msg=name)
    # Keras 3's hard_sigmoid has no name in Keras 2's forms: refused there.
    model = keras.Sequential([keras.Input((6,)),
                              keras.layers.Dense(3, activation="hard_sigmoid")])
    for name, kw in [("k3.h5", {}), ("k3web", {"save_format": "tfjs"})]:
        with pytest.raises(ValueError, match="Keras 3's hard_sigmoid"):
            model.save(tmp_path / name, **kw)
    model.save(tmp_path / "k3.keras")
    again = keras.models.load_model(tmp_path / "k3.keras")
    np.testing.assert_array_equal(again.predict(ref["x"], verbose=0),
                                  model.predict(ref["x"], verbose=0))
    # Nor can a model read from a Keras 3 file be written so.
    with pytest.raises(ValueError, match="Keras 3's hard_sigmoid"):
        again.save(tmp_path / "k3again.h5")


@pytest.mark.parametrize("name", ["masked_embedding_rnn", "masking_lstm"])
def test_the_masked_files_skip_the_padding_wherever_it_is(name):
    """The padding of the TF.js references is masked: each sequence padded
    at the start instead predicts what TF.js predicted for it padded at the
    end (masked steps keep the state; the files fix the length)."""
    ref = _reference(name)
    model = keras.models.load_model(os.path.join(DIR, name, "model.json"), compile=False)
    x = ref["x"]
    kept = x != 0 if x.ndim == 2 else (x != 0).any(-1)
    left = np.zeros_like(x)
    for i, n in enumerate(kept.sum(1)):
        left[i, x.shape[1] - n:] = x[i, :n]
    assert not np.array_equal(left, x)
    np.testing.assert_allclose(model.predict(left, verbose=0), ref["predictions"], rtol=1e-4,
                               atol=1e-5)
