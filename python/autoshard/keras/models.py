"""keras.Input, keras.Model and keras.Sequential on the C++ API's Model.

The methods convert arguments (NumPy arrays, lists or dicts of them, names)
and call the engine; fit's epoch loop, metrics and progress bar are the
engine's. Inputs are copied once into the engine; outputs are new arrays.
"""

import itertools

import numpy as np

from .. import _native
from . import callbacks as _callbacks
from . import losses as _losses
from . import metrics as _metrics
from . import optimizers as _optimizers
from . import utils as _utils


_tensor_count = itertools.count()


class KerasTensor:
    """A symbolic tensor of a functional model (keras.Input's result, a layer's output)."""

    def __init__(self, native, history=None):
        self._native = native
        # (layer, its input KerasTensor or list of them) for a layer's
        # output, None for an input; the count orders calls (model.save).
        self._history = history
        self._order = next(_tensor_count)

    @property
    def shape(self):
        return (None,) + tuple(self._native.shape) if self._native.is_input else None

    @property
    def dtype(self):
        return self._native.dtype

    @property
    def name(self):
        return self._native.name

    def __repr__(self):
        return f"<KerasTensor name={self.name}>"


def Input(shape=None, batch_size=None, dtype=None, sparse=None, batch_shape=None, name=None,
          tensor=None, optional=False):
    """keras.Input: a model input of per-example ``shape`` (no batch dimension)."""
    if batch_shape is not None:
        shape = tuple(batch_shape)[1:]
    if shape is None:
        raise ValueError("Input: give shape (per example, without the batch dimension)")
    if sparse or tensor is not None or optional:
        raise ValueError("Input: sparse, tensor and optional inputs are not supported")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(d is None for d in shape):
        raise ValueError(f"Input: every dimension of shape must be known, got {shape}")
    dtype = np.dtype(dtype or "float32").name
    return KerasTensor(_native.Input([int(d) for d in shape], dtype, name or ""))


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """keras.models.load_model: see keras.saving.load_model."""
    from . import saving

    return saving.load_model(filepath, custom_objects=custom_objects, compile=compile,
                             safe_mode=safe_mode)


def save_model(model, filepath, overwrite=True, **kwargs):
    """keras.models.save_model: model.save(filepath, overwrite)."""
    model.save(filepath, overwrite=overwrite, **kwargs)


class InputLayer:
    """keras.layers.InputLayer, for a Sequential's first entry."""

    def __init__(self, shape=None, batch_size=None, dtype=None, batch_shape=None, name=None,
                 input_shape=None, **kwargs):
        self.output = Input(shape if shape is not None else input_shape, dtype=dtype,
                            batch_shape=batch_shape, name=name)


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _examples(xs, ys):
    # Checked before shuffling (a permutation of x's rows would cut y): the
    # engine's message.
    first = next(iter(xs.values()))
    for v in list(xs.values()) + list(ys.values()):
        if v.ndim < 1 or len(v) != len(first):
            raise ValueError(f"fit: x and y must have the same number of examples, got "
                             f"{list(first.shape)} and {list(v.shape)}")
    return len(first)


class Model:
    """keras.Model(inputs, outputs, name): a functional model."""

    def __init__(self, inputs=None, outputs=None, name=None, **kwargs):
        if kwargs:
            raise ValueError(f"Model: unsupported argument(s) {', '.join(sorted(kwargs))}")
        self._compiled = None
        self.stop_training = False
        self.history = None
        self._keras_file = None  # what a Keras file said of a model loaded from it
        if inputs is None and outputs is None and type(self) is not Model:
            self._native = None  # a Sequential builds itself
            return
        if inputs is None or outputs is None:
            raise ValueError("Model needs inputs and outputs (subclassed models are not supported)")
        if isinstance(inputs, dict):
            inputs = list(inputs.values())
        self._outputs_are_list = isinstance(outputs, (list, tuple))
        self._input_tensors, self._output_tensors = _as_list(inputs), _as_list(outputs)
        self._native = _native.Model.functional([t._native for t in _as_list(inputs)],
                                                [t._native for t in _as_list(outputs)],
                                                name or "functional")
        self._after_build()

    # --- building -------------------------------------------------------------

    def _after_build(self):
        if _utils.seed() is not None:
            self._native.set_seed(_utils.seed())
        if self._compiled is not None:
            self._compile_native()

    def _built(self, x=None):
        if self._native is None:
            self._build_from(x)
        if self._native is None:
            raise ValueError(f"model '{self.name}' is not built yet: give it a keras.Input "
                             "(or call fit/predict/build first)")
        return self._native

    def _build_from(self, x):
        pass

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

    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None, **kwargs):
        """Keras's compile: optimizer and loss by name or object; metrics a list."""
        for k in ("jit_compile", "auto_scale_loss", "run_eagerly", "steps_per_execution"):
            kwargs.pop(k, None)
        if kwargs:
            raise ValueError(f"compile: unsupported argument(s) {', '.join(sorted(kwargs))}")
        if loss is None:
            raise ValueError("compile: a loss is needed")
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
        losses = [_losses.get(l)._native for l in _as_list(loss)]
        weights = [float(w) for w in (loss_weights or [])]
        natives = [_metrics.get(m)._native for m in (metrics or [])]
        self._metric_names = [m.name for m in natives]
        self._native.compile(optimizer._native, losses, weights, natives)

    def _check_compiled(self, what):
        if self._compiled is None:
            raise ValueError(f"call compile() before {what}()")

    # --- data ------------------------------------------------------------------

    def _inputs(self, x, what):
        native = self._built(x)
        names = list(native.input_names)
        if isinstance(x, dict):
            return dict(x)
        xs = _as_list(x) if len(names) > 1 else [x]
        if len(xs) != len(names):
            raise ValueError(f"{what}: the model takes {len(names)} inputs, got {len(xs)}")
        return dict(zip(names, xs))

    def _targets(self, y, what):
        names = list(self._native.output_names)
        if y is None:
            raise ValueError(f"{what}: targets (y) are needed")
        if isinstance(y, dict):
            return dict(y)
        ys = _as_list(y) if len(names) > 1 else [y]
        if len(ys) != len(names):
            raise ValueError(f"{what}: the model has {len(names)} outputs, got {len(ys)} targets")
        return dict(zip(names, ys))

    # --- training and inference -----------------------------------------------

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
            sample_weight=None, initial_epoch=0, steps_per_epoch=None, validation_steps=None,
            validation_batch_size=None, validation_freq=1):
        """Keras's fit; returns a History whose .history holds loss and metrics per epoch."""
        self._check_compiled("fit")
        if class_weight is not None or sample_weight is not None or steps_per_epoch is not None:
            raise ValueError("fit: class_weight, sample_weight and steps_per_epoch are not "
                             "supported")
        batch_size = int(batch_size or 32)
        xs, ys = self._inputs(x, "fit"), None
        ys = self._targets(y, "fit")
        xs = {k: np.asarray(v) for k, v in xs.items()}
        ys = {k: np.asarray(v) for k, v in ys.items()}
        if validation_split and validation_data is None:
            n = len(next(iter(xs.values())))
            cut = int(n * (1 - float(validation_split)))
            validation_data = ({k: v[cut:] for k, v in xs.items()},
                               {k: v[cut:] for k, v in ys.items()})
            xs = {k: v[:cut] for k, v in xs.items()}
            ys = {k: v[:cut] for k, v in ys.items()}
        validation = None
        if validation_data is not None:
            vx, vy = validation_data[0], validation_data[1]
            validation = (self._inputs(vx, "fit"), self._targets(vy, "fit"),
                          int(validation_batch_size or batch_size), int(validation_freq))
        verbose = 1 if verbose == "auto" else int(verbose)
        n = _examples(xs, ys)
        epochs = int(epochs)
        hooks, history = self._fit_hooks(callbacks, verbose, epochs, -(-n // batch_size),
                                         validation)
        self.stop_training = False
        rng = np.random.default_rng(_utils.seed())
        hooks.train_begin()
        try:
            if not shuffle:
                self._native.fit(xs, ys, batch_size, epochs - int(initial_epoch), False, hooks,
                                 int(initial_epoch), epochs)
            else:
                for epoch in range(int(initial_epoch), epochs):
                    order = rng.permutation(n)
                    self._native.fit({k: v[order] for k, v in xs.items()},
                                     {k: v[order] for k, v in ys.items()}, batch_size, 1,
                                     False, hooks, epoch, epochs)
        except _callbacks.StopTraining:
            hooks.stopped()  # a batch's hook stopped it: that epoch still ends
        hooks.train_end()
        self.history = history
        return history

    def _fit_hooks(self, callbacks, verbose, epochs, steps, validation):
        # Keras's CallbackList: the user's callbacks, then History, then the
        # progress bar (so that it shows the val_* logs).
        given = _as_list(callbacks or [])
        history = next((c for c in given if isinstance(c, _callbacks.History)), None)
        if history is None:
            history = _callbacks.History()
            given.append(history)
        if verbose and not any(isinstance(c, _callbacks.ProgbarLogger) for c in given):
            given.append(_callbacks.ProgbarLogger())
        params = {"verbose": verbose, "epochs": epochs, "steps": steps}
        return _callbacks.CallbackList(given, model=self, validation=validation,
                                       params=params), history

    def _evaluate_with_hooks(self, xs, ys, batch_size, hooks):
        """The test pass with its hooks: batch by batch only when a callback
        has test-batch hooks (the engine's single call otherwise)."""
        hooks.call("on_test_begin", {})
        if not hooks.wants_batches("test"):
            logs = _callbacks._loss_first(self._native.evaluate(xs, ys, batch_size))
        else:
            xs = {k: np.asarray(v) for k, v in xs.items()}
            ys = {k: np.asarray(v) for k, v in ys.items()}
            n = _examples(xs, ys)
            sums, seen = {}, 0
            for b, start in enumerate(range(0, n, batch_size)):
                hooks.call("on_test_batch_begin", b, {})
                part = slice(start, min(n, start + batch_size))
                got = self._native.evaluate({k: v[part] for k, v in xs.items()},
                                            {k: v[part] for k, v in ys.items()}, batch_size)
                rows = part.stop - part.start
                seen += rows
                for k, v in got.items():
                    sums[k] = sums.get(k, 0.0) + v * rows
                logs = _callbacks._loss_first({k: v / seen for k, v in sums.items()})
                hooks.call("on_test_batch_end", b, dict(logs))
        hooks.call("on_test_end", dict(logs))
        return logs

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 steps=None, callbacks=None, return_dict=False):
        """Keras's evaluate: the loss, or [loss, *metrics] (a dict with return_dict)."""
        self._check_compiled("evaluate")
        if sample_weight is not None or steps is not None:
            raise ValueError("evaluate: sample_weight and steps are not supported")
        verbose = 1 if verbose == "auto" else int(verbose)
        batch_size = int(batch_size or 32)
        xs = self._inputs(x, "evaluate")
        ys = self._targets(y, "evaluate")
        n = _examples({k: np.asarray(v) for k, v in xs.items()},
                      {k: np.asarray(v) for k, v in ys.items()})
        steps = -(-n // batch_size)
        params = {"verbose": verbose, "epochs": 1, "steps": steps}
        hooks = _callbacks.CallbackList(_as_list(callbacks or []), model=self, params=params)
        bar = _callbacks.ProgbarLogger()
        bar.set_params(params)
        if verbose:
            bar.start()  # the line shows the pass's time
        logs = self._evaluate_with_hooks(xs, ys, batch_size, hooks)
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

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Keras's predict: an (N, ...) array, or a list of them for several outputs."""
        xs = self._inputs(x, "predict")
        batch_size = int(batch_size or 32)
        hooks = _callbacks.CallbackList(_as_list(callbacks or []), model=self,
                                        params={"verbose": 0, "epochs": 1})
        hooks.call("on_predict_begin", {})
        if not hooks.wants_batches("predict"):
            outs = self._native.predict(xs, batch_size)
        else:
            xs = {k: np.asarray(v) for k, v in xs.items()}
            n = len(next(iter(xs.values())))
            parts = []
            for b, start in enumerate(range(0, n, batch_size)):
                hooks.call("on_predict_batch_begin", b, {})
                part = slice(start, min(n, start + batch_size))
                got = self._native.predict({k: v[part] for k, v in xs.items()}, batch_size)
                parts.append(got)
                out = got if self._several_outputs() else got[0]
                hooks.call("on_predict_batch_end", b, {"outputs": out})
            outs = [np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))]
        hooks.call("on_predict_end", {})
        return outs if self._several_outputs() else outs[0]

    def _several_outputs(self):
        return len(self._native.output_names) > 1 or getattr(self, "_outputs_are_list", False)

    def predict_on_batch(self, x):
        n = len(np.asarray(next(iter(self._inputs(x, "predict_on_batch").values()))))
        return self.predict(x, batch_size=max(n, 1))

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict=False):
        """One optimizer step; returns that batch's loss (before the step)."""
        self._check_compiled("train_on_batch")
        if sample_weight is not None or class_weight is not None:
            raise ValueError("train_on_batch: sample_weight and class_weight are not supported")
        xs = self._inputs(x, "train_on_batch")
        ys = self._targets(y, "train_on_batch")
        if not self._metric_names:
            loss = self._native.train_on_batch(xs, ys)
            return {"loss": loss} if return_dict else loss
        # With metrics: one epoch of one batch, one optimizer step (the
        # engine's fit gives the batch's loss and metrics together).
        n = len(np.asarray(next(iter(xs.values()))))
        got = self._native.fit(xs, ys, max(n, 1), 1, False, None, 0, 1)
        logs = _callbacks._loss_first({k: v[0] for k, v in got.items()})
        return logs if return_dict else list(logs.values())

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        self._check_compiled("test_on_batch")
        xs = self._inputs(x, "test_on_batch")
        ys = self._targets(y, "test_on_batch")
        if not self._metric_names:
            loss = self._native.test_on_batch(xs, ys)
            return {"loss": loss} if return_dict else loss
        n = len(np.asarray(next(iter(xs.values()))))
        logs = _callbacks._loss_first(self._native.evaluate(xs, ys, max(n, 1)))
        return logs if return_dict else list(logs.values())

    # --- weights ---------------------------------------------------------------

    @property
    def weights(self):
        return list(self._built().weight_paths())

    def get_weights(self):
        """Every weight as a NumPy array, in Keras's order (per layer: kernel, then bias)."""
        native = self._built()
        return [native.get_weight(p) for p in native.weight_paths()]

    def set_weights(self, weights):
        """Sets every weight from NumPy arrays in get_weights()'s order and shapes."""
        native = self._built()
        paths = native.weight_paths()
        weights = list(weights)
        if len(weights) != len(paths):
            raise ValueError(f"set_weights: the model has {len(paths)} weights, got "
                             f"{len(weights)} arrays")
        for path, w in zip(paths, weights):
            w = np.asarray(w)
            want = tuple(native.weight_shape(path))
            if w.shape != want:
                raise ValueError(f"set_weights: weight '{path}' has shape {want}, the array "
                                 f"given {w.shape}")
        for path, w in zip(paths, weights):
            native.set_weight(path, w)

    # --- files ---------------------------------------------------------------

    def save(self, filepath, overwrite=True, zipped=None, **kwargs):
        """Keras's save: a ``.keras`` zip (or a legacy ``.h5``) of the
        architecture, the compile config and the current weights."""
        from . import saving

        saving.save_model(self, filepath, overwrite=overwrite, zipped=zipped, **kwargs)

    def save_weights(self, filepath, overwrite=True):
        """Keras 3's save_weights: the weights alone, as a ``.weights.h5`` file."""
        from . import saving

        saving.save_weights(self, filepath, overwrite=overwrite)

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        """Keras 3's load_weights from a ``.weights.h5`` (or a whole ``.keras``) file."""
        from . import saving

        saving.load_weights(self, filepath, skip_mismatch=skip_mismatch, **kwargs)

    def count_params(self):
        return self._built().count_params()

    def summary(self, print_fn=None, **kwargs):
        text = self._built().summary()
        (print_fn or print)(text.rstrip("\n"))

    def build(self, input_shape):
        self._build_from(np.zeros((1,) + tuple(input_shape)[1:], dtype=np.float32))
        self._built()


class Sequential(Model):
    """keras.Sequential(layers, name): a stack of layers on one input."""

    def __init__(self, layers=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._name = name or "sequential"
        self._input = None
        self._layers = []
        for layer in layers or []:
            self.add(layer)

    def add(self, layer):
        if self._native is not None:
            raise ValueError("Sequential.add after the model was built is not supported")
        if isinstance(layer, KerasTensor):
            self._input = layer
            return
        if isinstance(layer, InputLayer):
            self._input = layer.output
            return
        if self._input is None and not self._layers and getattr(layer, "_input_shape", None):
            self._input = Input(layer._input_shape)
        self._layers.append(layer)
        self._build_when_ready()

    @property
    def layers(self):
        return list(self._layers)

    def _build_when_ready(self):
        if self._input is None or self._native is not None:
            return
        # A Sequential's model is made when it is first used, so that layers
        # listed after the input are all in it.

    def _build_from(self, x):
        if self._native is not None:
            return
        if self._input is None:
            if x is None:
                return
            if isinstance(x, dict):
                x = next(iter(x.values()))
            x = _as_list(x)[0]
            x = np.asarray(x)
            dtype = "int32" if x.dtype.kind in "iub" else "float32"
            self._input = Input(x.shape[1:], dtype=dtype)
        self._native = _native.Model.sequential(self._input._native,
                                                [l._native for l in self._layers], self._name)
        self._after_build()

    def _built(self, x=None):
        if self._native is None:
            self._build_from(x)
        if self._native is None:
            raise ValueError(f"model '{self._name}' is not built yet: start it with keras.Input "
                             "(or call fit/predict/build first)")
        return self._native
