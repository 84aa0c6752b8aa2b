"""Custom layers: subclasses of keras.layers.Layer with build, add_weight and
call, traced into the engine's one step graph.

A custom layer is one engine layer (autoshard._native.PyLayer) whose call
runs the Python ``call`` while the engine traces the step: its inputs are
TracedTensors, keras.ops turns what it does into graph primitives, and the
stock layers it calls trace their own ops under its name scope. ``build``
runs at the first trace, when the input shapes are known (the batch
dimension given as None, as in Keras); the weights it adds are declared
again in every trace under the layer's scope, so their paths are
``<layer>.<weight>`` (``<layer>.<sublayer>.kernel`` for sublayers), the
engine's form of Keras 3's ``<layer>/<weight>``, and they are saved,
loaded, planned and sharded like a stock layer's.

LayerAPI holds what Keras's Layer offers a subclass; keras.layers.Layer
inherits it.
"""

import inspect
import re

import numpy as np

from .. import _native
from ._traced import TracedTensor, Variable, current_trace, declare, tracing
from .tensors import KerasTensor


def snake_case(name):
    """Keras's to_snake_case (keras/src/utils/naming.py), for default names."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def initializer_spec(value, what):
    """The engine initializer for add_weight from a Keras initializer (a
    name, a config, a number or a keras.initializers object)."""
    from . import initializers
    try:
        return initializers.get(value).native()
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


def tracked_layers(obj):
    """The layers held in ``obj``'s attributes (and lists, tuples and dicts
    of them), in assignment order: Keras's tracked sublayers."""
    from .layers import Layer
    out = []
    for value in vars(obj).values():
        items = value.values() if isinstance(value, dict) else \
            value if isinstance(value, (list, tuple)) else [value]
        out += [v for v in items if isinstance(v, Layer) and v is not obj]
    return out


def _native_value(out, layer_name):
    if isinstance(out, TracedTensor):
        return out._value
    if isinstance(out, Variable):
        return out.value()._value
    if isinstance(out, (list, tuple, dict)):
        raise ValueError(f"layer '{layer_name}': call returned a {type(out).__name__}; a custom "
                         "layer here returns one tensor (split it into several layers)")
    from . import ops
    return ops.convert_to_tensor(out)._value


def _mask_of(trace, value):
    """The Keras mask of a traced value, as a TracedTensor (f32: 1 where a
    step counts), or None."""
    mask = trace.mask(value)
    return None if mask is None else TracedTensor(mask)


def _input_shape(x):
    if isinstance(x, list):
        return [_input_shape(t) for t in x]
    return (None,) + tuple(x.shape[1:])


class LayerAPI:
    """What keras.layers.Layer offers a subclass (build, add_weight, call,
    get_config, weights, ...); stock layers are engine layers and ignore it."""

    def _start_custom(self, name=None, trainable=True, dtype=None, **kwargs):
        kwargs.pop("input_shape", None)
        kwargs.pop("autocast", None)
        if kwargs:
            raise ValueError(f"{type(self).__name__}: unsupported Layer argument(s) "
                             f"{', '.join(sorted(kwargs))}")
        if trainable is not True:
            raise ValueError(f"{type(self).__name__}: trainable=False is not supported for "
                             "custom layers")
        if isinstance(dtype, dict) and (dtype.get("config") or {}).get("name") == "float32":
            dtype = "float32"  # Keras 3's serialized DTypePolicy (a file's config)
        if dtype not in (None, "float32"):
            raise ValueError(f"{type(self).__name__}: only float32 layers are supported")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}: name must be a string, got {name!r}")
        self.built = False
        self._variables = []
        self._takes_list = False
        self._pending_kwargs = {}
        self.trainable = True
        self._input_shape = None
        name = name or _native.default_layer_name(snake_case(type(self).__name__))
        self._native = _native.PyLayer(name, self._trace_call)

    # --- what subclasses override -------------------------------------------------

    def build(self, input_shape):
        """Creates the layer's weights for inputs of ``input_shape``."""

    def call(self, inputs, *args, **kwargs):
        raise NotImplementedError(f"layer '{self.name}' ({type(self).__name__}) defines no "
                                  "call(inputs)")

    def compute_output_shape(self, input_shape):
        raise NotImplementedError(f"{type(self).__name__}.compute_output_shape is not defined")

    def compute_mask(self, inputs, previous_mask):
        """Keras's default: the input's mask passes on (used only where the
        layer supports masking)."""
        return previous_mask

    @property
    def supports_masking(self):
        """Keras's rule (keras/src/layers/layer.py, Layer.__init__): a layer
        supports masking when it defines compute_mask, or says so."""
        said = self.__dict__.get("_supports_masking")
        if said is not None:
            return said
        return type(self).compute_mask is not LayerAPI.compute_mask

    @supports_masking.setter
    def supports_masking(self, value):
        self.__dict__["_supports_masking"] = bool(value)

    def get_config(self):
        """Keras's base config: name, trainable and dtype."""
        return {"name": self.name, "trainable": True, "dtype": "float32"}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def add_loss(self, loss):
        """Keras's add_loss, called in ``call``: the sum of ``loss``'s
        elements is added to the training and evaluation loss
        (keras/src/trainers/trainer.py, _aggregate_additional_loss sums each
        term), on every mesh as the penalties of regularizers are."""
        trace = current_trace()
        if trace is None:
            raise ValueError(f"layer '{self.name}': add_loss is supported inside call(), on "
                             "tensors computed there (from the inputs or the weights)")
        from . import ops
        trace.add_loss(ops.sum(ops.convert_to_tensor(loss))._value)

    def add_metric(self, *args, **kwargs):
        raise ValueError(f"layer '{self.name}': add_metric is not supported; give metrics to "
                         "compile()")

    # --- weights ----------------------------------------------------------------

    def add_weight(self, shape=None, initializer=None, dtype=None, trainable=True,
                   autocast=True, regularizer=None, constraint=None, aggregation="none",
                   overwrite_with_gradient=False, name=None, **kwargs):
        """Keras 3's add_weight: a Variable of this layer, made in ``build``
        (or ``__init__``) and read in ``call``."""
        where = f"layer '{self.name}': add_weight"
        if regularizer is not None or constraint is not None:
            raise ValueError(f"{where}: regularizer and constraint are not supported")
        if dtype not in (None, "float32", np.float32):
            raise ValueError(f"{where}: only float32 weights are supported, got dtype {dtype}")
        if kwargs:
            raise ValueError(f"{where}: unsupported argument(s) {', '.join(sorted(kwargs))}")
        shape = () if shape is None else tuple(shape)
        if any(d is None or int(d) < 0 for d in shape):
            raise ValueError(f"{where}: every dimension of shape must be known, got {shape}")
        # Float weights start glorot_uniform unless told otherwise, and the
        # shape defaults to a scalar (keras/src/layers/layer.py, Layer.add_weight).
        spec = initializer_spec("glorot_uniform" if initializer is None else initializer, where)
        taken = {v.name for v in self._variables}
        base = name or "variable"
        unique = base if base not in taken else next(
            f"{base}_{i}" for i in range(1, len(taken) + 2) if f"{base}_{i}" not in taken)
        var = Variable(self, unique, shape, spec, trainable)
        self._variables.append(var)
        return var

    add_variable = add_weight

    @property
    def weights(self):
        """This layer's variables, then its custom sublayers' (Keras's order)."""
        model = getattr(self, "_model", None)
        if not getattr(self, "built", True) and model is not None:
            model._built().weight_paths()  # build runs at the model's first trace
        out = list(getattr(self, "_variables", []))
        for layer in tracked_layers(self):
            out += [v for v in getattr(layer, "weights", []) if v not in out]
        return out

    @property
    def trainable_weights(self):
        return [v for v in self.weights if v.trainable]

    @property
    def non_trainable_weights(self):
        return [v for v in self.weights if not v.trainable]

    @property
    def variables(self):
        return self.weights

    def get_weights(self):
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights):
        weights = list(weights)
        if len(weights) != len(self.weights):
            raise ValueError(f"layer '{self.name}': set_weights got {len(weights)} arrays for "
                             f"{len(self.weights)} weights")
        for v, w in zip(self.weights, weights):
            v.assign(w)

    # --- tracing ------------------------------------------------------------------

    def _trace_call(self, trace, values):
        """The engine's call of this layer in a trace (PyLayer): runs build
        once, declares the weights, runs ``call`` on TracedTensors."""
        with tracing(trace):
            inputs = [TracedTensor(v) for v in values]
            several = self._takes_list or len(inputs) > 1
            x = inputs if several else inputs[0]
            masks = [_mask_of(trace, v) for v in values]
            input_mask = masks if several else masks[0]
            if not self.built:
                self._input_shape = _input_shape(x)
                self.build(self._input_shape)
                self.built = True
            for var in self._variables:
                declare(var, trace.weight(var.name, list(var.shape), var._initializer,
                                          trainable=var.trainable))
                var._engine_path = trace.path(var.name)
            kwargs, self._pending_kwargs = self._pending_kwargs, {}
            params = inspect.signature(self.call).parameters
            if "training" in params:
                kwargs.setdefault("training", trace.training)
            # Keras's Layer.__call__ (keras/src/layers/layer.py, "Populate
            # mask argument"): a call that takes `mask` gets the input's
            # (a list input: theirs), and that is the previous mask.
            if "mask" in params and kwargs.get("mask") is None:
                kwargs["mask"] = input_mask
            previous = kwargs["mask"] if kwargs.get("mask") is not None else input_mask
            out = _native_value(self.call(x, **kwargs), self.name)
            self._set_output_mask(trace, x, out, previous)
            return out

    def _set_output_mask(self, trace, inputs, out, previous):
        """Keras's _set_mask_metadata: a layer that supports masking gives
        its output compute_mask(inputs, previous_mask) unless the output has
        a mask already (a sublayer's); one that does not drops the mask."""
        if not self.supports_masking or trace.mask(out) is not None:
            return
        mask = self.compute_mask(inputs, previous)
        if isinstance(mask, (list, tuple)):  # one output: the first (Keras zips them)
            mask = mask[0] if mask else None
        if mask is None:
            return
        from . import ops
        mask = ops.convert_to_tensor(mask)
        shape, lead = tuple(mask.shape), tuple(out.shape)[:len(mask.shape)]
        if mask.dtype != "float32" or not shape or shape != lead:
            raise ValueError(f"layer '{self.name}': compute_mask must return a boolean mask of "
                             f"the output's leading dimensions {tuple(out.shape)[:2]} (or "
                             f"None), got {mask.dtype} {shape}")
        # A mask is boolean in Keras: it takes no gradient.
        trace.set_mask(out, ops.stop_gradient(ops.not_equal(mask, 0.0))._value)

    def _call_traced(self, inputs, kwargs):
        """This layer called inside another custom layer's call."""
        trace = current_trace()
        items = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        from . import ops
        values = [ops.convert_to_tensor(t)._value for t in items]
        if isinstance(getattr(self, "_variables", None), list):  # a custom layer
            self._takes_list = isinstance(inputs, (list, tuple))
            self._pending_kwargs = dict(kwargs)
        elif set(kwargs) - {"training", "mask"}:
            raise ValueError(f"layer '{self.name}' takes its inputs (and training) only, got "
                             f"{', '.join(sorted(kwargs))}")
        return TracedTensor(_native.call_layer(self._native, trace, values))


def any_traced(inputs):
    items = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    return any(isinstance(t, (TracedTensor, Variable)) for t in items)


def any_symbolic(inputs):
    items = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    return any(isinstance(t, KerasTensor) for t in items)


def keras_config(layer):
    """A custom layer's entry in a Keras 3 architecture: its class, module
    and get_config(), under the name Keras registers it by (the class's
    ``package>name`` where register_keras_serializable registered it,
    else the class name, as Keras's get_registered_name)."""
    cls = type(layer)
    config = layer.get_config()
    if not isinstance(config, dict):
        raise ValueError(f"save: {cls.__name__}.get_config() must return a dict, got "
                         f"{type(config).__name__}")
    if getattr(cls, "_keras_builtin", False):  # Keras's own classes written in Python here
        return {"module": "keras.layers", "class_name": cls.__name__, "config": config,
                "registered_name": None}
    return {"module": cls.__module__, "class_name": cls.__name__, "config": config,
            "registered_name": cls.__dict__.get("_registered_name") or cls.__name__}
