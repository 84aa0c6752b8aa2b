"""Subclassed models: keras.Model subclasses with layers made in __init__
and a ``call(inputs)``.

Such a model is built at its first fit/evaluate/predict/build (as Keras
builds it on its first data): one keras.Input per array of x, of the
array's shape and dtype, and a functional model of one custom layer,
named after the model, whose call is the model's ``call`` (so its weights
are ``<model>.<layer>.<weight>``, Keras 3's ``<model>/<layer>/<weight>``).
Everything after that is a functional model's.
"""

import inspect

import numpy as np

from .. import _native
from ._custom_layers import snake_case, tracked_layers
from .layers import Layer
from .tensors import Input


class _ModelCall(Layer):
    """The custom layer whose call is a subclassed model's call."""

    def __init__(self, model, name):
        super().__init__(name=name)
        self._model_ref = model

    def call(self, inputs, training=None):
        model = self._model_ref
        if not hasattr(model, "_call_layer"):  # a Sequential: its layers in turn
            for layer in model._layers:
                inputs = layer(inputs, training=training)
            return inputs
        call = model.call
        if "training" in inspect.signature(call).parameters:
            return call(inputs, training=training)
        return call(inputs)


def start(model, name):
    """The state of a subclassed model before it is built."""
    cls = type(model)
    for method in ("train_step", "test_step", "predict_step"):
        if hasattr(cls, method):  # keras.Model here defines none of them
            raise ValueError(
                f"{cls.__name__} overrides {method}: autoshard traces the model's call into one "
                "training step (forward, loss, gradients, update) that it shards and cannot run "
                f"a Python {method}; remove it and give the loss and metrics to compile() (a "
                "custom loss is a function (y_true, y_pred) of keras.ops)")
    model._name = name or _native.default_layer_name(snake_case(cls.__name__))
    model._call_layer = None


def build_from_specs(model, specs):
    """Builds ``model`` for inputs of ``specs``: (shape without the batch
    dimension, dtype) per model input."""
    count = len(specs)
    inputs = [Input(tuple(shape), dtype=dtype, name=None if count == 1 else f"input_{i}")
              for i, (shape, dtype) in enumerate(specs)]
    layer = _ModelCall(model, model._name)
    output = layer(inputs if len(inputs) > 1 else inputs[0])
    model._call_layer = layer
    model._input_tensors, model._output_tensors = inputs, [output]
    model._outputs_are_list = False
    model._native = _native.Model.functional([t._native for t in inputs], [output._native],
                                             model._name)
    model._after_build()


def build_from_arrays(model, arrays):
    """Builds ``model`` for inputs like ``arrays`` (one per model input)."""
    build_from_specs(model, [(a.shape[1:], "int32" if a.dtype.kind in "iub" else "float32")
                             for a in arrays])


def build_config(model):
    """Keras 3's build_config of a built subclassed model (``input_shape``,
    batch first), with each input's dtype beside it: what load_model builds
    the rebuilt model for before reading its weights."""
    shapes = [[None] + list(t.shape[1:]) for t in model._input_tensors]
    dtypes = [{"f32": "float32", "i32": "int32"}.get(t.dtype, t.dtype)
              for t in model._input_tensors]
    one = len(shapes) == 1
    return {"input_shape": shapes[0] if one else shapes, "input_dtype": dtypes[0] if one else dtypes}


def build_from_config(model, config, what):
    """Builds a subclassed model from build_config()'s dict."""
    shapes, dtypes = config.get("input_shape"), config.get("input_dtype")
    if not isinstance(shapes, list) or not shapes:
        raise ValueError(f"{what}: the file holds no input shapes for model '{model.name}' "
                         "(build_config): build the model (model.build) and use load_weights")
    if not isinstance(shapes[0], list):
        shapes, dtypes = [shapes], [dtypes]
    dtypes = dtypes if isinstance(dtypes, list) and len(dtypes) == len(shapes) else \
        ["float32"] * len(shapes)
    build_from_specs(model, [(s[1:], d or "float32") for s, d in zip(shapes, dtypes)])


def from_config(cls, config):
    """A subclassed model from its config: ``cls(**config)``, as Keras's
    Model.from_config revives a class that is not functional."""
    config = {k: v for k, v in config.items() if k not in ("trainable", "dtype")}
    try:
        return cls(**config)
    except TypeError as e:
        raise TypeError(f"Unable to revive model {cls.__name__} from its config {config}: {e} "
                        "(define get_config() returning its __init__ arguments, or "
                        "from_config)") from None


def build_from_data(model, x, what, arrays_of):
    if x is None:
        return
    if isinstance(x, dict):
        raise ValueError(f"{what}: a subclassed model takes x as an array or a list of arrays, "
                         "not a dict")
    xs = list(x) if isinstance(x, (list, tuple)) and x and all(hasattr(v, "shape") for v in x) \
        else [x]
    arrays = [arrays_of({"x": v}, "x", what)["x"] for v in xs]
    build_from_arrays(model, arrays)


def build_from_shape(model, shape):
    if shape is not None:
        build_from_arrays(model, [np.zeros((1,) + tuple(shape), np.float32)])


def layers_of(model):
    """The layers a subclassed model holds (its attributes), nested
    custom layers' own sublayers after each."""
    out = []
    for layer in tracked_layers(model):
        if isinstance(layer, _ModelCall):
            continue
        out.append(layer)
        if isinstance(getattr(layer, "_variables", None), list):
            out += [sub for sub in layers_of(layer) if sub not in out]
    return out


def call_in_trace(model, inputs, kwargs):
    """A Sequential or subclassed model called inside a custom layer's call:
    traced as a layer named after the model (its weights under its scope)."""
    layer = model.__dict__.get("_as_layer")
    if layer is None:
        layer = model.__dict__["_as_layer"] = _ModelCall(model, model.name)
    return layer(inputs, **kwargs)


def attach(model):
    """Lets the layers of a built ``model`` read and set their weights
    (layer.get_weights, variable.numpy) through it, and tells the layers
    that set weights once built (an adapted Normalization) through
    ``_attached``."""
    from ._custom_saving import _top_layers
    stack = list(layers_of(model)) if hasattr(model, "_call_layer") else _top_layers(model)
    seen = set()
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if not isinstance(getattr(layer, "_variables", None), list):  # a stock layer
            layer._model = model
            if hasattr(layer, "_attached"):
                layer._attached()
            continue
        layer._model = model
        if hasattr(layer, "_attached"):  # preprocessing layers set their statistics now
            layer._attached()
        stack.extend(tracked_layers(layer))
