"""keras.Input, keras.Model and keras.Sequential on the C++ API's Model.

The methods convert arguments (NumPy arrays, lists or dicts of them, names)
and call the engine; fit's epoch loop, metrics and progress bar are the
engine's. Inputs are copied once into the engine; outputs are new arrays.
"""

import functools
import json
import math
import numbers
import threading

import numpy as np

from .. import _checks, _native
from . import _added_losses, _custom_models, _custom_saving, _datasets, _functional
from . import _file_layers, _model_files, _sample_weights, _variables
from . import callbacks as _callbacks
from . import distribution as _distribution
from . import losses as _losses
from . import metrics as _metrics
from . import optimizers as _optimizers
from . import utils as _utils
from .layers import Layer
from .tensors import Input, InputLayer, KerasTensor


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """Keras's load_model: a Model from a ``.keras`` file, a legacy ``.h5``
    or a TensorFlow.js ``model.json`` (or its directory), compiled with the
    file's compile config when it has one and ``compile`` is true."""
    config = _functional.custom_model_config(filepath, custom_objects)
    if config is not None:
        # Classes of Python code (custom_objects, the registry): the model is
        # rebuilt here from its config and the file's weights loaded into it.
        model = _functional.model_from_config(config, custom_objects, "load_model")
        _custom_saving.restore(model, config, filepath, compile)
        return model
    kf = _model_files.read_model_file(filepath, compile)
    return Model.from_keras_file(kf, compile)


# keras.models' functions on configs (_functional).
clone_model = _functional.clone_model
model_from_json = _functional.model_from_json


def save_model(model, filepath, overwrite=True, **kwargs):
    """keras.models.save_model: model.save(filepath, overwrite)."""
    model.save(filepath, overwrite=overwrite, **kwargs)


def _by_name(values, names, what, arg, missing_text, role):
    """A dict of arrays keyed by the model's input or output names, with one
    error naming the first name it lacks and the keys it has."""
    missing = [n for n in names if n not in values]
    if missing:
        raise ValueError(f"{what}: {arg} {missing_text} '{missing[0]}' ({arg}'s keys: "
                         f"{', '.join(repr(k) for k in values) or 'none'}; the {role}: "
                         f"{', '.join(repr(n) for n in names)})")
    return dict(values)


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _examples(xs, ys, what, x_name="x"):
    """The number of examples (rows) of the arrays: the same in each, at
    least one. Checked before shuffling (a permutation of x's rows would cut
    y)."""
    first = next(iter(xs.values()))
    for v in list(xs.values()) + list(ys.values()):
        if v.ndim < 1 or len(v) != len(first):
            raise ValueError(f"{what}: x and y must have the same number of examples, got "
                             f"{list(first.shape)} and {list(v.shape)}")
    if len(first) == 0:
        raise ValueError(f"{what}: {x_name} has no examples (0 rows); give at least one")
    return len(first)


def _arrays(given, name, what, rows=True):
    """Each value of ``given`` (input or output name -> array-like) as a
    NumPy array of numbers without NaN or infinity (with a batch dimension
    where ``rows``); errors name ``name`` (``x``, ``y``,
    ``validation_data[0]``) and, for several, the key."""
    out = {}
    for key, value in given.items():
        label = f"{name}[{key!r}]" if len(given) > 1 else name
        try:
            a = np.asarray(value)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{what}: {label} is not an array of numbers ({e})") from None
        if a.dtype == object and a.ndim == 0 and value is not None:
            # Not an array at all: a generator, a dataset, a keras Sequence.
            raise ValueError(f"{what}: {label} must be a NumPy array (or lists of numbers), "
                             f"got {_checks.shown(value)} (batches come as x alone: a "
                             "keras.utils.PyDataset or a generator of (x, y); tf.data is not "
                             "supported)")
        if a.dtype.kind not in "biuf":
            raise ValueError(f"{what}: {label} must hold numbers, not NumPy dtype {a.dtype}")
        if rows and a.ndim < 1:
            raise ValueError(f"{what}: {label} must have a batch dimension (one row per "
                             f"example), got a scalar")
        _checks.finite(a, label, what)
        out[key] = a
    return out


def _batch_size(value, name, what, default=32):
    value = _checks.optional_integer(value, name, what, minimum=1)
    return default if value is None else value


def _verbose(value, what):
    # Keras's "auto", 0, 1 or 2; True and False too, which Keras takes as 1
    # and 0 (verbose=False is common in scripts).
    if isinstance(value, str) and value == "auto":
        return 1
    if not isinstance(value, numbers.Integral) or value not in (0, 1, 2):
        raise ValueError(f"{what}: verbose must be 'auto', 0, 1 or 2, got {_checks.shown(value)}")
    return int(value)


def _callback_objects(callbacks, what):
    given = _as_list(callbacks or [])
    for i, c in enumerate(given):
        if not isinstance(c, _callbacks.Callback):
            raise TypeError(f"{what}: callbacks[{i}] must be a keras.callbacks.Callback, got "
                            f"{_checks.shown(c)}")
    return given


def _model_tensors(value, name):
    # Model(inputs, outputs): KerasTensors, or a list, tuple or dict of them.
    items = list(value.values()) if isinstance(value, dict) else _as_list(value)
    if not items:
        raise ValueError(f"Model: {name} is empty; give keras.Input results (inputs) and "
                         "layers' results on them (outputs)")
    for i, t in enumerate(items):
        if not isinstance(t, KerasTensor):
            at = f"{name}[{i}]" if len(items) > 1 else name
            raise TypeError(f"Model: {at} must be a KerasTensor (a keras.Input or a layer's "
                            f"result on one), got {_checks.shown(t)}")
    return items


def _named_objects(given, name, get):
    """compile's loss or metrics as objects (``get``), a name the engine does
    not know named with where it was given (``metrics[1]``)."""
    if given is None:
        return []
    if isinstance(given, dict):
        items = [(f"{name}[{k!r}]", v) for k, vs in given.items()
                 for v in (_as_list(vs) if name == "metrics" else [vs])]
    elif isinstance(given, (list, tuple)):
        items = [(f"{name}[{i}]", v) for i, v in enumerate(given)]
    else:
        items = [(name, given)]
    out = []
    for label, value in items:
        try:
            out.append(get(value))
        except ValueError as e:
            raise ValueError(f"compile: {label}: {e}") from None
    return out


# Engine messages about the targets, and about token ids in x, that name no
# argument: the call says which.
_TARGET_MESSAGES = ("do not match predictions", ": targets must be", ": target class ")


def _takes_class_ids(loss):
    """Whether a compiled loss takes class ids (the sparse categorical
    crossentropy) or numbers (every other); None for one read from a file."""
    if isinstance(loss, _losses.SparseCategoricalCrossentropy):
        return True
    if type(loss) is not _losses.Loss:
        return False
    name = str(getattr(loss, "name", "")).replace("_", "").lower()
    if name == "sparsecategoricalcrossentropy":
        return True
    return None if name == "loss" else False


def _check_loss(loss, what):
    if not math.isfinite(loss):
        raise ValueError(f"{what}: training diverged: the loss is "
                         f"{'nan' if math.isnan(loss) else 'infinite'} (lower the learning "
                         "rate, clip with clipnorm, or check the data)")


_LOCK_OF_LOCKS = threading.Lock()


def _one_call_at_a_time(method):
    """Runs ``method`` holding the model's lock: the engine's model is not
    safe for use from two threads at once (its calls release the GIL), and a
    save in one thread while another predicted crashed the interpreter. The
    lock is re-entrant: a callback of fit (which runs on fit's thread) may
    save or predict."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        lock = self.__dict__.get("_engine_lock")
        if lock is None:
            with _LOCK_OF_LOCKS:
                lock = self.__dict__.setdefault("_engine_lock", threading.RLock())
        with lock:
            # Keras shares a layer's weights between the models that hold
            # it: take those another model changed, and say when this one
            # changes them (_functional).
            _functional.pull_shared(self)
            result = method(self, *args, **kwargs)
            if method.__name__ in _CHANGES_WEIGHTS:
                _functional.mark_changed(self)
            return result

    return run


_CHANGES_WEIGHTS = ("fit", "train_on_batch", "set_weights", "load_weights")


class Model:
    """keras.Model(inputs, outputs, name): a functional model."""

    def __init__(self, inputs=None, outputs=None, name=None, **kwargs):
        if kwargs:
            raise ValueError(f"Model: unsupported argument(s) {', '.join(sorted(kwargs))}")
        self._start()
        if inputs is None and outputs is None and type(self) is not Model:
            self._native = None  # a Sequential builds itself
            if hasattr(type(self), "call"):  # a subclassed model, built at its first data
                _custom_models.start(self, _checks.name(name, "Model"))
            return
        if inputs is None or outputs is None:
            raise ValueError("Model needs inputs and outputs (subclassed models are not supported)")
        self._outputs_are_list = isinstance(outputs, (list, tuple, dict))
        self._input_tensors = _model_tensors(inputs, "inputs")
        self._output_tensors = _model_tensors(outputs, "outputs")
        self._native = _native.Model.functional([t._native for t in self._input_tensors],
                                                [t._native for t in self._output_tensors],
                                                _checks.name(name, "Model") or "functional")
        self._after_build()

    def _start(self, keras_file=None):
        """The state every model starts with, however it is made."""
        self._compiled = None
        self.stop_training = False
        self.history = None
        self._keras_file = keras_file  # what a Keras file said of a model loaded from it

    @classmethod
    def from_keras_file(cls, kf, compile=True):
        """The model a KerasFile (autoshard._native, as load_model reads it)
        holds, compiled with its compile config when it has one and
        ``compile`` is true (its optimizer's state restored)."""
        model = cls.__new__(cls)
        model._start(keras_file=kf)
        model._native = kf.take_model()
        model._outputs_are_list = len(kf.outputs) > 1
        model._file_layers = _file_layers.file_layers(model, json.loads(kf.architecture))
        # The file's "trainable": false layers. Where the handles say the
        # same, they alone say it (a handle set trainable again unfreezes).
        model._file_frozen = set()
        if model._frozen_scopes() != set(model._native.frozen):
            model._file_frozen = set(model._native.frozen)
        model._after_build()
        if compile and kf.has_compile:
            model._compile_from_keras_file(kf)
        return model

    def _compile_from_keras_file(self, kf):
        self._compile_from_objects(kf.compile_objects())
        kf.restore_iterations(self._native)
        # The file's compile config is written again as the file had it.
        self._compiled_from_file = self._compiled

    def _compile_from_objects(self, objects):
        """Compiles with a file's compile config as engine objects
        (optimizer, losses, loss_weights, metrics)."""
        optimizer, losses, loss_weights, metrics = objects
        self.optimizer = _optimizers.Optimizer(optimizer)
        self._compiled = (self.optimizer, [_losses.Loss.from_native(n) for n in losses],
                          list(loss_weights) or None, [_metrics.Metric(m) for m in metrics])
        self._compile_native()

    def _keras_architecture(self):
        """The Keras 3 architecture model.save writes (_model_files); a
        model the file reader loaded: the file's, as that reader gives it."""
        if getattr(self, "_keras_file", None) is not None and "_file_layers" in self.__dict__:
            return json.loads(self._keras_file.architecture)
        if not hasattr(self, "_output_tensors"):
            raise ValueError(f"save: model '{self.name}' has no Keras architecture to write")
        return _model_files.functional_config(self.name, self._input_tensors,
                                              self._output_tensors)

    # --- the functional surface (_functional) -----------------------------------

    @property
    def layers(self):
        """Keras's model.layers: the InputLayers, then each layer in call order
        (a subclassed model's: its attributes, in assignment order)."""
        if hasattr(self, "_call_layer"):
            return _custom_models.layers_of(self)
        return _functional.model_layers(self)

    def get_layer(self, name=None, index=None):
        return _functional.get_layer(self, name, index)

    @property
    def inputs(self):
        return list(getattr(self, "_input_tensors", None) or self._symbolic_ends()[0])

    @property
    def outputs(self):
        return list(getattr(self, "_output_tensors", None) or self._symbolic_ends()[1])

    @property
    def input(self):
        inputs = self.inputs
        return inputs[0] if len(inputs) == 1 else inputs

    @property
    def output(self):
        outputs = self.outputs
        return outputs[0] if len(outputs) == 1 else outputs

    def _symbolic_ends(self):
        raise ValueError(f"model '{self.name}' was loaded from a file: its inputs, outputs and "
                         "layers are the file's (build it in Python, or with "
                         "keras.models.model_from_json, to reach them)")

    def __call__(self, inputs, training=None, mask=None):
        """On KerasTensors: the model's layers called on them (a nested
        model; its weights shared). Inside a custom layer's call: traced like
        a layer (keras/_custom_models.py). On arrays: its predictions."""
        from ._custom_layers import any_traced
        if (isinstance(self, Sequential) or hasattr(self, "_call_layer")) and any_traced(inputs):
            return _custom_models.call_in_trace(self, inputs, {"training": training})
        if _functional.is_symbolic(inputs):
            return _functional.call_model(self, inputs)
        self._last_call_inputs = inputs  # what model.losses' add_loss terms are of
        return self.predict(inputs, verbose=0)

    def get_config(self):
        """Keras 3's config of the model (its layers' configs and calls)."""
        return self._keras_architecture()["config"]

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A model of ``config`` (get_config's) with new layers and weights."""
        if hasattr(cls, "call") and "layers" not in config:  # a subclassed model's
            return _custom_models.from_config(cls, config)
        return _functional.functional_from_config(cls, config, custom_objects)

    def to_json(self, **kwargs):
        """Keras's to_json: the architecture model_from_json reads back."""
        return json.dumps(self._keras_architecture(), **kwargs)

    # --- building -------------------------------------------------------------

    def _after_build(self):
        _custom_models.attach(self)  # custom layers' get_weights read this model
        if _utils.seed() is not None:
            self._native.set_seed(_utils.seed())
        if self._compiled is not None:
            self._compile_native()

    def _built(self, x=None, what="fit"):
        if self._native is None:
            self._build_from(x, what)
        if self._native is None:
            raise ValueError(f"model '{self.name}' is not built yet: give it a keras.Input "
                             "(or call fit/predict/build first)")
        return self._native

    def _build_from(self, x, what="fit"):
        if hasattr(self, "_call_layer"):
            _custom_models.build_from_data(self, x, what, _arrays)

    @property
    def name(self):
        return self._native.name if self._native is not None else self._name

    @property
    def input_names(self):
        return list(self._built().input_names)

    @property
    def output_names(self):
        return list(self._built().output_names)

    # --- compile ---------------------------------------------------------------

    @_one_call_at_a_time
    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None,
                weighted_metrics=None, **kwargs):
        """Keras's compile: optimizer and loss by name or object; metrics a list;
        weighted_metrics weighed by fit's and evaluate's sample weights."""
        for k in ("jit_compile", "auto_scale_loss", "run_eagerly", "steps_per_execution"):
            kwargs.pop(k, None)
        if kwargs:
            raise ValueError(f"compile: unsupported argument(s) {', '.join(sorted(kwargs))}")
        if loss is None:
            raise ValueError("compile: a loss is needed")
        # Losses and metrics are looked up now, so that a name the engine
        # does not know is an error of compile() (a Sequential without its
        # input compiles the engine's model at its first batch).
        _named_objects(loss, "loss", _losses.get)
        _named_objects(metrics, "metrics", _metrics.get)
        _named_objects(weighted_metrics, "weighted_metrics", _metrics.get)
        self._weighted_metrics = weighted_metrics
        self._frozen_at_compile = None  # read anew by _push_frozen
        self.optimizer = _optimizers.get(optimizer)
        self._compiled = (self.optimizer, loss, loss_weights, metrics)
        # A Sequential with its input is built now, under the distribution
        # set now (one without an input, at its first batch).
        if self._native is None:
            self._build_from(None)  # compiles it when it builds
        else:
            self._compile_native()

    def _compile_native(self):
        optimizer, loss, loss_weights, metrics = self._compiled
        outputs = list(self._native.output_names)
        if isinstance(loss, dict):
            loss = [loss[n] for n in outputs]
        if isinstance(loss_weights, dict):
            loss_weights = [loss_weights.get(n, 1.0) for n in outputs]
        if isinstance(metrics, dict):
            metrics = [m for n in outputs for m in _as_list(metrics.get(n, []))]
        objects = _named_objects(loss, "loss", _losses.get)
        losses = [l._native for l in objects]
        # Per output: whether its loss takes class ids (True), numbers
        # (False) or is not known here (None: a loss read from a file).
        kinds = [_takes_class_ids(l) for l in objects]
        self._class_id_targets = (kinds * len(outputs) if len(kinds) == 1 else
                                  kinds if len(kinds) == len(outputs) else [None] * len(outputs))
        weights = [_checks.number(w, f"loss_weights[{i}]", "compile", minimum=0)
                   for i, w in enumerate(loss_weights or [])]
        natives = [m._native for m in _named_objects(metrics, "metrics", _metrics.get)]
        losses, natives = self._weighting(objects, losses, natives)
        self._metric_names = [m.name for m in natives]
        def variables():
            keys = list(self._native.weight_paths())
            outputs = [f"{layer.name}/output"
                       for layer in _functional.model_layers(self, flat=True)]
            return keys, _variables.keras_paths(self, keys), outputs

        self._push_frozen()
        self._push_penalties()
        with _distribution.for_model(variables, self.name):
            self._native.compile(optimizer._native, losses, weights, natives)
        optimizer._model_native = self._native  # optimizer.iterations: this model's steps

    def _weighting(self, objects, losses, natives):
        """The losses and metrics for targets that carry sample weights (in
        the sample-weighted mode, _use_sample_weights), with the weighted
        metrics: plain without weights, as Keras's."""
        weighted = self.__dict__.get("_weighted_metrics")
        weighted = [m._native for m in _named_objects(weighted, "weighted_metrics", _metrics.get)]
        names = {m.name for m in natives}
        logged = lambda m: f"weighted_{m.name}" if m.name in names else m.name  # Keras's names
        if not self.__dict__.get("_weights_in_targets"):
            return losses, natives + [_native.renamed_metric(m, logged(m)) for m in weighted]
        kinds = set(self._class_id_targets)
        specs = [getattr(l, "_spec", None) for l in objects]
        if None in specs or None in kinds or len(kinds) != 1:
            raise ValueError("sample_weight and class_weight need the model compiled in Python "
                             "with a keras.losses loss (not one read from a file), and outputs "
                             "whose targets are all class ids or all numbers")
        ids = kinds.pop()
        if ids and len(self._native.output_names) > 1:
            raise ValueError("sample_weight and class_weight with class-id targets need a model "
                             "of one output")
        losses = [_native.sample_weighted_loss(*spec) for spec in specs]
        natives = [_native.metric_without_weights(m, ids) for m in natives]
        natives += [_native.sample_weighted_metric(m, ids, logged(m)) for m in weighted]
        return losses, natives

    def _use_sample_weights(self, on):
        """Compiles the engine's model for targets with (or without) their
        sample weights, when that changes (the weights and the optimizer's
        state stay)."""
        if bool(self.__dict__.get("_weights_in_targets")) != on:
            self._weights_in_targets = on
            try:
                self._compile_native()
            except BaseException:
                self._weights_in_targets = not on  # the engine keeps the mode it had
                raise

    def _weighted_targets(self, ys, what, sample_weight=None, class_weight=None):
        """ys with the sample weights packed in (_sample_weights.pack) and
        the model in its sample-weighted mode; ys as they are, and the plain
        mode, without weights."""
        names = list(self._native.output_names)
        n = len(next(iter(ys.values())))
        if class_weight is not None and sample_weight is not None:
            raise ValueError(f"{what}: give class_weight or sample_weight, not both (Keras "
                             "refuses both too)")
        if class_weight is not None:
            if len(names) > 1:
                raise ValueError(f"{what}: class_weight is for models of one output; give "
                                 "sample_weight per output")
            weights = {names[0]: _sample_weights.class_weights_to_sample_weights(
                ys[names[0]], class_weight, what)}
        elif sample_weight is not None:
            weights = _sample_weights.per_output(sample_weight, names, n, what)
        else:
            self._use_sample_weights(False)
            return ys
        self._use_sample_weights(True)
        return self._pack(ys, weights, what)

    def _pack(self, ys, weights, what):
        ids = dict(zip(self._native.output_names, self._class_id_targets))
        classes = (_native.first_output_shape(self._native)[-1] if any(ids.values())
                   else None)
        try:
            return _sample_weights.pack(ys, weights, ids, classes)
        except ValueError as e:
            raise ValueError(f"{what}: y: {e}") from None

    def _engine(self, what, call, *args):
        """``call(*args)``, an engine call on the user's data: its messages
        about targets and token ids are said to be about ``y`` and ``x``."""
        try:
            return call(*args)
        except ValueError as e:
            message = str(e)
            if any(m in message for m in _TARGET_MESSAGES):
                names = list(self._native.output_names)
                which = (f"output '{names[0]}'" if len(names) == 1 else
                         "outputs " + ", ".join(f"'{n}'" for n in names))
                raise ValueError(f"{what}: y (the targets of the model's {which}): "
                                 f"{message}") from None
            # The extension's conversion of x and y (ids that do not fit
            # int32, say) names the input or output: the call says which
            # argument.
            if message.startswith("input '"):
                raise ValueError(f"{what}: x: {message}") from None
            if message.startswith("targets of '"):
                raise ValueError(f"{what}: y: {message}") from None
            if message.startswith("token id "):
                raise ValueError(f"{what}: x holds a token id an Embedding does not have: "
                                 f"{message} (its input_dim, the vocabulary size; ids must be "
                                 "from 0 to input_dim - 1)") from None
            raise

    def _check_compiled(self, what):
        if self._compiled is None:
            raise ValueError(f"call compile() before {what}()")

    # --- data ------------------------------------------------------------------

    def _inputs(self, x, what):
        native = self._built(x, what)
        names = list(native.input_names)
        if isinstance(x, dict):
            return _by_name(x, names, what, "x", "has no array for the model's input", "inputs")
        xs = _as_list(x) if len(names) > 1 else [x]
        if len(xs) != len(names):
            raise ValueError(f"{what}: the model takes {len(names)} inputs, got {len(xs)}")
        return dict(zip(names, xs))

    def _target_arrays(self, y, what, label="y"):
        """y as checked arrays (``_arrays``) of the dtype each output's loss
        takes, as Keras casts them: integer or boolean targets become
        float32 for a loss on numbers (binary_crossentropy on 0/1 labels),
        whole float class ids int32 for the sparse categorical
        crossentropy."""
        ys = _arrays(self._targets(y, what), label, what)
        names = list(self._native.output_names)
        kinds = getattr(self, "_class_id_targets", None) or [None] * len(names)
        for name, takes_ids in zip(names, kinds):
            a = ys.get(name)
            if a is None or takes_ids is None:
                continue
            if not takes_ids and a.dtype.kind in "biu":
                ys[name] = a.astype(np.float32)
            elif takes_ids and a.dtype.kind == "f":
                bad = (a != np.trunc(a)) | (np.abs(a) > _checks.INT32_MAX)
                if bad.any():
                    flat = int(np.argmax(bad))
                    at = label if len(names) == 1 else f"{label}[{name!r}]"
                    raise ValueError(f"{what}: {at} holds class ids for a sparse categorical "
                                     f"crossentropy; element {_checks._index(flat, a.shape)} "
                                     f"is {a.reshape(-1)[flat]:g}, not a whole number within "
                                     "int32")
                ys[name] = a.astype(np.int32)
        return ys

    def _targets(self, y, what):
        names = list(self._native.output_names)
        if y is None:
            raise ValueError(f"{what}: targets (y) are needed")
        if isinstance(y, dict):
            return _by_name(y, names, what, "y", "has no targets for the model's output", "outputs")
        ys = _as_list(y) if len(names) > 1 else [y]
        if len(ys) != len(names):
            raise ValueError(f"{what}: the model has {len(names)} outputs, got {len(ys)} targets")
        return dict(zip(names, ys))

    # --- training and inference -----------------------------------------------

    @_one_call_at_a_time
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
            sample_weight=None, initial_epoch=0, steps_per_epoch=None, validation_steps=None,
            validation_batch_size=None, validation_freq=1):
        """Keras's fit; returns a History whose .history holds loss and metrics per epoch.
        A loss that turns NaN or infinite stops it with a ValueError naming the
        epoch and batch (unless a TerminateOnNaN callback stops it first)."""
        self._check_compiled("fit")
        dataset = _datasets.is_dataset(x)
        if steps_per_epoch is not None and not dataset:
            raise ValueError("fit: steps_per_epoch is supported with a PyDataset or generator "
                             "only")
        batch_size = _batch_size(batch_size, "batch_size", "fit")
        epochs = _checks.integer(epochs, "epochs", "fit", 0, _checks.INT32_MAX)
        initial_epoch = _checks.integer(initial_epoch, "initial_epoch", "fit", 0,
                                        _checks.INT32_MAX)
        validation_freq = _checks.integer(validation_freq, "validation_freq", "fit", 1,
                                          _checks.INT32_MAX)
        validation_split = _checks.number(validation_split, "validation_split", "fit",
                                          minimum=0, below=1)
        validation_batch_size = _batch_size(validation_batch_size, "validation_batch_size",
                                            "fit", default=batch_size)
        verbose = _verbose(verbose, "fit")
        given = _callback_objects(callbacks, "fit")
        if dataset:
            if y is not None or validation_split:
                raise ValueError("fit: x is a PyDataset or generator, whose batches hold the "
                                 "targets: y and validation_split must not be given with it")
            return self._fit_dataset(x, epochs, initial_epoch, steps_per_epoch, verbose, given,
                                     validation_data, validation_steps, validation_freq)
        xs = _arrays(self._inputs(x, "fit"), "x", "fit")
        ys = self._target_arrays(y, "fit")
        n = _examples(xs, ys, "fit")
        if (sample_weight is None and class_weight is None and isinstance(validation_data, (
                tuple, list)) and len(validation_data) == 3 and validation_data[2] is not None):
            sample_weight = np.ones(n, dtype=np.float32)  # weighted validation, the same mode
        ys = self._weighted_targets(ys, "fit", sample_weight, class_weight)
        validation = None
        if validation_data is not None:
            vx, vy = self._validation_arrays(validation_data)
            validation = (vx, vy, validation_batch_size, validation_freq)
        elif validation_split:
            # Keras's split: the last rows validate.
            cut = int(n * (1 - validation_split))
            if cut == 0 or cut == n:
                raise ValueError(f"fit: validation_split={validation_split} of {n} examples "
                                 f"leaves {cut} for training and {n - cut} for validation; each "
                                 "needs at least one (give more data or another "
                                 "validation_split)")
            validation = ({k: v[cut:] for k, v in xs.items()},
                          {k: v[cut:] for k, v in ys.items()}, validation_batch_size,
                          validation_freq)
            xs = {k: v[:cut] for k, v in xs.items()}
            ys = {k: v[:cut] for k, v in ys.items()}
            n = cut
        hooks, history = self._fit_hooks(given, verbose, epochs, -(-n // batch_size),
                                         validation)
        self.stop_training = False
        rng = np.random.default_rng(_utils.seed())
        hooks.train_begin()
        try:
            if not shuffle:
                self._engine("fit", self._native.fit, xs, ys, batch_size, epochs - initial_epoch,
                             False, hooks, initial_epoch, epochs)
            else:
                for epoch in range(initial_epoch, epochs):
                    order = rng.permutation(n)
                    self._engine("fit", self._native.fit, {k: v[order] for k, v in xs.items()},
                                 {k: v[order] for k, v in ys.items()}, batch_size, 1, False,
                                 hooks, epoch, epochs)
        except _callbacks.StopTraining:
            hooks.stopped()  # a batch's hook stopped it: that epoch still ends
        hooks.train_end()
        self.history = history
        return history

    def _fit_dataset(self, data, epochs, initial_epoch, steps, verbose, given, validation_data,
                     validation_steps, validation_freq):
        """fit on a PyDataset or generator (_datasets): each epoch's batches
        drawn, joined and run by the engine in the dataset's batches."""
        first = _datasets.draw(data, steps, "fit")
        if first is None:
            raise ValueError("fit: the dataset gave no batches")
        validation = None
        if validation_data is not None:
            vb = first[2]
            if _datasets.is_dataset(validation_data):
                got = _datasets.draw(validation_data, validation_steps, "fit")
                if got is None:
                    raise ValueError("fit: validation_data gave no batches")
                validation_data, vb = got[:2], got[2]
            vx, vy = self._validation_arrays(validation_data)
            validation = (vx, vy, vb, validation_freq)
        n = _examples(_arrays(self._inputs(first[0], "fit"), "x", "fit"), {}, "fit")
        hooks, history = self._fit_hooks(given, verbose, epochs, -(-n // first[2]), validation)
        self.stop_training = False
        hooks.train_begin()
        try:
            for epoch in range(initial_epoch, epochs):
                got = first if epoch == initial_epoch else _datasets.draw(data, steps, "fit")
                if got is None:
                    break  # an exhausted generator ends training, as in Keras
                xs = _arrays(self._inputs(got[0], "fit"), "x", "fit")
                ys = self._target_arrays(got[1], "fit")
                _examples(xs, ys, "fit")
                self._engine("fit", self._native.fit, xs, ys, got[2], 1, False, hooks, epoch,
                             epochs)
                _datasets.end_epoch(data)
        except _callbacks.StopTraining:
            hooks.stopped()
        hooks.train_end()
        self.history = history
        return history

    def _validation_arrays(self, data):
        # Keras's validation_data: (x_val, y_val) or (x_val, y_val, sample_weight_val).
        if not isinstance(data, (tuple, list)) or len(data) not in (2, 3):
            got = (f"a {type(data).__name__} of {len(data)}" if isinstance(data, (tuple, list))
                   else _checks.shown(data))
            raise ValueError("fit: validation_data must be a tuple (x_val, y_val) or (x_val, "
                             f"y_val, sample_weight_val), got {got}")
        vx = _arrays(self._inputs(data[0], "fit"), "validation_data[0]", "fit")
        vy = self._target_arrays(data[1], "fit", "validation_data[1]")
        n = _examples(vx, vy, "fit", "validation_data[0]")
        if self.__dict__.get("_weights_in_targets"):
            names = list(self._native.output_names)
            weights = ({} if len(data) < 3 or data[2] is None else _sample_weights.per_output(
                data[2], names, n, "fit", "validation_data[2]"))
            vy = self._pack(vy, weights, "fit")
        return vx, vy

    def _fit_hooks(self, callbacks, verbose, epochs, steps, validation):
        # Keras's CallbackList: the user's callbacks, then History, then the
        # progress bar (so that it shows the val_* logs).
        given = list(callbacks)
        history = next((c for c in given if isinstance(c, _callbacks.History)), None)
        if history is None:
            history = _callbacks.History()
            given.append(history)
        if verbose and not any(isinstance(c, _callbacks.ProgbarLogger) for c in given):
            given.append(_callbacks.ProgbarLogger())
        params = {"verbose": verbose, "epochs": epochs, "steps": steps}
        return _callbacks.CallbackList(given, model=self, validation=validation,
                                       params=params), history

    def _evaluate_with_hooks(self, xs, ys, batch_size, hooks, what="fit"):
        """The test pass with its hooks (x and y: checked arrays): batch by
        batch only when a callback has test-batch hooks (the engine's single
        call otherwise)."""
        hooks.call("on_test_begin", {})
        if not hooks.wants_batches("test"):
            logs = _callbacks._loss_first(self._engine(what, self._native.evaluate, xs, ys,
                                                       batch_size))
        else:
            n = _examples(xs, ys, what)
            running = _native.EvaluationSums()  # the whole set's sums, batch after batch
            for b, start in enumerate(range(0, n, batch_size)):
                hooks.call("on_test_batch_begin", b, {})
                part = slice(start, min(n, start + batch_size))
                got = self._engine(what, self._native.evaluate,
                                   {k: v[part] for k, v in xs.items()},
                                   {k: v[part] for k, v in ys.items()}, batch_size, running)
                logs = _callbacks._loss_first(got)
                hooks.call("on_test_batch_end", b, dict(logs))
        hooks.call("on_test_end", dict(logs))
        return logs

    @_one_call_at_a_time
    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 steps=None, callbacks=None, return_dict=False):
        """Keras's evaluate: the loss, or [loss, *metrics] (a dict with return_dict)."""
        self._check_compiled("evaluate")
        if _datasets.is_dataset(x):
            got = _datasets.draw(x, steps, "evaluate")
            if got is None:
                raise ValueError("evaluate: the dataset gave no batches")
            return self.evaluate(got[0], got[1], got[2], verbose, sample_weight, None, callbacks,
                                 return_dict)
        if steps is not None:
            raise ValueError("evaluate: steps is not supported")
        verbose = _verbose(verbose, "evaluate")
        batch_size = _batch_size(batch_size, "batch_size", "evaluate")
        given = _callback_objects(callbacks, "evaluate")
        xs = _arrays(self._inputs(x, "evaluate"), "x", "evaluate")
        ys = self._target_arrays(y, "evaluate")
        n = _examples(xs, ys, "evaluate")
        ys = self._weighted_targets(ys, "evaluate", sample_weight)
        steps = -(-n // batch_size)
        params = {"verbose": verbose, "epochs": 1, "steps": steps}
        hooks = _callbacks.CallbackList(given, model=self, params=params)
        bar = _callbacks.ProgbarLogger()
        bar.set_params(params)
        if verbose:
            bar.start()  # the line shows the pass's time
        logs = self._evaluate_with_hooks(xs, ys, batch_size, hooks, "evaluate")
        if verbose:
            bar.show(steps, logs)
        return self._results(logs, return_dict)

    def _results(self, logs, return_dict):
        ordered = {"loss": logs["loss"]}
        ordered.update((k, v) for k, v in logs.items() if k != "loss")
        if return_dict:
            return ordered
        values = list(ordered.values())
        return values[0] if len(values) == 1 else values

    @_one_call_at_a_time
    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Keras's predict: an (N, ...) array, or a list of them for several outputs."""
        if _datasets.is_dataset(x):
            got = _datasets.draw(x, steps, "predict", with_targets=False)
            if got is None:
                raise ValueError("predict: the dataset gave no batches")
            return self.predict(got[0], got[2], verbose, None, callbacks)
        if steps is not None:
            raise ValueError("predict: steps is not supported (the whole of x is predicted)")
        batch_size = _batch_size(batch_size, "batch_size", "predict")
        _verbose(verbose, "predict")
        given = _callback_objects(callbacks, "predict")
        xs = _arrays(self._inputs(x, "predict"), "x", "predict")
        n = _examples(xs, {}, "predict")
        hooks = _callbacks.CallbackList(given, model=self, params={"verbose": 0, "epochs": 1})
        hooks.call("on_predict_begin", {})
        if not hooks.wants_batches("predict"):
            outs = self._engine("predict", self._native.predict, xs, batch_size)
        else:
            parts = []
            for b, start in enumerate(range(0, n, batch_size)):
                hooks.call("on_predict_batch_begin", b, {})
                part = slice(start, min(n, start + batch_size))
                got = self._engine("predict", self._native.predict,
                                   {k: v[part] for k, v in xs.items()}, batch_size)
                parts.append(got)
                out = got if self._several_outputs() else got[0]
                hooks.call("on_predict_batch_end", b, {"outputs": out})
            outs = [np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))]
        hooks.call("on_predict_end", {})
        return outs if self._several_outputs() else outs[0]

    def _several_outputs(self):
        return len(self._native.output_names) > 1 or getattr(self, "_outputs_are_list", False)

    @_one_call_at_a_time
    def predict_on_batch(self, x):
        xs = _arrays(self._inputs(x, "predict_on_batch"), "x", "predict_on_batch")
        n = _examples(xs, {}, "predict_on_batch")
        outs = self._engine("predict_on_batch", self._native.predict, xs, n)
        return outs if self._several_outputs() else outs[0]

    @_one_call_at_a_time
    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict=False):
        """One optimizer step; returns that batch's loss (before the step). A
        loss that is NaN or infinite is a ValueError (the step was taken)."""
        self._check_compiled("train_on_batch")
        xs = _arrays(self._inputs(x, "train_on_batch"), "x", "train_on_batch")
        ys = self._target_arrays(y, "train_on_batch")
        n = _examples(xs, ys, "train_on_batch")
        ys = self._weighted_targets(ys, "train_on_batch", sample_weight, class_weight)
        if not self._metric_names:
            loss = self._engine("train_on_batch", self._native.train_on_batch, xs, ys)
            _check_loss(loss, "train_on_batch")
            return {"loss": loss} if return_dict else loss
        # With metrics: one epoch of one batch, one optimizer step (the
        # engine's fit gives the batch's loss and metrics together).
        got = self._engine("train_on_batch", self._native.fit, xs, ys, n, 1, False, None, 0, 1)
        logs = _callbacks._loss_first({k: v[0] for k, v in got.items()})
        _check_loss(logs["loss"], "train_on_batch")
        return logs if return_dict else list(logs.values())

    @_one_call_at_a_time
    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        self._check_compiled("test_on_batch")
        xs = _arrays(self._inputs(x, "test_on_batch"), "x", "test_on_batch")
        ys = self._target_arrays(y, "test_on_batch")
        n = _examples(xs, ys, "test_on_batch")
        ys = self._weighted_targets(ys, "test_on_batch", sample_weight)
        if not self._metric_names:
            loss = self._engine("test_on_batch", self._native.test_on_batch, xs, ys)
            return {"loss": loss} if return_dict else loss
        logs = _callbacks._loss_first(self._engine("test_on_batch", self._native.evaluate, xs,
                                                   ys, n))
        return logs if return_dict else list(logs.values())

    # --- frozen layers (trainable) ----------------------------------------------

    @property
    def trainable(self):
        return self.__dict__.get("_trainable", True)

    @trainable.setter
    def trainable(self, value):
        # Keras's Layer.trainable setter: every layer of the model follows.
        self._trainable = bool(value)
        for layer in self._python_layers():
            layer.trainable = self._trainable
        self._file_frozen = set()  # a file's frozen layers follow too

    def _python_layers(self):
        """The model's layers as Python objects (a model read by the file
        reader: handles on its layers, _file_layers)."""
        if "_layers" in self.__dict__:
            return list(self._layers)
        if "_file_layers" in self.__dict__:
            return [h for h in self._file_layers if getattr(h, "class_name", None) != "InputLayer"]
        return _called_layers(self.__dict__.get("_output_tensors", []))

    def _frozen_scopes(self):
        """The scopes (layer names) whose weights are frozen now: the
        layers whose trainable is False, a non-trainable nested model whole
        (Keras 3's Layer.trainable_weights is empty when the layer is not
        trainable), everything when the model is not trainable."""
        scopes = set(self.__dict__.get("_file_frozen", ()))
        if not self.trainable:
            scopes |= {p.split(".")[0] for p in self._built().weight_paths()}
        for layer in self._python_layers():
            scopes |= _frozen_of(layer)
        return scopes

    def _push_frozen(self):
        # Keras 3 fixes trainability at compile: the engine learns it then
        # (an engine recompile for sample weights keeps compile's).
        scopes = self.__dict__.get("_frozen_at_compile")
        if scopes is None:
            scopes = self._frozen_at_compile = self._frozen_scopes()
        if scopes != set(self._native.frozen):
            self._native.set_frozen(scopes)

    def _penalties(self):
        """The layers' regularizers and constraints as Python objects:
        (weights: path -> Regularizer, activities: layer -> Regularizer,
        constraints: path -> Constraint)."""
        from . import constraints, regularizers

        paths = set(self._built().weight_paths())
        weights, activities, bounds = {}, {}, {}
        for layer, prefix in _layers_with_scopes(self._python_layers(), ""):
            for key, value in getattr(layer, "_init_args", {}).items():
                if value is None or not key.endswith(("_regularizer", "_constraint")):
                    continue
                weight, _, kind = key.rpartition("_")
                if key == "activity_regularizer":
                    activities[prefix + layer.name] = regularizers.get(value)
                    continue
                # The engine's weight: "kernel", "recurrent_kernel", a
                # DepthwiseConv2D's "depthwise" kernel.
                names = [weight, weight + "_kernel"] + (["kernel"] if weight == "depthwise" else [])
                path = next((f"{prefix}{layer.name}.{n}" for n in names
                             if f"{prefix}{layer.name}.{n}" in paths), None)
                if path is None:
                    continue  # no such weight (a bias_regularizer without a bias)
                if kind == "regularizer":
                    weights[path] = regularizers.get(value)
                else:
                    bounds[path] = constraints.get(value)
        return weights, activities, bounds

    def _push_penalties(self):
        # A model read from a file keeps the file's (set by the reader).
        if "_file_layers" in self.__dict__ or not self._python_layers():
            return
        weights, activities, bounds = self._penalties()
        where = "compile"
        _native.set_regularizers(self._native, {k: r._engine(where) for k, r in weights.items()},
                                 {k: r._engine(where) for k, r in activities.items()})
        _native.set_constraints(self._native, {k: c._engine(where) for k, c in bounds.items()})

    @property
    def losses(self):
        """Keras's model.losses: the weight regularizers' penalties on the
        current weights (NumPy float32 scalars; the activity penalties
        exist only inside a step, where the engine adds them to the loss),
        then the custom layers' add_loss terms of the last model(x) call."""
        weights = self._penalties()[0]
        native = self._built()
        # Keras 3 counts the trainable weights' regularizers only
        # (Layer._get_regularization_losses), as the engine's step does.
        trainable = set(self._split_weights()[0])
        return [r(native.get_weight(p)) for p, r in weights.items() if p in trainable] + \
            _added_losses.added_losses(self)

    def _split_weights(self):
        """(trainable, non-trainable) weight paths as trainable is set now."""
        native = self._built()
        frozen, compiled = self._frozen_scopes(), set(native.frozen)
        # The moving statistics: non-trainable in the engine, frozen or not.
        statistics = {p for p in native.non_trainable_weight_paths() if not _under(p, compiled)}
        paths = list(native.weight_paths())
        fixed = [p for p in paths if _under(p, frozen) or p in statistics]
        return [p for p in paths if p not in set(fixed)], fixed

    @property
    def trainable_weights(self):
        """Keras's model.trainable_weights: Variables, as model.weights."""
        keys = set(self._split_weights()[0])
        return [v for v in self.weights if v._key in keys]

    @property
    def non_trainable_weights(self):
        """The frozen weights and the moving statistics (Variables)."""
        keys = set(self._split_weights()[1])
        return [v for v in self.weights if v._key in keys]

    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights

    # --- weights ---------------------------------------------------------------

    @property
    def weights(self):
        """Keras 3's model.weights: Variables with Keras's ``path`` ("d1/kernel")."""
        return _variables.model_variables(self)

    @_one_call_at_a_time
    def get_weights(self):
        """Every weight as a NumPy array, in Keras's order (per layer: kernel, then bias)."""
        native = self._built()
        return [native.get_weight(p) for p in native.weight_paths()]

    @_one_call_at_a_time
    def set_weights(self, weights):
        """Sets every weight from NumPy arrays in get_weights()'s order and shapes."""
        native = self._built()
        paths = native.weight_paths()
        weights = list(weights)
        if len(weights) != len(paths):
            raise ValueError(f"set_weights: the model has {len(paths)} weights, got "
                             f"{len(weights)} arrays")
        arrays = _arrays({p: w for p, w in zip(paths, weights)}, "weights", "set_weights",
                         rows=False)
        for path, w in arrays.items():
            want = tuple(native.weight_shape(path))
            if w.shape != want:
                raise ValueError(f"set_weights: weight '{path}' has shape {want}, the array "
                                 f"given {w.shape}")
        for path, w in arrays.items():
            native.set_weight(path, w)

    # --- files ---------------------------------------------------------------

    @_one_call_at_a_time
    def save(self, filepath, overwrite=True, zipped=None, **kwargs):
        """Keras's save: a ``.keras`` zip (or a legacy ``.h5``) of the
        architecture, the compile config and the current weights."""
        _model_files.save_model(self, filepath, overwrite=overwrite, zipped=zipped, **kwargs)

    @_one_call_at_a_time
    def save_weights(self, filepath, overwrite=True):
        """Keras 3's save_weights: the weights alone, as a ``.weights.h5`` file."""
        _model_files.save_weights(self, filepath, overwrite=overwrite)

    @_one_call_at_a_time
    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        """Keras 3's load_weights from a ``.weights.h5`` (or a whole ``.keras``) file."""
        _model_files.load_weights(self, filepath, skip_mismatch=skip_mismatch, **kwargs)

    @_one_call_at_a_time
    def count_params(self):
        return self._built().count_params()

    @_one_call_at_a_time
    def summary(self, print_fn=None, **kwargs):
        text = self._built().summary()
        (print_fn or print)(text.rstrip("\n"))

    @_one_call_at_a_time
    def build(self, input_shape):
        """Builds the model for inputs of ``input_shape`` (batch dimension
        first, None or a number); a built model stays as it is."""
        # None after the batch: a size known only from data (a sequence's length).
        shape = _checks.shape(input_shape, "input_shape", "build", allow_none=True)
        if len(shape) < 2:
            raise ValueError(f"build: input_shape must be (batch, features...), got {shape}")
        # What one example of that shape takes, against the memory there is,
        # before anything is made of that size.
        need = math.prod(d for d in shape[1:] if d is not None) * 4
        have = _native.available_memory_bytes()
        if have is not None and need > have:
            raise ValueError(f"build: one example of input_shape {shape} needs "
                             f"{_checks.size_text(need)} (float32); {_checks.size_text(have)} "
                             "is available (AUTOSHARD_MEMORY_LIMIT caps it): use a smaller "
                             "shape")
        self._build_from_shape(shape[1:])
        self._built()

    def _build_from_shape(self, shape):
        if hasattr(self, "_call_layer") and self._native is None:
            _custom_models.build_from_shape(self, shape)


def _under(path, scopes):
    return any(path.startswith(s + ".") for s in scopes)


def _frozen_of(layer):
    """The frozen scopes of one of a model's layers (a nested model's:
    itself when not trainable, else its frozen layers; their names are
    given plain and under the nested model's scope)."""
    if not getattr(layer, "trainable", True):
        return {layer.name}
    if not isinstance(layer, (Model, _file_layers.FileLayer)):
        return set()
    inner = set()
    for sub in layer._python_layers():
        inner |= _frozen_of(sub)
    return inner | {f"{layer.name}.{s}" for s in inner}


def _layers_with_scopes(layers, prefix):
    """(layer, its weights' scope prefix) for layers and nested models' layers."""
    for layer in layers:
        if isinstance(layer, Model):
            yield from _layers_with_scopes(layer._python_layers(), f"{prefix}{layer.name}.")
            yield from _layers_with_scopes(layer._python_layers(), prefix)
        else:
            yield layer, prefix


def _called_layers(outputs):
    """The layers called on the way to ``outputs`` (KerasTensors), in call order."""
    seen, stack, calls = set(), list(outputs), []
    while stack:
        t = stack.pop()
        if id(t) in seen or t._history is None:
            continue
        seen.add(id(t))
        calls.append(t)
        inputs = t._history[1]
        stack.extend(inputs if isinstance(inputs, list) else [inputs])
    layers = {}
    for t in sorted(calls, key=lambda t: t._order):
        layers.setdefault(id(t._history[0]), t._history[0])
    return list(layers.values())


class Sequential(Model):
    """keras.Sequential(layers, name): a stack of layers on one input."""

    def __init__(self, layers=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._name = _checks.name(name, "Sequential") or "sequential"
        self._input = None
        self._layers = []
        if layers is not None and not isinstance(layers, (list, tuple)):
            raise TypeError(f"Sequential: layers must be a list of layers, got "
                            f"{_checks.shown(layers)}")
        for layer in layers or []:
            self.add(layer)

    def add(self, layer):
        if self._native is not None:
            raise ValueError("Sequential.add after the model was built is not supported")
        if not isinstance(layer, (Layer, KerasTensor, InputLayer)):
            raise TypeError(f"Sequential: {_checks.shown(layer)} is not a layer (give "
                            "keras.layers objects, after an optional keras.Input)")
        if isinstance(layer, KerasTensor):
            self._input = layer
            return
        if isinstance(layer, InputLayer):
            self._input = layer.output
            return
        if self._input is None and not self._layers and getattr(layer, "_input_shape", None):
            self._input = Input(layer._input_shape)
        self._layers.append(layer)
        if not isinstance(getattr(layer, "_variables", None), list):
            layer._model = self  # a stock layer's weights are read through its model
        self._build_when_ready()

    @property
    def layers(self):
        return list(self._layers)

    def _symbolic_ends(self):
        """A Sequential's input and output KerasTensors (its layers called
        on its input once, as Keras's Sequential builds its graph)."""
        self._built()
        if self.__dict__.get("_output_tensor") is None:
            self._output_tensor = _functional.call_model(self, self._input)
        return [self._input], [self._output_tensor]

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return _functional.sequential_from_config(cls, config, custom_objects)

    def _build_when_ready(self):
        if self._input is None or self._native is not None:
            return
        # A Sequential's model is made when it is first used, so that layers
        # listed after the input are all in it.

    def _build_from(self, x, what="fit"):
        if self._native is not None:
            return
        if self._input is not None or x is None:
            self._build_from_shape(None)
            return
        # The input is inferred from x, checked first as the call checks it:
        # data the call refuses (a generator, strings, a scalar) must not
        # become the model's input, which would refuse good data afterwards.
        if isinstance(x, dict):
            x = next(iter(x.values()))
        if isinstance(x, (list, tuple)) and x and all(hasattr(v, "shape") for v in x):
            x = x[0]  # [array]: the one input's array (nested lists are the array itself)
        a = _arrays({"x": x}, "x", what)["x"]
        dtype = "int32" if a.dtype.kind in "iub" else "float32"
        self._input = Input(a.shape[1:], dtype=dtype)
        try:
            self._build_from_shape(None)
        except BaseException:
            self._input = None  # not kept: the next call infers it again
            raise

    def _keras_architecture(self):
        return _model_files.sequential_config(self.name, self._input, self._layers)

    def _build_from_shape(self, shape):
        if self._native is not None:
            return
        if self._input is None:
            if shape is None:
                return
            self._input = Input(shape)
        self._native = _native.Model.sequential(self._input._native,
                                                [l._native for l in self._layers], self._name)
        self._after_build()

    def _built(self, x=None, what="fit"):
        if self._native is None:
            self._build_from(x, what)
        if self._native is None:
            raise ValueError(f"model '{self._name}' is not built yet: start it with keras.Input "
                             "(or call fit/predict/build first)")
        return self._native
