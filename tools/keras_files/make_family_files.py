#!/usr/bin/env python3
"""Writes the Keras 2 forms of the TensorFlow.js models of
tests/data/keras_files/families/ (tools/keras_fixtures/file_families.mjs),
so that TF.js's predictions serve as their reference:

- <name>.h5 for hard_sigmoid_dense, recurrent_keras2_gates and
  relu_max_value_null: the legacy .h5 of Keras 2.15 (root attributes
  model_config, keras_version "2.15.0", backend; model_weights with
  layer_names, weight_names and <layer>/<weight>:0 datasets;
  keras/src/legacy/saving/legacy_h5_format.py).
- conv1d_lstm_windows.keras: the .keras zip that Keras 2.15 (tf.keras,
  saving_lib.py) writes on Windows. Its _save_container_state joins a
  layer's path with tf.io.gfile.join, which joins with the platform's
  separator, and H5IOStore.make(path) creates that whole string as one HDF5
  group: the Conv1D's variables are "layers\\conv1d/vars/0" (group
  "layers\\conv1d", then "vars", then "0"), the LSTM's
  "layers\\lstm\\cell/vars/0". Keras 2's Sequential config (module,
  class_name, config, registered_name, build_config), metadata.json with
  keras_version "2.15.0".
- keras3_preprocessing.keras: a Keras 3.6 image model with RandomFlip,
  RandomRotation, an adapted Normalization (vars mean, variance and the
  int64 count) and CenterCrop before Flatten and Dense, as Keras 3's
  saving_lib writes it (DTypePolicy dtypes, serialized initializers).
- keras3_resizing.keras: a Keras 3.6 image model: RandomCrop (with the
  seed Keras 3 saves), Resizing with crop_to_aspect_ratio (bilinear), Resizing with pad_to_aspect_ratio and a
  fill_value (nearest), Flatten and Dense (resizing.py's get_config).
- keras3_categories.keras: a Keras 3.6 model of an adapted Discretization
  (its config holds bin_boundaries and num_bins, as Keras 3's get_config
  writes them after adapt), a CategoryEncoding counting the buckets, and a
  Dense.
- keras2_category_ids.h5: tf-keras 2.15's legacy .h5 of int32 ids [batch, 1]
  through CategoryEncoding(one_hot) and a Dense.
- keras2_normalization.h5: tf-keras 2.15's legacy .h5 of an adapted
  Normalization before a Dense. tf-keras's Normalization.build adds mean,
  variance and an int64 scalar "count" (keras/layers/preprocessing/
  normalization.py), and legacy_h5_format.save_weights_to_hdf5_group lists
  all three in the layer's weight_names, count last.

Written from the formats, not with Keras (which cannot be installed here):

    python3 tools/keras_files/make_family_files.py   # Debian python3-h5py, python3-numpy
"""
import io
import json
import os
import sys
import zipfile

import h5py
import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DIR = os.path.join(ROOT, "tests", "data", "keras_files", "families")
H5_MODELS = ["hard_sigmoid_dense", "recurrent_keras2_gates", "relu_max_value_null"]


def tfjs_model(name):
    with open(os.path.join(DIR, name, "model.json")) as f:
        doc = json.load(f)
    data = b"".join(open(os.path.join(DIR, name, p), "rb").read()
                    for g in doc["weightsManifest"] for p in g["paths"])
    weights, offset = [], 0
    for g in doc["weightsManifest"]:
        for w in g["weights"]:
            assert w["dtype"] == "float32" and "quantization" not in w, w
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            weights.append((w["name"], np.frombuffer(data, "<f4", n, offset).reshape(w["shape"])))
            offset += 4 * n
    return doc["modelTopology"], weights


def layer_weights(layer, weights):
    prefix = layer["config"]["name"] + "/"
    return [(k[len(prefix):], v) for k, v in weights if k.startswith(prefix)]


def write_keras2_h5(name):
    topo, weights = tfjs_model(name)
    with h5py.File(os.path.join(DIR, name + ".h5"), "w") as h5:
        h5.attrs["model_config"] = json.dumps({"class_name": "Functional",
                                               "config": topo["config"]}).encode()
        h5.attrs["keras_version"] = b"2.15.0"
        h5.attrs["backend"] = b"tensorflow"
        mw = h5.create_group("model_weights")
        layers = topo["config"]["layers"]
        mw.attrs["layer_names"] = np.array([l["config"]["name"].encode() for l in layers])
        mw.attrs["keras_version"] = b"2.15.0"
        mw.attrs["backend"] = b"tensorflow"
        for l in layers:
            g = mw.create_group(l["config"]["name"])
            ws = layer_weights(l, weights)
            names = [("%s/%s:0" % (l["config"]["name"], short)).encode() for short, _ in ws]
            g.attrs["weight_names"] = np.array(names) if names else np.zeros((0,), "f8")
            for n, (_, v) in zip(names, ws):
                g[n.decode()] = v


def keras2_layer(cls, config, input_shape):
    """A layer as Keras 2.15's serialization_lib.serialize_keras_object writes it."""
    return {"module": "keras.layers", "class_name": cls, "config": config,
            "registered_name": None, "build_config": {"input_shape": input_shape}}


def initializer(cls):
    return {"module": "keras.initializers", "class_name": cls, "config": {"seed": None}
            if cls != "Zeros" else {}, "registered_name": None}


def windows_config():
    common = {"trainable": True, "dtype": "float32", "kernel_regularizer": None,
              "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None,
              "bias_constraint": None, "use_bias": True,
              "kernel_initializer": initializer("GlorotUniform"),
              "bias_initializer": initializer("Zeros")}
    conv = dict(common, name="conv1d", filters=4, kernel_size=[3], strides=[1], padding="valid",
                data_format="channels_last", dilation_rate=[1], groups=1, activation="relu",
                batch_input_shape=[None, 8, 3])
    lstm = dict(common, name="lstm", units=5, activation="tanh", recurrent_activation="sigmoid",
                recurrent_initializer=initializer("Orthogonal"), unit_forget_bias=True,
                recurrent_regularizer=None, recurrent_constraint=None, dropout=0.0,
                recurrent_dropout=0.0, implementation=2, return_sequences=False,
                return_state=False, go_backwards=False, stateful=False, unroll=False,
                time_major=False)
    dense = dict(common, name="dense", units=2, activation="linear")
    layers = [
        {"module": "keras.layers", "class_name": "InputLayer",
         "config": {"batch_input_shape": [None, 8, 3], "dtype": "float32", "sparse": False,
                    "ragged": False, "name": "conv1d_input"}, "registered_name": None},
        keras2_layer("Conv1D", conv, [None, 8, 3]),
        keras2_layer("LSTM", lstm, [None, 6, 4]),
        keras2_layer("Dense", dense, [None, 5]),
    ]
    return {"module": "keras", "class_name": "Sequential",
            "config": {"name": "sequential", "layers": layers}, "registered_name": None,
            "build_config": {"input_shape": [None, 8, 3]}}


def write_windows_keras():
    _, weights = tfjs_model("conv1d_lstm")
    groups = {"conv1d": "layers\\conv1d", "lstm": "layers\\lstm\\cell", "dense": "layers\\dense"}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as h5:
        h5.create_group("vars")  # the model's own (none)
        counts = {}
        for key, value in weights:
            layer = key.split("/")[0]
            vars_group = groups[layer] + "/vars"
            i = counts.get(layer, 0)
            counts[layer] = i + 1
            h5.require_group(vars_group)
            h5[vars_group + "/" + str(i)] = value
    write_zip(os.path.join(DIR, "conv1d_lstm_windows.keras"), {
        "metadata.json": json.dumps({"keras_version": "2.15.0",
                                     "date_saved": "2024-01-15@10:00:00"}),
        "config.json": json.dumps(windows_config()), "model.weights.h5": buf.getvalue()})


POLICY = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
          "registered_name": None}


def keras3_layer(cls, config, input_shape):
    config = dict(config, trainable=True, dtype=POLICY)
    return {"module": "keras.layers", "class_name": cls, "config": config,
            "registered_name": None, "build_config": {"input_shape": input_shape}}


def write_keras3_preprocessing():
    shape = [None, 6, 6, 2]
    init = {"module": "keras.initializers", "class_name": "GlorotUniform",
            "config": {"seed": None}, "registered_name": None}
    zeros = {"module": "keras.initializers", "class_name": "Zeros", "config": {},
             "registered_name": None}
    layers = [
        {"module": "keras.layers", "class_name": "InputLayer",
         "config": {"batch_shape": shape, "dtype": "float32", "sparse": False,
                    "name": "input_layer"}, "registered_name": None},
        keras3_layer("RandomFlip", {"name": "random_flip", "mode": "horizontal", "seed": None,
                                    "data_format": "channels_last"}, shape),
        keras3_layer("RandomRotation", {"name": "random_rotation", "factor": 0.1,
                                        "fill_mode": "reflect", "interpolation": "bilinear",
                                        "seed": None, "fill_value": 0.0,
                                        "data_format": "channels_last"}, shape),
        keras3_layer("Normalization", {"name": "normalization", "axis": [-1], "invert": False,
                                       "mean": None, "variance": None}, shape),
        keras3_layer("CenterCrop", {"name": "center_crop", "height": 4, "width": 4,
                                    "data_format": "channels_last"}, shape),
        keras3_layer("Flatten", {"name": "flatten", "data_format": "channels_last"},
                     [None, 4, 4, 2]),
        keras3_layer("Dense", {"name": "dense", "units": 3, "activation": "linear",
                               "use_bias": True, "kernel_initializer": init,
                               "bias_initializer": zeros, "kernel_regularizer": None,
                               "bias_regularizer": None, "kernel_constraint": None,
                               "bias_constraint": None}, [None, 32]),
    ]
    config = {"module": "keras", "class_name": "Sequential",
              "config": {"name": "sequential", "trainable": True, "dtype": POLICY,
                         "layers": layers},
              "registered_name": None, "build_config": {"input_shape": shape}}
    rng = np.random.default_rng(57)
    buf = io.BytesIO()
    with h5py.File(buf, "w") as h5:
        h5.create_group("vars")
        for group in ("random_flip", "random_rotation", "center_crop", "flatten"):
            h5.create_group("layers/%s/vars" % group)
        h5["layers/normalization/vars/0"] = np.array([1.5, -2.0], "float32")
        h5["layers/normalization/vars/1"] = np.array([4.0, 0.25], "float32")
        h5["layers/normalization/vars/2"] = np.int64(120)
        h5["layers/dense/vars/0"] = rng.normal(size=(32, 3)).astype("float32")
        h5["layers/dense/vars/1"] = rng.normal(size=(3,)).astype("float32")
    write_zip(os.path.join(DIR, "keras3_preprocessing.keras"), {
        "metadata.json": json.dumps({"keras_version": "3.6.0",
                                     "date_saved": "2026-12-06@00:00:00"}),
        "config.json": json.dumps(config), "model.weights.h5": buf.getvalue()})


def keras3_zip(name, layers, shape, weights):
    """A Keras 3.6 .keras of a Sequential of ``layers`` (after its
    InputLayer) and ``weights`` (group -> arrays, vars/0, vars/1, ...)."""
    entries = [{"module": "keras.layers", "class_name": "InputLayer",
                "config": {"batch_shape": shape, "dtype": "float32", "sparse": False,
                           "name": "input_layer"}, "registered_name": None}] + layers
    config = {"module": "keras", "class_name": "Sequential",
              "config": {"name": "sequential", "trainable": True, "dtype": POLICY,
                         "layers": entries},
              "registered_name": None, "build_config": {"input_shape": shape}}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as h5:
        h5.create_group("vars")
        for layer in layers:
            h5.create_group("layers/%s/vars" % layer["config"]["name"])
        for group, arrays in weights.items():
            for i, value in enumerate(arrays):
                h5["layers/%s/vars/%d" % (group, i)] = value
    write_zip(os.path.join(DIR, name), {
        "metadata.json": json.dumps({"keras_version": "3.6.0",
                                     "date_saved": "2026-12-07@00:00:00"}),
        "config.json": json.dumps(config), "model.weights.h5": buf.getvalue()})


def dense3(units, inputs):
    init = {"module": "keras.initializers", "class_name": "GlorotUniform",
            "config": {"seed": None}, "registered_name": None}
    zeros = {"module": "keras.initializers", "class_name": "Zeros", "config": {},
             "registered_name": None}
    return keras3_layer("Dense", {"name": "dense", "units": units, "activation": "linear",
                                  "use_bias": True, "kernel_initializer": init,
                                  "bias_initializer": zeros, "kernel_regularizer": None,
                                  "bias_regularizer": None, "kernel_constraint": None,
                                  "bias_constraint": None}, [None, inputs])


def write_keras3_resizing():
    # RandomCrop in inference: 7x6 -> the central 6x6 (rows 0-5), resized to
    # itself; the central 6x4 of ratio 5:4 -> 5x4 (bilinear); 5x4 padded to
    # 5x6 (ratio 6:9, a column of 0.5 each side) -> 6x9 (nearest).
    shape = [None, 7, 6, 3]
    resizing = {"interpolation": "bilinear", "crop_to_aspect_ratio": False,
                "pad_to_aspect_ratio": False, "fill_mode": "constant", "fill_value": 0.0,
                "data_format": "channels_last"}
    layers = [
        keras3_layer("RandomCrop", {"name": "random_crop", "height": 6, "width": 6,
                                    "seed": 1337, "data_format": "channels_last"}, shape),
        keras3_layer("Resizing", dict(resizing, name="resizing", height=5, width=4,
                                      crop_to_aspect_ratio=True), [None, 6, 6, 3]),
        keras3_layer("Resizing", dict(resizing, name="resizing_1", height=6, width=9,
                                      interpolation="nearest", pad_to_aspect_ratio=True,
                                      fill_value=0.5), [None, 5, 4, 3]),
        keras3_layer("Flatten", {"name": "flatten", "data_format": "channels_last"},
                     [None, 6, 9, 3]),
        dense3(3, 162),
    ]
    rng = np.random.default_rng(571)
    keras3_zip("keras3_resizing.keras", layers, shape, {"dense": [
        rng.normal(size=(162, 3)).astype("float32"), rng.normal(size=(3,)).astype("float32")]})


def write_keras3_categories():
    # Keras 3's Discretization.get_config (no trainable; dtype a string).
    shape = [None, 3]
    layers = [
        {"module": "keras.layers", "class_name": "Discretization",
         "config": {"bin_boundaries": [-0.5, 0.0, 0.5], "num_bins": 4, "epsilon": 0.01,
                    "output_mode": "int", "sparse": False, "name": "discretization",
                    "dtype": "float32"},
         "registered_name": None, "build_config": {"input_shape": shape}},
        keras3_layer("CategoryEncoding", {"name": "category_encoding", "num_tokens": 4,
                                          "output_mode": "count"}, shape),
        dense3(2, 4),
    ]
    rng = np.random.default_rng(572)
    keras3_zip("keras3_categories.keras", layers, shape, {"dense": [
        rng.normal(size=(4, 2)).astype("float32"), rng.normal(size=(2,)).astype("float32")]})


def write_keras2_category_ids():
    layers = [
        {"class_name": "InputLayer",
         "config": {"batch_input_shape": [None, 1], "dtype": "int32", "sparse": False,
                    "ragged": False, "name": "ids"}},
        {"class_name": "CategoryEncoding",
         "config": {"name": "category_encoding", "trainable": True, "dtype": "float32",
                    "num_tokens": 5, "output_mode": "one_hot", "sparse": False}},
        {"class_name": "Dense",
         "config": {"name": "dense", "trainable": True, "dtype": "float32", "units": 2,
                    "activation": "linear", "use_bias": True,
                    "kernel_initializer": {"class_name": "GlorotUniform",
                                           "config": {"seed": None}},
                    "bias_initializer": {"class_name": "Zeros", "config": {}},
                    "kernel_regularizer": None, "bias_regularizer": None,
                    "activity_regularizer": None, "kernel_constraint": None,
                    "bias_constraint": None}},
    ]
    rng = np.random.default_rng(573)
    with h5py.File(os.path.join(DIR, "keras2_category_ids.h5"), "w") as h5:
        h5.attrs["model_config"] = json.dumps({
            "class_name": "Sequential", "config": {"name": "sequential", "layers": layers}})
        h5.attrs["keras_version"] = b"2.15.0"
        h5.attrs["backend"] = b"tensorflow"
        mw = h5.create_group("model_weights")
        mw.attrs["layer_names"] = np.array([b"category_encoding", b"dense"])
        mw.attrs["keras_version"] = b"2.15.0"
        mw.attrs["backend"] = b"tensorflow"
        g = mw.create_group("category_encoding")
        g.attrs["weight_names"] = np.zeros((0,), "f8")
        g = mw.create_group("dense")
        g.attrs["weight_names"] = np.array([b"dense/kernel:0", b"dense/bias:0"])
        g["dense/kernel:0"] = rng.normal(size=(5, 2)).astype("float32")
        g["dense/bias:0"] = rng.normal(size=(2,)).astype("float32")


def write_keras2_normalization():
    layers = [
        {"class_name": "Normalization",
         "config": {"name": "normalization", "trainable": True, "dtype": "float32",
                    "batch_input_shape": [None, 3], "axis": [-1], "invert": False,
                    "mean": None, "variance": None}},
        {"class_name": "Dense",
         "config": {"name": "dense", "trainable": True, "dtype": "float32", "units": 2,
                    "activation": "linear", "use_bias": True,
                    "kernel_initializer": {"class_name": "GlorotUniform",
                                           "config": {"seed": None}},
                    "bias_initializer": {"class_name": "Zeros", "config": {}},
                    "kernel_regularizer": None, "bias_regularizer": None,
                    "activity_regularizer": None, "kernel_constraint": None,
                    "bias_constraint": None}},
    ]
    rng = np.random.default_rng(2015)
    weights = {
        "normalization": [("normalization/mean:0", np.array([0.5, -1.0, 2.0], "float32")),
                          ("normalization/variance:0", np.array([4.0, 0.25, 9.0], "float32")),
                          ("normalization/count:0", np.int64(50))],
        "dense": [("dense/kernel:0", rng.normal(size=(3, 2)).astype("float32")),
                  ("dense/bias:0", rng.normal(size=(2,)).astype("float32"))],
    }
    with h5py.File(os.path.join(DIR, "keras2_normalization.h5"), "w") as h5:
        h5.attrs["model_config"] = json.dumps({
            "class_name": "Sequential", "config": {"name": "sequential", "layers": layers}})
        h5.attrs["keras_version"] = b"2.15.0"
        h5.attrs["backend"] = b"tensorflow"
        mw = h5.create_group("model_weights")
        mw.attrs["layer_names"] = np.array([b"normalization", b"dense"])
        mw.attrs["keras_version"] = b"2.15.0"
        mw.attrs["backend"] = b"tensorflow"
        for layer, ws in weights.items():
            g = mw.create_group(layer)
            g.attrs["weight_names"] = np.array([n.encode() for n, _ in ws])
            for n, v in ws:
                g[n] = v


def write_zip(path, members):
    """A stored zip of ``members`` (name -> bytes or text) with fixed dates,
    so that rerunning the script rewrites the same bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)


def main():
    write_keras3_resizing()
    write_keras3_categories()
    write_keras2_category_ids()
    print("wrote keras3_resizing.keras, keras3_categories.keras, keras2_category_ids.h5")
    write_keras3_preprocessing()
    print("wrote keras3_preprocessing.keras")
    write_keras2_normalization()
    print("wrote keras2_normalization.h5")
    for name in H5_MODELS:
        write_keras2_h5(name)
        print("wrote", name + ".h5")
    write_windows_keras()
    print("wrote conv1d_lstm_windows.keras")


if __name__ == "__main__":
    sys.exit(main())
