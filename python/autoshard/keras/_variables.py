"""A model's weights as Keras 3 shows them (``model.weights``): Variables
whose ``path`` is Keras 3's ``Variable.path``, "d1/kernel" for the engine's
"d1.kernel".

Keras 3 names a variable ``<layer name>/<variable name>`` in a functional
model (keras/src/backend/common/variables.py: the name scopes at creation);
a recurrent layer builds its cell in its own scope, so an LSTM's kernel is
"lstm/lstm_cell/kernel". The engine keys weights by "." paths; these are
the same names with Keras's separators.
"""

import json

import numpy as np

# Keras 3's cell of each recurrent layer (keras/src/layers/rnn/): its
# weights' scope inside the layer's.
_CELLS = {"LSTM": "lstm_cell", "GRU": "gru_cell", "SimpleRNN": "simple_rnn_cell",
          "ConvLSTM1D": "conv_lstm_cell", "ConvLSTM2D": "conv_lstm_cell",
          "ConvLSTM3D": "conv_lstm_cell"}


def keras_paths(model, keys):
    """Keras 3's path of each engine weight key of ``model``."""
    from . import _functional

    cells = _file_cells(model)
    for layer in _functional.model_layers(model, flat=True):
        cell = _CELLS.get(type(layer).__name__)
        if cell:
            cells[layer.name] = cell
    out = []
    for key in keys:
        layer, _, weight = key.rpartition(".")
        path = key.replace(".", "/")
        if layer in cells and "." not in weight:
            path = f"{layer.replace('.', '/')}/{cells[layer]}/{weight}"
        out.append(path)
    return out


def _file_cells(model):
    """Layer name -> its cell's scope for the recurrent layers of the
    architecture a model was loaded with (a loaded model has no Python
    layers to ask; its file names each layer's class)."""
    kf = getattr(model, "_keras_file", None)
    if kf is None:
        return {}
    try:
        architecture = json.loads(kf.architecture)
    except (TypeError, ValueError):
        return {}
    out = {}

    def walk(entry):
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
            return
        config = entry["config"]
        cell = _CELLS.get(entry.get("class_name"))
        if cell and isinstance(config.get("name"), str):
            out[config["name"]] = cell
        for sub in config.get("layers") or []:  # a functional model's, a Sequential's
            walk(sub)

    walk(architecture)
    return out


class Variable:
    """One weight of a model: Keras 3's ``path`` ("d1/kernel"), ``name``
    ("kernel"), ``shape``, ``dtype``, ``trainable``, ``numpy()``,
    ``assign(value)``. Reads and writes go to the model's engine."""

    def __init__(self, model, key, path, trainable=True):
        self._model = model
        self._key = key  # the engine's path ("d1.kernel")
        self.path = path
        self.name = path.rsplit("/", 1)[-1]
        self.trainable = trainable

    @property
    def shape(self):
        return tuple(self._model._built().weight_shape(self._key))

    @property
    def dtype(self):
        return "float32"

    def numpy(self):
        return self._model._built().get_weight(self._key)

    @property
    def value(self):
        return self.numpy()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def assign(self, value):
        value = np.asarray(value, dtype=np.float32)
        if value.shape != self.shape:
            raise ValueError(f"assign: variable '{self.path}' has shape {self.shape}, the value "
                             f"{value.shape}")
        self._model._built().set_weight(self._key, value)

    def __repr__(self):
        return f"<Variable path={self.path}, shape={self.shape}, dtype={self.dtype}>"


def model_variables(model):
    """``model.weights``: every weight as a Variable, in Keras's order."""
    native = model._built()
    keys = list(native.weight_paths())
    frozen = set(native.non_trainable_weight_paths())
    return [Variable(model, k, p, k not in frozen)
            for k, p in zip(keys, keras_paths(model, keys))]
