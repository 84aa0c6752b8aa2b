#!/usr/bin/env python3
"""Writes Keras 3 `.keras` and Keras 2 `.h5` fixtures holding the same
models and weights as TensorFlow.js fixtures of tests/data/keras_layers/, so
that the TF.js predictions serve as their reference.

Keras itself cannot be installed here; the files follow the layouts that
Keras's own saving code defines (read through its sources):
- keras/src/saving/saving_lib.py: a zip of metadata.json, config.json and
  model.weights.h5; each layer's variables under layers/<group>/vars/<i>,
  <group> the snake case of the class numbered by repetition (dense,
  dense_1), recurrent cells under .../cell/vars; the model's own `vars`.
- keras/src/legacy/saving/legacy_h5_format.py: root attributes
  model_config, keras_version, backend; model_weights with layer_names and,
  per layer, weight_names and datasets <layer>/<weight>:0.

    python3 tools/keras_files/make_fixtures.py   # Debian python3-h5py, python3-numpy

writes tests/data/keras_files/<model>.keras and <model>.h5.
"""
import io
import json
import os
import re
import sys
import zipfile

import h5py
import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SRC = os.path.join(ROOT, "tests", "data", "keras_layers", "tfjs")
OUT = os.path.join(ROOT, "tests", "data", "keras_files")
MODELS = ["batch_normalization_dense", "two_outputs", "lstm_language_model", "resnet_cnn"]
RECURRENT = {"LSTM", "GRU", "SimpleRNN"}
POLICY = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
          "registered_name": None}


def snake(name):  # keras.src.utils.naming.to_snake_case
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


def tfjs_model(name):
    with open(os.path.join(SRC, name + ".json")) as f:
        doc = json.load(f)
    topo = doc["modelTopology"]
    topo = topo.get("model_config", topo)
    weights = {}
    for group in doc["weightsManifest"]:
        data = b"".join(open(os.path.join(SRC, p), "rb").read() for p in group["paths"])
        offset = 0
        for w in group["weights"]:
            assert w["dtype"] == "float32" and "quantization" not in w, w
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            weights[w["name"]] = np.frombuffer(data, "<f4", n, offset).reshape(w["shape"])
            offset += 4 * n
    return topo, weights


def layer_weights(layer, weights):
    """The layer's weights in Keras's variable order (the manifest's)."""
    prefix = layer["config"]["name"] + "/"
    return [(k[len(prefix):], v) for k, v in weights.items() if k.startswith(prefix)]


def keras3_tensor(ref):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": None, "dtype": "float32", "keras_history": [ref[0], ref[1], ref[2]]}}


def keras3_config(topo):
    """TF.js's (Keras 2 form) functional config in Keras 3's form."""
    layers = []
    for l in topo["config"]["layers"]:
        c = dict(l["config"])
        if l["class_name"] == "InputLayer":
            c = {"batch_shape": c["batch_input_shape"], "dtype": c["dtype"], "sparse": False,
                 "name": c["name"]}
        else:
            c["dtype"] = POLICY
        nodes = []
        for node in l["inbound_nodes"]:
            args = [keras3_tensor(r) for r in node]
            nodes.append({"args": args if len(args) == 1 else [args], "kwargs": {}})
        layers.append({"module": "keras.layers", "class_name": l["class_name"], "config": c,
                       "registered_name": None, "name": c["name"], "inbound_nodes": nodes})
    return {"module": "keras", "class_name": "Functional",
            "config": {"name": topo["config"]["name"], "trainable": True, "layers": layers,
                       "input_layers": topo["config"]["input_layers"],
                       "output_layers": topo["config"]["output_layers"]},
            "registered_name": "Functional",
            "compile_config": {"optimizer": {"module": "keras.optimizers", "class_name": "Adam",
                                             "config": {"name": "adam", "learning_rate": 0.01,
                                                        "beta_1": 0.9, "beta_2": 0.999,
                                                        "epsilon": 1e-07, "amsgrad": False},
                                             "registered_name": None},
                               "loss": "mean_squared_error", "loss_weights": None,
                               "metrics": ["mae"], "weighted_metrics": None,
                               "run_eagerly": False, "steps_per_execution": 1,
                               "jit_compile": False}}


def write_keras3(name, topo, weights):
    buf = io.BytesIO()
    with h5py.File(buf, "w") as h5:
        h5.create_group("vars")
        counts = {}
        for l in topo["config"]["layers"]:
            if l["class_name"] == "InputLayer":
                continue
            base = snake(l["class_name"])
            k = counts.get(base, 0)
            counts[base] = k + 1
            group = "layers/" + (base if k == 0 else "%s_%d" % (base, k))
            vars_group = group + ("/cell/vars" if l["class_name"] in RECURRENT else "/vars")
            h5.create_group(vars_group)
            for i, (_, v) in enumerate(layer_weights(l, weights)):
                h5[vars_group + "/" + str(i)] = v
    with zipfile.ZipFile(os.path.join(OUT, name + ".keras"), "w", zipfile.ZIP_STORED) as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.6.0",
                                                "date_saved": "2026-11-25@00:00:00"}))
        z.writestr("config.json", json.dumps(keras3_config(topo)))
        z.writestr("model.weights.h5", buf.getvalue())


def write_keras2(name, topo, weights):
    with h5py.File(os.path.join(OUT, name + ".h5"), "w") as h5:
        h5.attrs["model_config"] = json.dumps({"class_name": "Model",
                                               "config": topo["config"]}).encode()
        h5.attrs["training_config"] = json.dumps(
            {"loss": "mean_squared_error", "metrics": ["mae"], "weighted_metrics": None,
             "loss_weights": None,
             "optimizer_config": {"class_name": "Adam", "config": {"learning_rate": 0.01}}}).encode()
        h5.attrs["keras_version"] = b"2.15.0"
        h5.attrs["backend"] = b"tensorflow"
        mw = h5.create_group("model_weights")
        names = [l["config"]["name"] for l in topo["config"]["layers"]]
        mw.attrs["layer_names"] = np.array([n.encode() for n in names])
        for l in topo["config"]["layers"]:
            g = mw.create_group(l["config"]["name"])
            ws = layer_weights(l, weights)
            wn = [("%s/%s:0" % (l["config"]["name"], short)).encode() for short, _ in ws]
            g.attrs["weight_names"] = np.array(wn) if wn else np.zeros((0,), "f8")
            for n, (_, v) in zip(wn, ws):
                g[n.decode()] = v


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in MODELS:
        topo, weights = tfjs_model(name)
        write_keras3(name, topo, weights)
        write_keras2(name, topo, weights)
        print("wrote", name + ".keras", name + ".h5")


if __name__ == "__main__":
    sys.exit(main())
