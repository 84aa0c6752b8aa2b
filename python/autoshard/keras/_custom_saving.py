"""Saving models that hold custom layers (or are subclassed models).

The Keras file writers build what they write from the model's config,
which for a custom layer is Python code they never run; such a model is
written here instead: config.json names each custom class with its
get_config() (and registered name), model.weights.h5 holds every weight as
a float32 dataset at a Keras 3 style path, and save_weights/load_weights
use the same layout:

* a weight at engine path ``<layer>.<...>.<name>`` (the layers that hold
  it, outermost first) is ``layers/<layer>/<...>/vars/<i>``, ``i`` its
  place among its layer's weights (kernel 0, bias 1), as Keras 3's
  ``layers/dense/vars/0``. A functional model's or Sequential's layer is
  named by its name; a layer inside a custom layer or a subclassed model
  by the attribute holding it (``blocks/0`` for a list's first), so that
  another instance of the same classes reads the file.

Keras 3 nests a custom layer's sublayers under their attribute names, not
their layer names, so Keras reads these files where the two agree
(docs/python.md). The command line refuses such files by their custom
class (it never runs code from a file).
"""

import json
import os
import tempfile
import zipfile

import numpy as np

from .. import _native


def uses_custom(model):
    """Whether ``model`` holds a custom layer or is a subclassed model."""
    if hasattr(model, "_call_layer"):
        return True
    return any(isinstance(getattr(l, "_variables", None), list) for l in _top_layers(model))


def _top_layers(model):
    """A functional model's or Sequential's layers (those its outputs were
    computed by)."""
    layers = list(getattr(model, "_layers", []))
    stack = list(getattr(model, "_output_tensors", []))
    seen = set()
    while stack:
        t = stack.pop()
        if id(t) in seen or t._history is None:
            continue
        seen.add(id(t))
        layers.append(t._history[0])
        inputs = t._history[1]
        stack.extend(inputs if isinstance(inputs, list) else [inputs])
    return layers


def _attribute_names(obj, out, seen):
    """Engine layer name -> the attribute that holds the layer in its
    parent (``stem``, ``blocks/0`` for a list's first): what a layer is
    called in the file, the same for every instance of the class."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    for attr, value in vars(obj).items():
        if attr.startswith("_") and attr != "_layers":
            continue
        if isinstance(value, dict):
            items = [(f"{attr}/{k}", v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            items = [(f"{attr}/{i}", v) for i, v in enumerate(value)]
        else:
            items = [(attr, value)]
        for name, v in items:
            if hasattr(v, "_native") or hasattr(v, "_layers"):  # a layer or a model
                layer_name = getattr(v, "name", None)
                if isinstance(layer_name, str):
                    out.setdefault(layer_name, name.replace("_layers/", "layers/"))
                    _attribute_names(v, out, seen)


def layout(model):
    """(engine path, file path) of every weight, in the model's order."""
    native = model._built()
    paths = list(dict.fromkeys(list(native.weight_paths()) +
                               list(native.non_trainable_weight_paths())))
    subclassed = hasattr(model, "_call_layer")
    names, seen = {}, set()
    _attribute_names(model, names, seen)
    for layer in [] if subclassed else _top_layers(model):
        _attribute_names(layer, names, seen)
    counts, out = {}, []
    for path in paths:
        parts = path.split(".")
        if subclassed and parts[0] == model.name:
            parts = parts[1:]
        # The top layer of a functional model or Sequential keeps its name;
        # layers inside custom layers (and a subclassed model's) are named
        # by the attributes holding them.
        start = 0 if subclassed else 1
        parts = parts[:start] + [names.get(p, p) for p in parts[start:-1]] + parts[-1:]
        group = "/".join(parts[:-1]) if len(parts) > 1 else parts[0]
        index = counts.get(group, 0)
        counts[group] = index + 1
        out.append((path, f"layers/{group}/vars/{index}"))
    return out


def _architecture(model):
    if hasattr(model, "_call_layer"):
        cls = type(model)
        get_config = getattr(model, "get_config", None)
        config = get_config() if callable(get_config) else {}
        from . import _custom_models
        return {"module": cls.__module__, "class_name": cls.__name__,
                "config": {"name": model.name, "trainable": True, **(config or {})},
                "registered_name": cls.__dict__.get("_registered_name") or cls.__name__,
                "build_config": _custom_models.build_config(model)}
    from . import _model_files
    return _model_files.model_config(model)


def _counter_paths(model, weights):
    """(layer, file paths) of Keras's int variables that follow a top
    layer's weights (Normalization's count, vars/2): Keras checks a layer's
    number of variables when it loads a file."""
    if hasattr(model, "_call_layer"):
        return []
    out = []
    for layer in _top_layers(model):
        counters = getattr(layer, "_keras_counters", None)
        if counters is None or not counters():
            continue
        group = f"layers/{layer.name}/vars/"
        first = sum(f.startswith(group) for f in weights)
        out.append((layer, [f"{group}{first + i}" for i in range(len(counters()))]))
    return out


def _write_weights(model, out):
    native = model._built()
    entries = [(f, native.get_weight(p)) for p, f in layout(model)]
    for layer, paths in _counter_paths(model, [f for f, _ in entries]):
        entries += list(zip(paths, layer._keras_counters()))
    _native.write_weights_h5(out, entries)


def save(model, path, overwrite, save_file):
    """model.save of a model with custom layers: a .keras zip of its
    architecture, compile config and weights (no optimizer state)."""
    if not path.endswith(".keras"):
        raise ValueError(f"save: a model with custom layers is written as a .keras file, not "
                         f"'{os.path.basename(path)}'")
    config = _architecture(model)
    if model._compiled is not None:
        from . import _model_files
        try:
            config["compile_config"] = json.loads(json.dumps(_model_files.compile_config(model)))
        except (TypeError, ValueError):
            pass  # a custom loss: the compile config is left out
    metadata = {"keras_version": "3.6.0", "date_saved": "", "autoshard": "custom layers"}

    def write(out):
        with tempfile.TemporaryDirectory(prefix="autoshard-save-") as tmp:
            weights = os.path.join(tmp, "model.weights.h5")
            _write_weights(model, weights)
            with zipfile.ZipFile(out, "w") as z:
                z.writestr("metadata.json", json.dumps(metadata))
                z.writestr("config.json", json.dumps(config))
                z.write(weights, "model.weights.h5")

    save_file(path, overwrite, write, "save")


def save_weights(model, path, overwrite, save_file):
    save_file(path, overwrite, lambda out: _write_weights(model, out), "save_weights")


def restore(model, config, path, compile):
    """load_model's rest for a model rebuilt in Python from a file's
    config: a subclassed model built for the saved inputs (its
    build_config), the file's weights read into it, and compiled with the
    file's compile config (if ``compile``; one that names what only Python
    code defines, such as a custom loss, leaves the model uncompiled with a
    warning, as Keras's load_model warns)."""
    from . import _custom_models
    if getattr(model, "_call_layer", 1) is None:  # a subclassed model not built yet
        _custom_models.build_from_config(model, config.get("build_config") or {}, "load_model")
    model.load_weights(path)
    compile_config = config.get("compile_config")
    if compile and compile_config:
        try:
            objects = _native.compile_objects_of(json.dumps(compile_config))
        except Exception as e:  # noqa: BLE001 (the engine's error, reported as a warning)
            import warnings
            warnings.warn(f"load_model: '{os.path.basename(path)}' was not compiled ({e}); "
                          "call compile()", stacklevel=3)
            return
        model._compile_from_objects(objects)


def load_weights(model, path):
    """Sets every weight from a file written by save or save_weights (a
    .weights.h5, or a .keras zip's model.weights.h5)."""
    with tempfile.TemporaryDirectory(prefix="autoshard-weights-") as tmp:
        source = path
        if path.endswith(".keras"):
            with zipfile.ZipFile(path) as z:
                source = z.extract("model.weights.h5", tmp)
        stored = dict(_native.read_weights_h5(source))
    native = model._built()
    wanted = layout(model)
    missing = [f for _, f in wanted if f not in stored]
    if missing:
        raise ValueError(f"load_weights: '{path}' has no weight '{missing[0]}' (it holds "
                         f"{len(stored)} weights; this model {len(wanted)}): it was saved from "
                         "another architecture")
    for p, f in wanted:
        want = tuple(native.weight_shape(p))
        if stored[f].shape != want:
            raise ValueError(f"load_weights: weight '{p}' has shape {want}, the file's "
                             f"'{f}' {stored[f].shape}")
    for p, f in wanted:
        # np.asarray (not ascontiguousarray, which makes a scalar [1]) keeps a scalar's shape.
        native.set_weight(p, np.asarray(stored[f], np.float32, order="C"))
    for layer, paths in _counter_paths(model, [f for _, f in wanted]):
        layer._set_keras_counters([stored.get(f, 0) for f in paths])
