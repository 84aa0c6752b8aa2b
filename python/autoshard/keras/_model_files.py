"""Keras files of models built in Python: what ``model.save``,
``save_weights``, ``load_weights`` and ``load_model`` do (keras.saving is
their public face).

Files are read and written by the C++ readers and writers of Keras files
(autoshard/io/keras_model.h; docs/keras-files.md): a Keras 3 ``.keras`` zip,
a Keras 2 ``.h5`` and, for loading (or ``save_format="tfjs"``), a
TensorFlow.js ``model.json`` or its directory. A model built in Python is
described to them by the Keras 3 ``config.json`` this module writes from
the configs its layers were built from (by the Keras layer table) and its
calls; a model loaded from a file
keeps that file's description. Missing or unreadable files raise OSError,
files whose content autoshard cannot use raise ValueError.
"""

import errno
import json
import os
import tempfile

from .. import _native
from . import _custom_layers, _custom_saving, _functional
from . import activations as _activations
from . import initializers as _initializers
from . import layers as _layers
from . import optimizers as _optimizers

_KERAS_EXTENSIONS = {".keras": "keras", ".h5": "h5", ".hdf5": "h5"}


# --- loading ----------------------------------------------------------------


def _check_readable(filepath):
    path = os.fspath(filepath)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file or directory (a Keras model file was expected)",
                                path)
    if os.path.isdir(path):
        path = os.path.join(path, "model.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(2, "a TensorFlow.js model directory holds a model.json; "
                                    "this one has none", path)
    elif not os.path.isfile(path):
        raise OSError(f"'{path}' is not a regular file (a Keras model file was expected)")
    with open(path, "rb"):  # PermissionError and the like, as an OSError
        pass


def read_model_file(filepath, compile=True):
    """The KerasFile of a ``.keras`` file, a legacy ``.h5`` or a TensorFlow.js
    ``model.json`` (or its directory), with the optimizer's state when
    ``compile`` (its moments and step count, when the file holds them for its
    compile config: training resumes). Classes of Python code (custom
    objects) are not read here: models.load_model rebuilds those."""
    path = _path(filepath, "load_model")
    _check_readable(path)
    if not _native.KerasFile.format_of(path):
        raise ValueError(f"load_model: '{path}' is not a Keras model file (.keras, .h5 or a "
                         "TensorFlow.js model.json or its directory)")
    return _native.KerasFile.read(path, True, bool(compile))


# --- saving -----------------------------------------------------------------


def _format_of(path, save_format):
    if save_format is not None:
        fmt = {"keras": "keras", "h5": "h5", "tf": None, "tfjs": "tfjs"}.get(save_format)
        if fmt is None:
            raise ValueError(f"save: save_format must be 'keras', 'h5' or 'tfjs', not "
                             f"{save_format!r}")
        return fmt
    ext = os.path.splitext(path)[1].lower()
    if ext not in _KERAS_EXTENSIONS:
        raise ValueError(f"Invalid filepath extension for saving: '{path}'. Add a `.keras` "
                         "extension for the native Keras format (recommended) or a `.h5` "
                         "extension (or pass save_format='tfjs' for a TensorFlow.js directory)")
    return _KERAS_EXTENSIONS[ext]


def save_model(model, filepath, overwrite=True, zipped=None, save_format=None, **kwargs):
    """Writes ``model`` to ``filepath`` (see Model.save)."""
    if kwargs.pop("include_optimizer", True) is not True or kwargs:
        raise ValueError(f"save: unsupported argument(s) {', '.join(sorted(kwargs)) or 'include_optimizer=False'}")
    if zipped is False:
        raise ValueError("save: zipped=False (an unzipped .keras directory) is not supported")
    path = _path(filepath, "save")
    if _custom_saving.uses_custom(model):
        return _custom_saving.save(model, path, overwrite, _save_file)
    fmt = _format_of(path, save_format)
    native = model._built()
    kf = _keras_file_of(model, fmt)
    if fmt == "tfjs":
        _save_directory(path, overwrite, lambda out: kf.save(native, out, fmt), "save")
    else:
        _save_file(path, overwrite, lambda out: kf.save(native, out, fmt), "save")


def _leader():
    # Under mpirun every rank calls save (the weights are gathered, a
    # collective) and rank 0 alone writes.
    return _native.world_rank() == 0


# What a save may touch (docs/python.md, "Bad input and what a save may
# touch"): the file it was asked for, or in a TensorFlow.js directory the
# files that format writes (model.json, its weight shards), each written
# under a temporary name beside it and renamed into place once complete. A
# directory is never deleted nor made where a file was asked for, and a
# failed save leaves what was there.


def _path(filepath, what):
    """``filepath`` as a str (bytes decoded as the file system does); an
    empty path or one with a NUL byte is refused here, before a temporary
    name is made of it."""
    try:
        path = os.fsdecode(os.fspath(filepath))
    except TypeError:
        raise TypeError(f"{what}: filepath must be a path (str or os.PathLike), got "
                        f"{type(filepath).__name__}") from None
    if not path:
        raise ValueError(f"{what}: filepath is empty; give a file's path")
    if "\0" in path:
        raise ValueError(f"{what}: filepath {path!r} holds a NUL byte, which no file name "
                         "can hold")
    return path


def _through_link(path):
    # A symbolic link is written through, as Keras's open(path, "wb") does:
    # the file it names is replaced and the link kept.
    return os.path.realpath(path) if os.path.islink(path) else path


def _check_folder(path):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, "No such directory to save into", folder)
    return folder


def _staging(folder):
    # A fresh temporary directory (the new files' temporary names) in
    # `folder`, so that renaming out of it replaces atomically; ranks that
    # do not write keep theirs out of the user's folder.
    try:
        return tempfile.TemporaryDirectory(prefix=".autoshard-save-",
                                           dir=folder if _leader() else None)
    except OSError as e:
        # The user's folder, not the temporary name, is what to fix.
        raise type(e)(e.errno, f"cannot write in the folder ({e.strerror}; a save writes "
                      "its files there under temporary names first)", folder) from None


def _save_file(path, overwrite, write, what):
    """Writes the file ``path`` with ``write(temporary path)``, then renames
    it into place: a file there is replaced when ``overwrite`` (Keras's
    rule), a directory never. A symbolic link is written through."""
    path = _through_link(path)
    folder = _check_folder(path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{what}: a directory is there, and a file was "
                                "asked for (a directory is never replaced): choose another "
                                "path", path)
    if os.path.lexists(path):
        if not overwrite:
            raise FileExistsError(errno.EEXIST, f"{what}: the file exists; pass overwrite=True "
                                  "to replace it", path)
        if not os.path.isfile(path):
            raise OSError(errno.EEXIST, f"{what}: something that is not a regular file is "
                          "there; it is never replaced: choose another path", path)
    with _staging(folder) as tmp:
        out = os.path.join(tmp, os.path.basename(path))
        write(out)
        if _leader():
            _place(out, path, overwrite, what)


def _place(out, path, overwrite, what):
    """Moves the written file ``out`` to ``path``. Without ``overwrite``, by
    a hard link, which fails if a file appeared at ``path`` since it was
    checked (os.replace would replace it); where the file system has no
    hard links, by os.replace after that check."""
    if overwrite:
        os.replace(out, path)
        return
    try:
        os.link(out, path)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, f"{what}: the file exists; pass overwrite=True "
                              "to replace it", path) from None
    except OSError:
        os.replace(out, path)


def _save_directory(path, overwrite, write, what):
    """Writes a TensorFlow.js model directory with ``write(temporary
    directory)``. A new directory is renamed into place; into one that
    exists (empty, or not empty with ``overwrite``), only the files the
    format wrote are moved, each replacing the file of its name, the weight
    shards before model.json. Other files in it are left as they are."""
    _check_folder(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise NotADirectoryError(errno.ENOTDIR, f"{what}: a TensorFlow.js model is a directory "
                                 "(model.json and its weight shards), and a file is there (it "
                                 "is never replaced): choose another path", path)
    existing = os.path.isdir(path)
    if existing and os.listdir(path) and not overwrite:
        raise FileExistsError(errno.ENOTEMPTY, f"{what}: the directory is not empty; pass "
                              "overwrite=True to replace the model.json and weight shards in "
                              "it (its other files are left as they are)", path)
    staging_folder = path if existing else os.path.dirname(os.path.abspath(path))
    with _staging(staging_folder) as tmp:
        out = os.path.join(tmp, "model")
        write(out)
        if not _leader():
            return
        if not existing:
            os.rename(out, path)  # fails, replacing nothing, if one appeared meanwhile
            return
        names = sorted(os.listdir(out), key=lambda n: (n == "model.json", n))
        for name in names:
            target = os.path.join(path, name)
            if os.path.isdir(target) and not os.path.islink(target):
                raise IsADirectoryError(errno.EISDIR, f"{what}: a directory is where the "
                                        f"TensorFlow.js file '{name}' goes (it is never "
                                        "replaced)", target)
        for name in names:
            os.replace(os.path.join(out, name), os.path.join(path, name))


def _keras_file_of(model, fmt="keras"):
    """The KerasFile describing ``model`` with its current compile config: a
    model built in Python is described by its Keras 3 config (for .keras)
    or Keras 2's form of it (.h5, TensorFlow.js), read without weights."""
    kf = model._keras_file
    if kf is None:
        config = model_config(model)
        if fmt != "keras":  # .h5 and TensorFlow.js files hold Keras 2's form
            if '"hard_sigmoid"' in json.dumps(config):  # as save.cc's check_hard_sigmoid_keras2
                raise ValueError(f"save: model '{model.name}' uses Keras 3's hard_sigmoid "
                                 "(relu6(x + 3) / 6), which .h5 and TensorFlow.js files name "
                                 "Keras 2's clip(0.2 x + 0.5, 0, 1): save it as .keras")
            config = _keras2(config)
        kf = _native.KerasFile.of_config(
            json.dumps(config), "keras" if fmt == "keras" else "tfjs",
            f"save: model '{model.name}' cannot be written as a Keras file")
    if model._compiled is not None and model._compiled is not getattr(
            model, "_compiled_from_file", None):
        kf.set_compile(json.dumps(compile_config(model)))
    return kf


# --- Keras 3 config of a model built in Python --------------------------------


def _keras2(config):
    """Keras 2's form of a Keras 3 model config (what .h5 files and
    TensorFlow.js hold), converted by the C++ writers' own conversion."""
    name = config["config"].get("name", "model")
    return json.loads(_native.keras2_architecture(json.dumps(config), f"model '{name}'"))


def layer_config(layer):
    """A layer's Keras 3 config ({module, class_name, config, ...})."""
    return _layer_config(layer)


def _layer_config(layer):
    """A layer's Keras 3 config: the config the Keras layer table built it
    from (layers._from_table), with what the table does not take (trainable,
    the seed, regularizers and constraints, which the model applies);
    a layer made otherwise (TimeDistributed, the traced augmentation
    layers) from its constructor's arguments."""
    if isinstance(getattr(layer, "_variables", None), list):  # a custom layer
        return _custom_layers.keras_config(layer)
    args = getattr(layer, "_init_args", None)
    table = getattr(layer, "_table_config", None)
    if args is None and table is None:
        raise ValueError(f"save: layer '{layer.name}' ({type(layer).__name__}) was not made by "
                         "keras.layers; it cannot be written")
    config = {"name": layer.name, "trainable": bool(getattr(layer, "trainable", True)),
              "dtype": "float32"}
    given = (table or {}) | {k: v for k, v in (args or {}).items() if table is None or k == "seed"
                             or k.endswith(("_regularizer", "_constraint"))}
    for key, value in given.items():
        if key in ("name", "input_shape", "trainable", "dtype") or value is None:
            continue
        config[key] = _keras_value(key, value)
    registered = getattr(type(layer), "_registered_name", None)  # keras.saving's registry
    return {"module": None if registered else "keras.layers",
            "class_name": type(layer).__name__, "config": config,
            "registered_name": registered}


def _keras_value(key, value):
    """One argument as Keras 3 writes it in a layer's config."""
    if key.endswith("activation"):
        return _activations.name_of(value) or "linear"
    if key.endswith("initializer"):
        return value if isinstance(value, str) else _initializers.serialize(
            _initializers.get(value))
    if key.endswith(("_regularizer", "_constraint")):
        return _penalty_config(key, value)
    if isinstance(value, tuple):
        return list(value)
    if hasattr(value, "tolist"):  # a NumPy array or scalar (Normalization's mean)
        return value.tolist()
    if isinstance(value, _layers.Layer):  # a wrapper's layer (TimeDistributed's)
        return _layer_config(value)
    return value


def _penalty_config(key, value):
    """A regularizer or constraint as Keras 3 serializes it in a layer's config."""
    from . import constraints, regularizers

    module = regularizers if key.endswith("_regularizer") else constraints
    return module.serialize(module.get(value))


def _input_entry(tensor):
    name = tensor.name
    dtype = "int32" if tensor.dtype in ("i32", "int32") else "float32"
    config = {"batch_shape": list(tensor.shape), "dtype": dtype,
              "sparse": False, "name": name}
    return {"module": "keras.layers", "class_name": "InputLayer", "config": config,
            "registered_name": None, "name": name, "inbound_nodes": []}


def sequential_config(name, input_tensor, layers):
    """A Sequential's Keras 3 architecture: its input, then its layers."""
    first = _input_entry(input_tensor)
    del first["name"], first["inbound_nodes"]  # a Sequential's entries are bare layers
    entries = [first]
    entries += [_layer_config(layer) for layer in layers]
    shape = entries[0]["config"]["batch_shape"]
    return {"module": "keras", "class_name": "Sequential",
            "config": {"name": name, "trainable": True, "layers": entries},
            "registered_name": None, "build_config": {"input_shape": shape}}


def functional_config(name, inputs, outputs):
    """A functional model's Keras 3 architecture from its input and output
    KerasTensors: every call reachable from the outputs, in the order they
    were made."""
    calls = _functional.calls(outputs)
    node_of, layers = {}, {}
    for t in calls:
        layer = t._history[0]
        node_of[id(t)] = len(layers.setdefault(id(layer), (layer, []))[1])
        layers[id(layer)][1].append(t)

    def ref(t):
        history = endpoint(t)
        return {"class_name": "__keras_tensor__",
                "config": {"shape": None, "dtype": "float32", "keras_history": history}}

    def endpoint(t):  # [layer, node, which output] (output k of a call: its output 0's)
        call = t._first if t._first is not None else t
        if call._history is None:
            return [t.name, 0, 0]
        return [call._history[0].name, node_of[id(call)], t._index]

    entries = [_input_entry(t) for t in inputs]
    for layer, outs in layers.values():
        entry = _layer_config(layer)
        entry["name"] = layer.name
        nodes = []
        for t in outs:
            args = t._history[1]
            states = getattr(t, "_state_args", 0)  # a recurrent layer's initial_state
            if states:
                args, initial = args[:-states], args[-states:]
                args = args[0] if len(args) == 1 else args
            arg = [ref(a) for a in args] if isinstance(args, list) else ref(args)
            kwargs = {"initial_state": [ref(a) for a in initial]} if states else {}
            kwargs.update(getattr(t, "_call_kwargs", {}))  # Attention's use_causal_mask, ...
            nodes.append({"args": [arg], "kwargs": kwargs})
        entry["inbound_nodes"] = nodes
        entries.append(entry)
    return {"module": "keras", "class_name": "Functional",
            "config": {"name": name, "trainable": True, "layers": entries,
                       "input_layers": [endpoint(t) for t in inputs],
                       "output_layers": [endpoint(t) for t in outputs]},
            "registered_name": "Functional"}


def model_config(model):
    """The Keras 3 architecture (config.json less compile_config) of a model
    built in Python (Model._keras_architecture: functional_config or
    sequential_config)."""
    model._built()
    return model._keras_architecture()


_LOSS_ALIASES = {"mse": "mean_squared_error", "mae": "mean_absolute_error",
                 "huber_loss": "huber"}
_LOSS_CLASSES = {"SparseCategoricalCrossentropy": "sparse_categorical_crossentropy",
                 "CategoricalCrossentropy": "categorical_crossentropy",
                 "BinaryCrossentropy": "binary_crossentropy",
                 "MeanSquaredError": "mean_squared_error",
                 "MeanAbsoluteError": "mean_absolute_error", "Huber": "huber"}


def _loss_config(loss):
    if isinstance(loss, str):
        return {"name": _LOSS_ALIASES.get(loss, loss)}
    kind = _LOSS_CLASSES.get(type(loss).__name__)
    args = getattr(loss, "_init_args", None)
    if kind is None or args is None:
        raise ValueError(f"save: loss {loss!r} cannot be written in a compile config")
    out = {"name": kind}
    for key in ("from_logits", "label_smoothing", "delta"):
        if key in args:
            out[key] = args[key]
    return out


def _optimizer_config(optimizer):
    args = getattr(optimizer, "_init_args", None)
    if args is None:
        raise ValueError(f"save: optimizer {optimizer!r} cannot be written in a compile config")
    config = {k: v for k, v in args.items() if v is not None and k != "name"}
    clip = config.pop("clipnorm", None) or config.pop("global_clipnorm", None)
    if clip:
        config["global_clipnorm"] = clip
    if optimizer._schedule is not None:  # Keras writes the schedule, serialized
        config["learning_rate"] = _optimizers.schedules.serialize(optimizer._schedule)
    else:
        config["learning_rate"] = optimizer.learning_rate  # as now (schedulers change it)
    return type(optimizer).__name__, config


def compile_config(model):
    """The compile config in the form KerasFile.set_compile takes."""
    optimizer, loss, loss_weights, metrics = model._compiled
    outputs = model.output_names
    if isinstance(loss, dict):
        loss = [loss[n] for n in outputs]
    losses = [_loss_config(l) for l in (loss if isinstance(loss, (list, tuple)) else [loss])]
    if isinstance(loss_weights, dict):
        loss_weights = [loss_weights.get(n, 1.0) for n in outputs]
    if isinstance(metrics, dict):
        metrics = [m for n in outputs for m in (metrics.get(n) or [])]
    names = [m if isinstance(m, str) else m.name for m in (metrics or [])]
    cls, config = _optimizer_config(optimizer)
    return {"optimizer": cls, "optimizer_config": config, "losses": losses,
            "loss_weights": [float(w) for w in (loss_weights or [])], "metrics": names}


# --- weights alone ------------------------------------------------------------


def _check_weights_path(path, what):
    if not path.endswith(".weights.h5"):
        raise ValueError(f"{what}: the filename must end in `.weights.h5`, got '{path}'")


def save_weights(model, filepath, overwrite=True):
    """Keras 3's save_weights: the ``model.weights.h5`` of the ``.keras`` file
    ``model.save`` would write, alone."""
    path = _path(filepath, "save_weights")
    _check_weights_path(path, "save_weights")
    if _custom_saving.uses_custom(model):
        return _custom_saving.save_weights(model, path, overwrite, _save_file)
    native = model._built()
    kf = _keras_file_of(model)
    if kf.format != "keras":
        raise ValueError("save_weights: a model loaded from a .h5 or TensorFlow.js file has no "
                         "Keras 3 weights layout; save it whole with model.save('....h5')")

    def write(out):
        kf.save_weights(native, out)

    _save_file(path, overwrite, write, "save_weights")


def load_weights(model, filepath, skip_mismatch=False, **kwargs):
    """Keras 3's load_weights: a ``.weights.h5`` written by save_weights (or
    Keras) for this architecture, or a whole ``.keras`` file's weights."""
    if skip_mismatch or kwargs:
        raise ValueError("load_weights: skip_mismatch and other arguments are not supported")
    path = _path(filepath, "load_weights")
    _check_readable(path)
    native = model._built()
    if _custom_saving.uses_custom(model):
        return _custom_saving.load_weights(model, path)
    if path.endswith(".keras"):
        source = _native.KerasFile.read(path, True).take_model()
    else:
        _check_weights_path(path, "load_weights")
        kf = _keras_file_of(model)
        if kf.format != "keras":
            raise ValueError("load_weights: a .weights.h5 file follows the Keras 3 layout; "
                             "this model was loaded from a .h5 or TensorFlow.js file")
        source = _native.KerasFile.of_config(kf.architecture, "keras", "load_weights:",
                                             path).take_model()
    mine = list(dict.fromkeys(list(native.weight_paths()) +
                              list(native.non_trainable_weight_paths())))
    theirs = set(source.weight_paths()) | set(source.non_trainable_weight_paths())
    missing = [p for p in mine if p not in theirs]
    if missing or len(theirs) != len(mine):
        raise ValueError(f"load_weights: '{path}' holds the weights of another architecture "
                         f"(missing: {', '.join(missing[:5]) or 'none'}; it has {len(theirs)} "
                         f"weights, the model {len(mine)})")
    values = [source.get_weight(p) for p in mine]
    for p, v in zip(mine, values):
        if tuple(v.shape) != tuple(native.weight_shape(p)):
            raise ValueError(f"load_weights: weight '{p}' is {tuple(v.shape)} in '{path}', "
                             f"{tuple(native.weight_shape(p))} in the model")
    for p, v in zip(mine, values):
        native.set_weight(p, v)
