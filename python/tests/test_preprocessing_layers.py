"""Keras 3's preprocessing layers inside models (issue 57): Normalization
with adapt, CenterCrop, Resizing, CategoryEncoding and Discretization (all
built by the Keras layer table), against NumPy (Resizing against TensorFlow.js's resize ops,
tools/keras_fixtures/resizing_reference.mjs), and sharded as on one device;
and the reshaping layers the Keras layer table builds (UpSampling2D,
ZeroPadding1D/2D, Cropping1D/2D)."""

import json
import os

import numpy as np
import pytest

import autoshard.keras as keras

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "keras_layers")
MESHES = [((3,), ("model",)), ((2, 2), ("data", "model"))]


def _sharded(make, mesh):
    shape, axes = mesh
    distribution = keras.distribution.AutoShard(
        keras.distribution.DeviceMesh(shape, axes),
        batch_dim_name="data" if "data" in axes else None)
    with distribution.scope():
        return make()


def _features(n=24, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 5)) * [1, 2, 3, 4, 5] + [5, -1, 0, 2, 9]).astype("float32")


# --- Normalization --------------------------------------------------------------------

def test_normalization_adapt_matches_numpy():
    x = _features()
    norm = keras.layers.Normalization()
    norm.adapt(x)
    model = keras.Sequential([keras.Input((5,)), norm])
    want = (x - x.mean(0)) / np.sqrt(x.var(0))
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.get_weights()[0], x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(norm.get_weights()[1], x.var(0), rtol=1e-5)


def test_normalization_axes_given_statistics_and_invert():
    rng = np.random.default_rng(1)
    img = rng.normal(size=(6, 4, 3, 2)).astype("float32") * 2 + 1
    norm = keras.layers.Normalization(axis=None)
    norm.adapt(img)
    model = keras.Sequential([keras.Input((4, 3, 2)), norm])
    np.testing.assert_allclose(model.predict(img, verbose=0),
                               (img - img.mean()) / img.std(), rtol=1e-4, atol=1e-5)
    per_row = keras.layers.Normalization(axis=(1, 3))
    per_row.adapt(img)
    model = keras.Sequential([keras.Input((4, 3, 2)), per_row])
    mean = img.mean(axis=(0, 2), keepdims=True)
    std = img.std(axis=(0, 2), keepdims=True)
    np.testing.assert_allclose(model.predict(img, verbose=0), (img - mean) / std, rtol=1e-4,
                               atol=1e-5)
    x = _features()
    given = keras.layers.Normalization(mean=[1, 2, 3, 4, 5], variance=[4, 4, 1, 0, 9])
    model = keras.Sequential([keras.Input((5,)), given])
    std = np.maximum(np.sqrt([4, 4, 1, 0, 9]), 1e-7)  # Keras's floor of the std
    np.testing.assert_allclose(model.predict(x, verbose=0), (x - [1, 2, 3, 4, 5]) / std,
                               rtol=1e-5)
    back = keras.layers.Normalization(mean=3.0, variance=4.0, invert=True)
    model = keras.Sequential([keras.Input((5,)), back])
    np.testing.assert_allclose(model.predict(x, verbose=0), x * 2 + 3, rtol=1e-6)


def _normalized_regressor(x):
    keras.utils.set_random_seed(5)
    norm = keras.layers.Normalization()
    norm.adapt(x)
    model = keras.Sequential([keras.Input((5,)), norm, keras.layers.Dense(6, activation="relu"),
                              keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


@pytest.mark.parametrize("mesh", MESHES, ids=["model3", "data2model2"])
def test_normalization_trains_sharded_as_on_one_device(mesh):
    x = _features()
    y = np.stack([x[:, 0] - x[:, 1], 0.1 * x[:, 4]], axis=1).astype("float32")
    one = _normalized_regressor(x)
    sharded = _sharded(lambda: _normalized_regressor(x), mesh)
    sharded.set_weights(one.get_weights())  # layer names (and so draws) differ
    h1 = one.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0).history["loss"]
    h2 = sharded.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h2, h1, rtol=1e-4)
    np.testing.assert_allclose(sharded.predict(x, verbose=0), one.predict(x, verbose=0),
                               rtol=1e-4, atol=1e-5)
    # The statistics are non-trainable: training leaves them as adapted.
    norm = one.layers[0]
    assert len(one.trainable_weights) == 4
    np.testing.assert_allclose(norm.get_weights()[0], x.mean(0), rtol=1e-6)


def test_normalization_errors():
    with pytest.raises(ValueError, match="both mean and variance"):
        keras.layers.Normalization(mean=1.0)
    with pytest.raises(ValueError, match="adapt is for a layer made without"):
        keras.layers.Normalization(mean=1.0, variance=2.0).adapt(_features())


# --- image layers -----------------------------------------------------------------------

def _images(seed=2):
    return np.random.default_rng(seed).normal(size=(4, 7, 6, 3)).astype("float32")


def _saved_weights(path, tmp_path):
    """A .keras file's model.weights.h5, every dataset by path (libhdf5)."""
    import zipfile  # noqa: PLC0415

    from autoshard import _native  # noqa: PLC0415
    with zipfile.ZipFile(path) as z:
        return dict(_native.read_weights_h5(z.extract("model.weights.h5", tmp_path / "x")))


def test_normalization_saves_keras_int_count(tmp_path):
    # Keras's Normalization.build adds an int "count" after mean and
    # variance (vars/2), and Keras refuses a file whose layer holds fewer
    # variables than it builds: written as an int, 0 after adapt (Keras 3's
    # adapt leaves it), and a file's own count (120 in the Keras 3 fixture)
    # kept through load and save.
    norm = keras.layers.Normalization()
    norm.adapt(_features())
    model = keras.Sequential([keras.Input((5,)), norm, keras.layers.Dense(2)])
    model.save(tmp_path / "m.keras")
    saved = _saved_weights(tmp_path / "m.keras", tmp_path)
    group = "layers/normalization/vars/"  # Keras 3 names the groups by class
    assert saved[group + "2"] == 0 and isinstance(saved[group + "2"], int)
    assert sorted(k for k in saved if k.startswith(group)) == [group + str(i) for i in range(3)]
    fixture = os.path.join(DATA, "..", "keras_files", "families", "keras3_preprocessing.keras")
    again = keras.models.load_model(fixture)
    again.save(tmp_path / "again.keras")
    assert _saved_weights(tmp_path / "again.keras", tmp_path)["layers/normalization/vars/2"] == 120
    # Given statistics are constants: no variables, no count.
    constant = keras.layers.Normalization(mean=1.0, variance=4.0)
    given = keras.Sequential([keras.Input((5,)), constant, keras.layers.Dense(2)])
    given.save(tmp_path / "given.keras")
    assert not any(k.startswith("layers/normalization/")
                   for k in _saved_weights(tmp_path / "given.keras", tmp_path))


def test_center_crop_takes_the_centre():
    img = _images()
    model = keras.Sequential([keras.Input((7, 6, 3)), keras.layers.CenterCrop(4, 3)])
    # keras/src/layers/preprocessing/image_preprocessing/center_crop.py: start (in - out) // 2.
    np.testing.assert_array_equal(model.predict(img, verbose=0), img[:, 1:5, 1:4, :])
    model = keras.Sequential([keras.Input((7, 6, 3)), keras.layers.CenterCrop(8, 3)])
    with pytest.raises(ValueError, match="smaller than the crop"):
        model.predict(img, verbose=0)


def test_resizing_matches_tensorflow_js():
    with open(os.path.join(DATA, "resizing_reference.json")) as f:
        ref = json.load(f)
    img = np.asarray(ref["input"], "float32")
    for case in ref["outputs"]:
        layer = keras.layers.Resizing(case["height"], case["width"],
                                      interpolation=case["interpolation"])
        model = keras.Sequential([keras.Input(img.shape[1:]), layer])
        np.testing.assert_allclose(model.predict(img, verbose=0), case["output"], rtol=1e-5,
                                   atol=1e-5, err_msg=str({k: case[k] for k in
                                                           ("height", "width", "interpolation")}))


def test_resizing_crops_and_pads_to_the_aspect_ratio():
    # keras.ops.image.resize: the central window of the target's ratio
    # (7x6 to 5:2 keeps columns 2-3), or fill_value columns on both sides,
    # int((int(7 * 9 / 4) - 6) / 2) = 4 each (7x6 to 4:9).
    img = _images()

    def run(layer, x):
        return keras.Sequential([keras.Input(x.shape[1:]), layer]).predict(x, verbose=0)

    np.testing.assert_allclose(
        run(keras.layers.Resizing(5, 2, crop_to_aspect_ratio=True), img),
        run(keras.layers.Resizing(5, 2), img[:, :, 2:4, :]), rtol=1e-6)
    # The image's own values come through exactly, small ones beside a large
    # fill too ((x - fill) + fill would round them).
    small = (img * 1e-3).astype(np.float32)
    padded = np.pad(small, ((0, 0), (0, 0), (4, 4), (0, 0)), constant_values=255.0)
    np.testing.assert_array_equal(
        run(keras.layers.Resizing(4, 9, "nearest", pad_to_aspect_ratio=True, fill_value=255.0),
            small),
        run(keras.layers.Resizing(4, 9, "nearest"), padded))
    with pytest.raises(ValueError, match="exclude each other"):
        keras.layers.Resizing(4, 4, crop_to_aspect_ratio=True, pad_to_aspect_ratio=True)


def _image_model():
    keras.utils.set_random_seed(4)
    model = keras.Sequential([
        keras.Input((7, 6, 3)), keras.layers.Resizing(9, 8), keras.layers.CenterCrop(6, 6),
        keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten(),
        keras.layers.Dense(3)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


@pytest.mark.parametrize("mesh", MESHES, ids=["model3", "data2model2"])
def test_image_preprocessing_trains_sharded_as_on_one_device(mesh):
    img = _images()
    y = np.random.default_rng(3).normal(size=(4, 3)).astype("float32")
    one, sharded = _image_model(), _sharded(_image_model, mesh)
    sharded.set_weights(one.get_weights())  # layer names (and so draws) differ
    h1 = one.fit(img, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    h2 = sharded.fit(img, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h2, h1, rtol=1e-4)


# --- categorical layers -----------------------------------------------------------------

@pytest.mark.parametrize("mode", ["one_hot", "multi_hot", "count"])
def test_category_encoding_matches_numpy(mode):
    rng = np.random.default_rng(6)
    ids = rng.integers(0, 6, size=(8, 1 if mode == "one_hot" else 4)).astype("int32")
    model = keras.Sequential([keras.Input(ids.shape[1:], dtype="int32"),
                              keras.layers.CategoryEncoding(6, output_mode=mode)])
    counts = np.stack([np.bincount(r, minlength=6) for r in ids]).astype("float32")
    want = np.minimum(counts, 1) if mode != "count" else counts
    np.testing.assert_array_equal(model.predict(ids, verbose=0), want)


def test_discretization_matches_numpy():
    x = _features() / 3
    bounds = [-1.0, 0.0, 0.5, 2.0]
    model = keras.Sequential([keras.Input((5,)), keras.layers.Discretization(bounds)])
    np.testing.assert_array_equal(model.predict(x, verbose=0), np.digitize(x, bounds))
    on_edge = np.array([[-1.0, 0.0, 0.5, 2.0, 3.0]], "float32")  # boundaries start buckets
    np.testing.assert_array_equal(model.predict(on_edge, verbose=0), [[1, 2, 3, 4, 4]])


def test_categorical_errors():
    with pytest.raises(ValueError, match="output_mode"):
        keras.layers.CategoryEncoding(4, output_mode="tf_idf")
    model = keras.Sequential([keras.Input((1,), dtype="int32"),
                              keras.layers.CategoryEncoding(4, output_mode="one_hot")])
    with pytest.raises(ValueError, match="out of range"):  # Keras raises too
        model.predict(np.array([[1], [4]], "int32"), verbose=0)
    with pytest.raises(ValueError, match="must increase"):
        keras.layers.Discretization([1.0, 0.0])
    with pytest.raises(ValueError, match="bin_boundaries"):
        keras.layers.Discretization(num_bins=4)


# --- reshaping layers from the layer table -----------------------------------------------

def test_padding_cropping_and_upsampling_match_numpy():
    img = _images()
    cases = [
        (keras.layers.ZeroPadding2D(((1, 2), (0, 3))),
         np.pad(img, ((0, 0), (1, 2), (0, 3), (0, 0)))),
        (keras.layers.ZeroPadding2D(1), np.pad(img, ((0, 0), (1, 1), (1, 1), (0, 0)))),
        (keras.layers.Cropping2D(((1, 2), (2, 0))), img[:, 1:-2, 2:, :]),
        (keras.layers.UpSampling2D((2, 3)), img.repeat(2, axis=1).repeat(3, axis=2)),
    ]
    for layer, want in cases:
        model = keras.Sequential([keras.Input((7, 6, 3)), layer])
        np.testing.assert_array_equal(model.predict(img, verbose=0), want, err_msg=layer.name)
    seq = img[:, :, :, 0]  # [batch, steps, features]
    for layer, want in [(keras.layers.ZeroPadding1D((2, 1)), np.pad(seq, ((0, 0), (2, 1), (0, 0)))),
                        (keras.layers.ZeroPadding1D(), np.pad(seq, ((0, 0), (1, 1), (0, 0)))),
                        (keras.layers.Cropping1D((0, 3)), seq[:, :-3]),
                        (keras.layers.Cropping1D(), seq[:, 1:-1])]:
        model = keras.Sequential([keras.Input((7, 6)), layer])
        np.testing.assert_array_equal(model.predict(seq, verbose=0), want, err_msg=layer.name)
    with pytest.raises(ValueError, match="channels_last"):
        keras.layers.ZeroPadding2D(data_format="channels_first")
    model = keras.Sequential([keras.Input((7, 6)), keras.layers.Cropping1D((4, 3))])
    with pytest.raises(ValueError, match="leaves nothing"):
        model.predict(seq, verbose=0)


def _sequence_model():
    keras.utils.set_random_seed(8)
    model = keras.Sequential([
        keras.Input((7, 6)), keras.layers.ZeroPadding1D(2), keras.layers.Conv1D(4, 3),
        keras.layers.Cropping1D((1, 2)), keras.layers.Flatten(), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


@pytest.mark.parametrize("mesh", MESHES, ids=["model3", "data2model2"])
def test_padded_sequence_model_trains_sharded_as_on_one_device(mesh):
    seq = _images()[:, :, :, 0]
    y = np.random.default_rng(9).normal(size=(4, 2)).astype("float32")
    one, sharded = _sequence_model(), _sharded(_sequence_model, mesh)
    sharded.set_weights(one.get_weights())  # layer names (and so draws) differ
    h1 = one.fit(seq, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    h2 = sharded.fit(seq, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h2, h1, rtol=1e-4)


# --- TimeDistributed -----------------------------------------------------------------------

def test_time_distributed_applies_one_layer_to_every_step():
    rng = np.random.default_rng(10)
    x = rng.normal(size=(3, 4, 5)).astype("float32")
    model = keras.Sequential([keras.Input((4, 5)),
                              keras.layers.TimeDistributed(keras.layers.Dense(2))])
    kernel, bias = model.get_weights()  # one set for all steps
    assert kernel.shape == (5, 2)
    np.testing.assert_allclose(model.predict(x, verbose=0), x @ kernel + bias, rtol=1e-5,
                               atol=1e-6)
    frames = rng.normal(size=(2, 3, 6, 6, 2)).astype("float32")
    conv = keras.Sequential([keras.Input((3, 6, 6, 2)),
                             keras.layers.TimeDistributed(keras.layers.Conv2D(4, 3))])
    plain = keras.Sequential([keras.Input((6, 6, 2)), keras.layers.Conv2D(4, 3)])
    plain.set_weights(conv.get_weights())
    want = plain.predict(frames.reshape(6, 6, 6, 2), verbose=0).reshape(2, 3, 4, 4, 4)
    np.testing.assert_allclose(conv.predict(frames, verbose=0), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="must be a keras.layers.Layer"):
        keras.layers.TimeDistributed("dense")


def _video_model():
    keras.utils.set_random_seed(12)
    model = keras.Sequential([
        keras.Input((3, 6, 6, 2)), keras.layers.TimeDistributed(keras.layers.Conv2D(4, 3)),
        keras.layers.TimeDistributed(keras.layers.Flatten()), keras.layers.LSTM(5),
        keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


@pytest.mark.parametrize("mesh", MESHES, ids=["model3", "data2model2"])
def test_time_distributed_trains_sharded_as_on_one_device(mesh):
    rng = np.random.default_rng(11)
    frames = rng.normal(size=(4, 3, 6, 6, 2)).astype("float32")
    y = rng.normal(size=(4, 2)).astype("float32")
    one, sharded = _video_model(), _sharded(_video_model, mesh)
    sharded.set_weights(one.get_weights())  # layer names (and so draws) differ
    h1 = one.fit(frames, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    h2 = sharded.fit(frames, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h2, h1, rtol=1e-4)


# --- saving ------------------------------------------------------------------------------

def test_table_preprocessing_layers_save_as_keras_and_load_in_cpp(tmp_path):
    # Built by the Keras layer table, saved with Keras's own configs, read
    # back by the C++ reader (no Python-only layer in the file).
    x = _images(6)
    ids = np.array([[0, 2, 2], [1, 1, 3], [3, 0, 1], [2, 2, 2]], "int32")
    image = keras.Sequential([
        keras.Input((7, 6, 3)), keras.layers.RandomCrop(6, 6, seed=2),
        keras.layers.Resizing(5, 4, crop_to_aspect_ratio=True), keras.layers.Flatten(),
        keras.layers.Dense(2)])
    counts = keras.Sequential([
        keras.Input((3,), dtype="int32"), keras.layers.CategoryEncoding(4, output_mode="count"),
        keras.layers.Dense(2)])
    values = keras.Sequential([
        keras.Input((5,)), keras.layers.Discretization([-1.0, 0.0, 1.0]),
        keras.layers.Dense(2)])
    for model, data in [(image, x), (counts, ids), (values, _features())]:
        path = tmp_path / f"{model.layers[1].name}.keras"
        model.save(path)
        import zipfile  # noqa: PLC0415
        with zipfile.ZipFile(path) as z:
            entries = json.loads(z.read("config.json"))["config"]["layers"]
        assert {(e["module"], e["registered_name"]) for e in entries[1:]} == {
            ("keras.layers", None)}
        again = keras.models.load_model(path)
        np.testing.assert_allclose(again.predict(data, verbose=0),
                                   model.predict(data, verbose=0), rtol=1e-6)
    assert entries[1]["config"]["bin_boundaries"] == [-1.0, 0.0, 1.0]


def test_models_with_python_built_keras_layers_round_trip(tmp_path):
    x = _images(5)
    norm = keras.layers.Normalization(axis=-1)
    norm.adapt(x)
    model = keras.Sequential([
        keras.Input((7, 6, 3)), norm, keras.layers.Normalization(mean=0.5, variance=4.0),
        keras.layers.RandomFlip(seed=1), keras.layers.RandomCrop(6, 6, seed=2),
        keras.layers.Resizing(8, 8), keras.layers.CenterCrop(6, 5),
        keras.layers.RandomContrast(0.2, seed=3), keras.layers.Reshape((6, 15)),
        keras.layers.TimeDistributed(keras.layers.Dense(4)), keras.layers.Flatten(),
        keras.layers.Dense(2)])
    model.save(tmp_path / "m.keras")
    import zipfile  # noqa: PLC0415
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        entries = json.loads(z.read("config.json"))["config"]["layers"]
    # Written as Keras writes its own layers: module keras.layers, no registered name.
    assert {(e["module"], e["registered_name"]) for e in entries} == {("keras.layers", None)}
    assert entries[1]["config"].get("mean") is None  # adapted statistics are weights
    assert entries[2]["config"]["mean"] == 0.5
    again = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))
    assert [type(l).__name__ for l in again.layers] == [type(l).__name__ for l in model.layers]
