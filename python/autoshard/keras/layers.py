"""keras.layers: Keras 3's layer classes, each one of the C++ API's layers.

A layer is made when constructed (so its name, "dense", "dense_1", ..., is
fixed then, as in Keras) and called on KerasTensors (keras.Input's results)
to build functional models, or listed in a Sequential.
"""

import json
from typing import NamedTuple

from .. import _checks, _native
from . import _custom_layers, _functional
from . import activations as _activations
from . import initializers as _initializers
from . import utils as _utils
from .tensors import Input, InputLayer, KerasTensor

__all__ = [
    "Layer", "InputLayer", "Input", "Dense", "Embedding", "Conv1D", "Conv2D", "DepthwiseConv2D",
    "SeparableConv2D", "Conv2DTranspose", "MaxPooling1D", "MaxPooling2D", "AveragePooling1D",
    "AveragePooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
    "GlobalMaxPooling2D", "Flatten", "Reshape", "Permute", "RepeatVector", "Rescaling", "Dropout",
    "Activation", "ReLU", "Softmax", "LayerNormalization", "BatchNormalization",
    "GroupNormalization", "MultiHeadAttention", "LSTM", "GRU", "SimpleRNN", "Bidirectional",
    "ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D", "Masking", "Add", "Subtract",
    "Multiply", "Average", "Maximum", "Minimum", "Concatenate", "Dot", "add", "subtract",
    "multiply", "average", "maximum", "minimum", "concatenate", "dot",
]


def _initializer(value):
    """The engine initializer of a layer argument (a name, a config or a
    keras.initializers object; None: zeros)."""
    return _initializers.native(value)


def _ints(value, rank, what, layer="layer", minimum=1):
    if not isinstance(value, (tuple, list)):
        return [_checks.integer(value, what, layer, minimum)] * rank
    if len(value) != rank:
        raise ValueError(f"{layer}: {what} must be an integer or {rank} integers, got "
                         f"{_checks.shown(tuple(value))}")
    return [_checks.integer(v, f"{what}[{i}]", layer, minimum) for i, v in enumerate(value)]


def _int(value, what, layer, minimum=1):
    return _checks.integer(value, what, layer, minimum)


def _seed(value, layer):
    return _checks.integer(value or 0, "seed", layer, 0, 2**64 - 1)


def _rate(value, what, layer):
    return _checks.number(value, what, layer, minimum=0, below=1)


_name = _checks.name


class Layer(_custom_layers.LayerAPI):
    """A layer of the engine. Calling it on KerasTensors records a functional
    call. A user's subclass (build, add_weight, call) is a custom layer
    traced into the step graph (keras/_custom_layers.py)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _utils.record_init_args(cls)  # model.save writes them as the layer's Keras config

    def __init__(self, native=None, input_shape=None, **kwargs):
        if isinstance(native, _Built):
            native, self._table_config = native
        if not isinstance(native, _native.Layer):  # Layer.__init__(self, **kwargs) of a subclass
            self._start_custom(**({"name": native} if native is not None else {}), **kwargs)
            return
        self._native = native
        # Keras 2's input_shape on a Sequential's first layer still works.
        self._input_shape = tuple(input_shape) if input_shape is not None else None

    @property
    def name(self):
        return self._native.name

    @property
    def weights(self):
        """Keras's layer.weights: a stock layer's Variables (kernel, then
        bias, ...), read and written through the built model holding it;
        none before it is in one. A custom layer's are its own (LayerAPI)."""
        if isinstance(getattr(self, "_variables", None), list):
            return _custom_layers.LayerAPI.weights.fget(self)
        model = getattr(self, "_model", None)
        if model is None:
            return []
        try:
            variables = model.weights  # builds a Sequential that has its input
        except ValueError:  # one that does not yet: no weights, as Keras's unbuilt layer
            return []
        return [v for v in variables if self.name in v._key.split(".")[:-1]]

    # Keras's trainable (a constructor argument of every layer, or set
    # later): a frozen layer's weights take no gradient, no optimizer state
    # and no all-reduce. Read by the model at compile (Keras 3: a change
    # after compile needs a recompile).
    @property
    def trainable(self):
        if "_trainable" in self.__dict__:
            return self._trainable
        return bool(getattr(self, "_init_args", {}).get("trainable", True))

    @trainable.setter
    def trainable(self, value):
        self._trainable = bool(value)  # as Keras's Layer.trainable setter

    def __call__(self, inputs, *args, **kwargs):
        if self.__dict__.get("_file_handle"):  # a call would build fresh weights
            raise ValueError(_functional._FILE_MODEL_CALL.format(f"layer '{self.name}'"))
        if _custom_layers.any_traced(inputs):  # inside a custom layer's call
            if len(args) == 1 and (args[0] is None or isinstance(args[0], bool)):
                kwargs["training"], args = args[0], ()  # layer(x, training)
            if args:
                raise ValueError(f"layer '{self.name}': give arguments after the inputs by "
                                 "name (training=...)")
            return self._call_traced(inputs, kwargs)
        if isinstance(getattr(self, "_variables", None), list):  # a custom layer
            kwargs.pop("training", None)
            self._takes_list = isinstance(inputs, (list, tuple))
        if args or kwargs:
            raise ValueError(f"layer '{self.name}' takes its inputs only (got more arguments)")
        return self._record(inputs)

    def _record(self, inputs, states=()):
        """The call on KerasTensors, recorded on its result (keras_history,
        for model.save); ``states``: a recurrent layer's initial_state. A
        layer of several outputs (return_state) gives a list."""
        many = isinstance(inputs, (list, tuple))
        args = (list(inputs) if many else [inputs]) + list(states)
        natives = [_symbolic(t, self.name) for t in args]
        history = (self, args if many or states else inputs)
        if self._native.output_count == 1:
            out = self._native(natives if len(natives) > 1 or many else natives[0])
            made = [KerasTensor(out, history=history)]
        else:
            outs = self._native.outputs(natives)
            made = [KerasTensor(outs[0], history=history)]
            made += [KerasTensor(o, first=made[0], index=k) for k, o in enumerate(outs) if k]
        if states:
            made[0]._state_args = len(states)
        return made if len(made) > 1 else made[0]

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}>"

    @property
    def output(self):
        """The result of the layer's first call (Keras 3's node 0)."""
        return _functional.layer_output(self, "output")

    @property
    def input(self):
        """The argument of the layer's first call."""
        return _functional.layer_output(self, "input")


class OpLayer(Layer):
    """A keras.ops call on keras.Input results in a functional model: a
    layer that runs the op on its inputs when the model is traced."""

    def __init__(self, op, args, kwargs):
        super().__init__(name=_native.default_layer_name(op.__name__))
        self._op, self._args, self._kwargs = op, args, kwargs
        self._symbols = [a for a in _flatten((args, kwargs)) if isinstance(a, KerasTensor)]
        self._result = self(self._symbols)

    @property
    def output(self):
        return self._result

    def call(self, inputs):
        swap = {id(k): v for k, v in zip(self._symbols, inputs)}
        put = lambda a: swap.get(id(a), a) if not isinstance(a, (list, tuple, dict)) else (  # noqa: E731
            type(a)(put(v) for v in a) if not isinstance(a, dict) else
            {k: put(v) for k, v in a.items()})
        return self._op(*put(list(self._args)), **put(self._kwargs))

    def get_config(self):
        raise ValueError(f"layer '{self.name}' (keras.ops.{self._op.__name__} on a model's "
                         "tensors) cannot be saved as a Keras config: wrap the op in a custom "
                         "layer with get_config")


def _flatten(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _flatten(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def _symbolic(t, layer):
    if not isinstance(t, KerasTensor):
        raise ValueError(f"layer '{layer}' is called on {type(t).__name__}; call layers on "
                         "keras.Input(...) results to build a model (eager calls on arrays are "
                         "not supported)")
    return t._native


class _Built(NamedTuple):
    """A layer the Keras layer table built, with the Keras 3 config it was
    built from: the one mapping of a Keras class to a layer, and what
    model.save writes for it (_model_files.layer_config)."""

    native: object
    config: dict


def _from_table(class_name, config, seed=0):
    """The engine's layer of Keras class ``class_name`` from its Keras 3
    config (checked here first, as each class's arguments), built by the
    Keras layer table the file readers use (autoshard/io/keras_layer.h)."""
    return _Built(_native.keras_layer(class_name, json.dumps(config), seed), config)


def _init(value, default):
    """A layer's initializer argument as the Keras config the table reads."""
    return _initializers.table_config(value, default)


class Dense(Layer):
    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", name=None, input_shape=None, **kwargs):
        extra = _keras_fields(kwargs, "Dense")
        super().__init__(_from_table("Dense", extra | {
            "name": _name(name, "Dense"), "units": _int(units, "units", "Dense"),
            "activation": _activations.name_of(activation) or "linear",
            "use_bias": bool(use_bias),
            "kernel_initializer": _init(kernel_initializer, "zeros"),
            "bias_initializer": _init(bias_initializer, "zeros")}), input_shape)


class Embedding(Layer):
    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", name=None,
                 input_shape=None, mask_zero=False, **kwargs):
        extra = _keras_fields(kwargs, "Embedding")
        init = _init(embeddings_initializer, "zeros")
        # mask_zero: id 0 pads; the layers after it see the mask (docs/layers.md, "Masks").
        super().__init__(_from_table("Embedding", extra | {
            "name": _name(name, "Embedding"),
            "input_dim": _int(input_dim, "input_dim", "Embedding"),
            "output_dim": _int(output_dim, "output_dim", "Embedding"),
            "embeddings_initializer": init, "mask_zero": bool(mask_zero)}), input_shape)


class Masking(Layer):
    """keras.layers.Masking: a step whose features all equal ``mask_value``
    is masked for the layers after it, and zeroed."""

    def __init__(self, mask_value=0.0, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Masking")
        value = _checks.number(mask_value, "mask_value", "Masking")
        super().__init__(_from_table("Masking", {"name": _name(name, "Masking"),
                                                 "mask_value": value}), input_shape)


class _Conv(Layer):
    _rank = 2
    _kind = "Conv2D"

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", name=None,
                 depth_multiplier=1, input_shape=None, **kwargs):
        extra = _keras_fields(kwargs, self._kind)
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{self._kind}: only data_format='channels_last' is supported")
        kind = self._kind
        if not isinstance(padding, str):
            raise TypeError(f"{kind}: padding must be 'valid' or 'same', got "
                            f"{_checks.shown(padding)}")
        # Keras 3's config of each class (keras/src/layers/convolutional/):
        # filters but for DepthwiseConv2D, groups for the plain convolutions,
        # depth_multiplier for the depthwise ones.
        config = {"name": _name(name, kind), "kernel_size": _ints(kernel_size, self._rank,
                                                                   "kernel_size", kind),
                  "strides": _ints(strides, self._rank, "strides", kind), "padding": padding,
                  "dilation_rate": _ints(dilation_rate, self._rank, "dilation_rate", kind),
                  "activation": _activations.name_of(activation) or "linear",
                  "use_bias": bool(use_bias),
                  "kernel_initializer": _init(kernel_initializer, "zeros"),
                  "bias_initializer": _init(bias_initializer, "zeros")}
        groups = _int(groups, "groups", kind)
        multiplier = _int(depth_multiplier, "depth_multiplier", kind)
        if kind != "DepthwiseConv2D":
            config["filters"] = _int(filters, "filters", kind)
        if kind in ("DepthwiseConv2D", "SeparableConv2D"):
            config["depth_multiplier"] = multiplier
            # Keras's classes name their kernels' initializers depthwise_
            # and pointwise_initializer (taken as extra fields).
            if config.pop("kernel_initializer")["class_name"] != "GlorotUniform":
                raise ValueError(f"{kind}: kernel_initializer is not an argument of Keras's "
                                 f"{kind} (depthwise_initializer is)")
        elif multiplier != 1:
            raise ValueError(f"{kind}: depth_multiplier is an argument of DepthwiseConv2D and "
                             "SeparableConv2D only")
        if kind in ("Conv1D", "Conv2D") or groups != 1:
            config["groups"] = groups
        super().__init__(_from_table(kind, extra | config), input_shape)


class Conv1D(_Conv):
    _rank, _kind = 1, "Conv1D"


class Conv2D(_Conv):
    _rank, _kind = 2, "Conv2D"


class Conv3D(_Conv):
    """keras.layers.Conv3D over [batch, depth, rows, cols, channels]
    (keras/src/layers/convolutional/conv3d.py)."""
    _rank, _kind = 3, "Conv3D"


class Conv2DTranspose(_Conv):
    _rank, _kind = 2, "Conv2DTranspose"


class SeparableConv2D(_Conv):
    _rank, _kind = 2, "SeparableConv2D"


class DepthwiseConv2D(_Conv):
    _rank, _kind = 2, "DepthwiseConv2D"

    def __init__(self, kernel_size, strides=1, padding="valid", depth_multiplier=1, **kwargs):
        super().__init__(0, kernel_size, strides=strides, padding=padding,
                         depth_multiplier=depth_multiplier, **kwargs)


class _Pool(Layer):
    _rank = 2
    _kind = "MaxPooling2D"

    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None, name=None,
                 input_shape=None, **kwargs):
        _no_extra(kwargs, self._kind)
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{self._kind}: only data_format='channels_last' is supported")
        kind = self._kind
        if not isinstance(padding, str):
            raise TypeError(f"{kind}: padding must be 'valid' or 'same', got "
                            f"{_checks.shown(padding)}")
        config = {"name": _name(name, kind),
                  "pool_size": _ints(pool_size, self._rank, "pool_size", kind), "padding": padding}
        if strides is not None:  # None: the pool size, as Keras
            config["strides"] = _ints(strides, self._rank, "strides", kind)
        super().__init__(_from_table(kind, config), input_shape)


class MaxPooling1D(_Pool):
    _rank, _kind = 1, "MaxPooling1D"


class MaxPooling2D(_Pool):
    _rank, _kind = 2, "MaxPooling2D"


class AveragePooling1D(_Pool):
    _rank, _kind = 1, "AveragePooling1D"


class AveragePooling2D(_Pool):
    _rank, _kind = 2, "AveragePooling2D"


class MaxPooling3D(_Pool):
    _rank, _kind = 3, "MaxPooling3D"


class AveragePooling3D(_Pool):
    _rank, _kind = 3, "AveragePooling3D"


class _GlobalPool(Layer):
    _kind = ""

    def __init__(self, data_format=None, keepdims=False, name=None, **kwargs):
        _no_extra(kwargs, self._kind)
        _channels_last(data_format, self._kind)
        super().__init__(_from_table(self._kind, {"name": _name(name, self._kind),
                                                  "keepdims": bool(keepdims)}))


class GlobalAveragePooling1D(_GlobalPool):
    _kind = "GlobalAveragePooling1D"


class GlobalAveragePooling2D(_GlobalPool):
    _kind = "GlobalAveragePooling2D"


class GlobalMaxPooling1D(_GlobalPool):
    _kind = "GlobalMaxPooling1D"


class GlobalMaxPooling2D(_GlobalPool):
    _kind = "GlobalMaxPooling2D"


class GlobalAveragePooling3D(_GlobalPool):
    _kind = "GlobalAveragePooling3D"


class GlobalMaxPooling3D(_GlobalPool):
    _kind = "GlobalMaxPooling3D"


class Flatten(Layer):
    def __init__(self, data_format=None, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Flatten")
        super().__init__(_from_table("Flatten", {"name": _name(name, "Flatten")}), input_shape)


class Reshape(Layer):
    def __init__(self, target_shape, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Reshape")
        if not isinstance(target_shape, (tuple, list)):
            raise TypeError(f"Reshape: target_shape must be a tuple of integers, got "
                            f"{_checks.shown(target_shape)}")
        # -1 is Keras's dimension inferred from the others.
        target = [_checks.integer(d, f"target_shape[{i}]", "Reshape", -1)
                  for i, d in enumerate(target_shape)]
        super().__init__(_from_table("Reshape", {"name": _name(name, "Reshape"),
                                                 "target_shape": target}), input_shape)


class Permute(Layer):
    def __init__(self, dims, name=None, **kwargs):
        _no_extra(kwargs, "Permute")
        super().__init__(_from_table("Permute", {"name": _name(name, "Permute"),
                                                 "dims": list(_checks.shape(dims, "dims",
                                                                            "Permute"))}))


class RepeatVector(Layer):
    def __init__(self, n, name=None, **kwargs):
        _no_extra(kwargs, "RepeatVector")
        super().__init__(_from_table("RepeatVector", {"name": _name(name, "RepeatVector"),
                                                      "n": _int(n, "n", "RepeatVector")}))


class Rescaling(Layer):
    def __init__(self, scale, offset=0.0, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Rescaling")
        super().__init__(_from_table("Rescaling", {
            "name": _name(name, "Rescaling"), "scale": _checks.number(scale, "scale", "Rescaling"),
            "offset": _checks.number(offset, "offset", "Rescaling")}), input_shape)


class Dropout(Layer):
    def __init__(self, rate, noise_shape=None, seed=None, name=None, **kwargs):
        _no_extra(kwargs, "Dropout")
        if noise_shape is not None:
            raise ValueError("Dropout: noise_shape is not supported")
        super().__init__(_from_table("Dropout", {"name": _name(name, "Dropout"),
                                                 "rate": _rate(rate, "rate", "Dropout")},
                                     _seed(seed, "Dropout")))


class Activation(Layer):
    def __init__(self, activation, name=None, **kwargs):
        _no_extra(kwargs, "Activation")
        super().__init__(_from_table("Activation", {
            "name": _name(name, "Activation"),
            "activation": _activations.name_of(activation) or "linear"}))


class ReLU(Activation):
    def __init__(self, name=None, **kwargs):
        _no_extra(kwargs, "ReLU")
        Layer.__init__(self, _from_table("ReLU", {"name": _name(name, "ReLU")}))


class Softmax(Activation):
    def __init__(self, axis=-1, name=None, **kwargs):
        if axis != -1:
            raise ValueError("Softmax: only axis=-1 is supported")
        _no_extra(kwargs, "Softmax")
        Layer.__init__(self, _from_table("Softmax", {"name": _name(name, "Softmax"),
                                                     "axis": -1}))


class LayerNormalization(Layer):
    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, rms_scaling=False,
                 name=None, **kwargs):
        extra = _keras_fields(kwargs, "LayerNormalization")
        if axis not in (-1, [-1], (-1,)):
            raise ValueError("LayerNormalization: only axis=-1 is supported")
        where = "LayerNormalization"
        super().__init__(_from_table(where, extra | {
            "name": _name(name, where), "axis": -1,
            "epsilon": _checks.number(epsilon, "epsilon", where, above=0),
            "center": bool(center), "scale": bool(scale), "rms_scaling": bool(rms_scaling)}))


class BatchNormalization(Layer):
    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True, name=None,
                 **kwargs):
        extra = _keras_fields(kwargs, "BatchNormalization")
        where = "BatchNormalization"
        super().__init__(_from_table(where, extra | {
            "name": _name(name, where),
            "axis": _checks.integer(axis, "axis", where, -2**31, _checks.INT32_MAX),
            "momentum": _checks.number(momentum, "momentum", where, minimum=0, maximum=1),
            "epsilon": _checks.number(epsilon, "epsilon", where, above=0),
            "center": bool(center), "scale": bool(scale)}))


class GroupNormalization(Layer):
    def __init__(self, groups=32, axis=-1, epsilon=1e-3, center=True, scale=True, name=None,
                 **kwargs):
        extra = _keras_fields(kwargs, "GroupNormalization")
        if axis != -1:
            raise ValueError("GroupNormalization: only axis=-1 is supported")
        where = "GroupNormalization"
        super().__init__(_from_table(where, extra | {
            "name": _name(name, where), "groups": _int(groups, "groups", where), "axis": -1,
            "epsilon": _checks.number(epsilon, "epsilon", where, above=0),
            "center": bool(center), "scale": bool(scale)}))


class MultiHeadAttention(Layer):
    """Self-attention when called on one tensor, or ``layer(query, value)``."""

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, name=None,
                 **kwargs):
        extra = _keras_fields(kwargs, "MultiHeadAttention", honoured=("kernel_initializer",))
        where = "MultiHeadAttention"
        config = {"name": _name(name, where), "num_heads": _int(num_heads, "num_heads", where),
                  "key_dim": _int(key_dim, "key_dim", where),
                  "dropout": _rate(dropout, "dropout", where), "use_bias": bool(use_bias)}
        if value_dim is not None:
            config["value_dim"] = _int(value_dim, "value_dim", where)
        super().__init__(_from_table(where, extra | config))

    def __call__(self, query, value=None, key=None, **kwargs):
        if key is not None or kwargs:
            raise ValueError("MultiHeadAttention: only (query) or (query, value) are supported")
        return super().__call__(query if value is None else [query, value])


class _Recurrent(Layer):
    _kind = "LSTM"

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 dropout=0.0, recurrent_dropout=0.0, seed=None, return_sequences=False,
                 return_state=False, go_backwards=False, stateful=False, reset_after=True,
                 name=None, input_shape=None, **kwargs):
        extra = _keras_fields(kwargs, self._kind, honoured=(
            "kernel_initializer", "recurrent_initializer", "bias_initializer"))
        # GRU's reset_after (Keras 3's default, saved in its config so that
        # TF.js and Keras 2 readers, whose default differs, read it right).
        if not reset_after:
            raise ValueError(f"{self._kind}: reset_after=False is not supported from Python "
                             "(files that hold it load)")
        if stateful:
            raise ValueError(f"{self._kind}: stateful=True is not supported (state kept between "
                             "batches); pass the state on with return_state and initial_state")
        kind = self._kind
        config = {"name": _name(name, kind), "units": _int(units, "units", kind),
                  "activation": _activations.name_of(activation) or "linear",
                  "use_bias": bool(use_bias), "dropout": _rate(dropout, "dropout", kind),
                  "recurrent_dropout": _rate(recurrent_dropout, "recurrent_dropout", kind),
                  "return_sequences": bool(return_sequences), "return_state": bool(return_state),
                  "go_backwards": bool(go_backwards), "stateful": False}
        if kind == "GRU":
            config["reset_after"] = True
        if kind != "SimpleRNN":  # SimpleRNN has no gates
            config["recurrent_activation"] = _activations.name_of(recurrent_activation) or "linear"
        super().__init__(_from_table(kind, extra | config, _seed(seed, kind)), input_shape)

    def __call__(self, inputs, initial_state=None, mask=None, training=None, **kwargs):
        return _recurrent_call(self, inputs, initial_state, mask, training, kwargs)


def _recurrent_call(layer, inputs, initial_state, mask, training, kwargs):
    """Keras's RNN call: ``initial_state`` (a tensor or a list: LSTM's [h,
    c]; Bidirectional's forward states, then backward's) starts the
    recurrence; with return_state the result is [output, *states]."""
    if mask is not None:
        raise ValueError(f"layer '{layer.name}': give masks through Embedding(mask_zero=True) "
                         "or a Masking layer, not mask=")
    if kwargs:
        raise ValueError(f"layer '{layer.name}' takes its inputs, initial_state and training "
                         "only")
    if initial_state is None:
        return Layer.__call__(layer, inputs)
    if _custom_layers.any_traced(inputs):
        raise ValueError(f"layer '{layer.name}': initial_state inside a custom layer's call is "
                         "not supported")
    states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
    return layer._record(inputs, states)


class Bidirectional(Layer):
    """keras.layers.Bidirectional: ``layer`` (LSTM, GRU or SimpleRNN) run
    forwards and a backward copy (or ``backward_layer``, whose options may
    differ) run backwards, their outputs merged."""

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, name=None,
                 input_shape=None, **kwargs):
        _no_extra(kwargs, "Bidirectional")
        from . import _model_files  # noqa: PLC0415 (it imports this module)

        for what, inner in (("layer", layer), ("backward_layer", backward_layer)):
            if inner is not None and not isinstance(inner, _Recurrent):
                raise ValueError(f"Bidirectional: {what} must be an LSTM, GRU or SimpleRNN "
                                 f"layer, got {type(inner).__name__}")
        if layer is None:
            raise ValueError("Bidirectional: give the recurrent layer to wrap")
        if weights is not None:
            raise ValueError("Bidirectional: weights= is not supported; use set_weights")
        if merge_mode not in ("concat", "sum", "mul", "ave", None):
            raise ValueError(f"Bidirectional: merge_mode must be 'concat', 'sum', 'mul', 'ave' "
                             f"or None, got {_checks.shown(merge_mode)}")
        config = {"name": _name(name, "Bidirectional"), "merge_mode": merge_mode,
                  "layer": _model_files.layer_config(layer)}
        if backward_layer is not None:
            config["backward_layer"] = _model_files.layer_config(backward_layer)
        super().__init__(_from_table("Bidirectional", config, _seed(None, "Bidirectional")),
                         input_shape)

    def __call__(self, inputs, initial_state=None, mask=None, training=None, **kwargs):
        return _recurrent_call(self, inputs, initial_state, mask, training, kwargs)


class LSTM(_Recurrent):
    _kind = "LSTM"


class GRU(_Recurrent):
    _kind = "GRU"


class SimpleRNN(_Recurrent):
    _kind = "SimpleRNN"


class ConvLSTM2D(Layer):
    """keras.layers.ConvLSTM2D: an LSTM whose input and recurrent transforms
    are 2-D convolutions, over [batch, time, rows, cols, channels]
    (docs/layers.md); dropout and recurrent_dropout as Keras's ConvLSTMCell
    applies them in training. Masks and stateful are refused."""

    _rank = 2

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, activation="tanh", recurrent_activation="sigmoid",
                 use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, dropout=0.0, recurrent_dropout=0.0, seed=None,
                 return_sequences=False, return_state=False, go_backwards=False,
                 stateful=False, name=None, input_shape=None, **kwargs):
        kind = type(self)._kind_name()
        _no_extra(kwargs, kind)
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{kind}: only data_format='channels_last' is supported")
        if stateful:
            raise ValueError(f"{kind}: stateful=True is not supported (state kept between "
                             "batches)")
        if not isinstance(padding, str):
            raise TypeError(f"{kind}: padding must be 'valid' or 'same', got "
                            f"{_checks.shown(padding)}")
        config = {"name": _name(name, kind), "filters": _int(filters, "filters", kind),
                  "kernel_size": _ints(kernel_size, self._rank, "kernel_size", kind),
                  "strides": _ints(strides, self._rank, "strides", kind), "padding": padding,
                  "dilation_rate": _ints(dilation_rate, self._rank, "dilation_rate", kind),
                  "activation": _activations.name_of(activation) or "linear",
                  "recurrent_activation": _activations.name_of(recurrent_activation) or "linear",
                  "use_bias": bool(use_bias), "unit_forget_bias": bool(unit_forget_bias),
                  "kernel_initializer": _init(kernel_initializer, "zeros"),
                  "recurrent_initializer": _init(recurrent_initializer, "zeros"),
                  "bias_initializer": _init(bias_initializer, "zeros"),
                  "dropout": _rate(dropout, "dropout", kind),
                  "recurrent_dropout": _rate(recurrent_dropout, "recurrent_dropout", kind),
                  "return_sequences": bool(return_sequences), "return_state": bool(return_state),
                  "go_backwards": bool(go_backwards), "stateful": False}
        super().__init__(_from_table(kind, config, _seed(seed, kind)), input_shape)

    @classmethod
    def _kind_name(cls):
        return f"ConvLSTM{cls._rank}D"


class ConvLSTM1D(ConvLSTM2D):
    """keras.layers.ConvLSTM1D: ConvLSTM2D's cell with 1-D convolutions, over
    [batch, time, steps, channels]."""

    _rank = 1


class ConvLSTM3D(ConvLSTM2D):
    """keras.layers.ConvLSTM3D: ConvLSTM2D's cell with 3-D convolutions, over
    [batch, time, depth, rows, cols, channels]."""

    _rank = 3


class _Merge(Layer):
    _kind = "Add"

    def __init__(self, name=None, **kwargs):
        _no_extra(kwargs, self._kind)
        super().__init__(_from_table(self._kind, {"name": _name(name, self._kind)}))


class Add(_Merge):
    _kind = "Add"


class Subtract(_Merge):
    _kind = "Subtract"


class Multiply(_Merge):
    _kind = "Multiply"


class Average(_Merge):
    _kind = "Average"


class Maximum(_Merge):
    _kind = "Maximum"


class Minimum(_Merge):
    _kind = "Minimum"


class Concatenate(Layer):
    def __init__(self, axis=-1, name=None, **kwargs):
        _no_extra(kwargs, "Concatenate")
        super().__init__(_from_table("Concatenate", {
            "name": _name(name, "Concatenate"),
            "axis": _checks.integer(axis, "axis", "Concatenate", -2**31, _checks.INT32_MAX)}))


class Dot(Layer):
    """keras.layers.Dot(axes, normalize): dot products of two inputs' examples."""

    def __init__(self, axes, normalize=False, name=None, **kwargs):
        _no_extra(kwargs, "Dot")
        if isinstance(axes, (tuple, list)):
            if len(axes) != 2:
                raise ValueError(f"Dot: axes must be an integer or a pair, got {tuple(axes)}")
            axes = [_checks.integer(a, f"axes[{i}]", "Dot", -64, 64) for i, a in enumerate(axes)]
        else:
            axes = _checks.integer(axes, "axes", "Dot", -64, 64)
        super().__init__(_from_table("Dot", {"name": _name(name, "Dot"), "axes": axes,
                                             "normalize": bool(normalize)}))


# Keras's functional forms of the merge layers (keras/src/layers/merging/):
# a new layer, called on the list of inputs.
def add(inputs, **kwargs):
    return Add(**kwargs)(inputs)


def subtract(inputs, **kwargs):
    return Subtract(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    return Multiply(**kwargs)(inputs)


def average(inputs, **kwargs):
    return Average(**kwargs)(inputs)


def maximum(inputs, **kwargs):
    return Maximum(**kwargs)(inputs)


def minimum(inputs, **kwargs):
    return Minimum(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    return Concatenate(axis=axis, **kwargs)(inputs)


def dot(inputs, axes=-1, normalize=False, **kwargs):
    return Dot(axes=axes, normalize=normalize, **kwargs)(inputs)


# The weights whose Keras <weight>_regularizer and <weight>_constraint each
# layer class takes (every layer takes an activity_regularizer).
_PENALIZED = {
    "Dense": ("kernel", "bias"), "Conv1D": ("kernel", "bias"), "Conv2D": ("kernel", "bias"),
    "Conv3D": ("kernel", "bias"),
    "Conv2DTranspose": ("kernel", "bias"), "DepthwiseConv2D": ("depthwise", "bias"),
    "SeparableConv2D": ("depthwise", "pointwise", "bias"), "Embedding": ("embeddings",),
    "LSTM": ("kernel", "recurrent", "bias"), "GRU": ("kernel", "recurrent", "bias"),
    "SimpleRNN": ("kernel", "recurrent", "bias"), "ConvLSTM2D": ("kernel", "recurrent", "bias"),
    "ConvLSTM1D": ("kernel", "recurrent", "bias"), "ConvLSTM3D": ("kernel", "recurrent", "bias"),
    "LayerNormalization": ("gamma", "beta"),
    "BatchNormalization": ("gamma", "beta"), "GroupNormalization": ("gamma", "beta"),
}


def _check_penalties(kwargs, layer):
    """Checks and takes the regularizer and constraint arguments (kept in
    _init_args; the model applies them at compile, Model._push_penalties)."""
    from . import constraints, regularizers

    for key in [k for k in kwargs if k.endswith(("_regularizer", "_constraint"))]:
        weight, _, kind = key.rpartition("_")
        if not (key == "activity_regularizer" or weight in _PENALIZED.get(layer, ())):
            continue  # an argument this layer does not have: refused below
        try:
            (regularizers if kind == "regularizer" else constraints).get(kwargs.pop(key))
        except ValueError as e:
            raise ValueError(f"{layer}: {key}: {e}") from None


# Keras's default initializers of the weights whose initializer the layer
# table does not honour (it reads them only to check a file): the class
# names Keras 3's layers default to (keras/src/layers/normalization/
# batch_normalization.py and layer_normalization.py, __init__).
_DEFAULT_INITIALIZERS = {"beta_initializer": "Zeros", "gamma_initializer": "Ones",
                         "moving_mean_initializer": "Zeros",
                         "moving_variance_initializer": "Ones", "bias_initializer": "Zeros"}


def _keras_fields(kwargs, layer, honoured=()):
    """The Keras arguments a class does not read itself, in the form of a
    Keras 3 config, for the Keras layer table to judge: it takes every
    field Keras writes (a file's GRU's unroll and initializers, Dense's
    quantization_config) and refuses, naming the field, what it cannot
    honour. An initializer the table does not draw with (not in
    ``honoured``) must be Keras's default. Regularizers, constraints, dtype
    and trainable are taken here as _no_extra takes them."""
    _no_extra_common(kwargs, layer)
    fields = {}
    for key, value in kwargs.items():
        if key.endswith("initializer"):
            value = _init(value, "zeros")
            default = _DEFAULT_INITIALIZERS.get(key)
            if key not in honoured and value["class_name"] != default:
                raise ValueError(f"{layer}: {key}={_checks.shown(kwargs[key])} is not supported "
                                 f"(only Keras's default, {default or 'none'})")
        elif key.endswith("activation") and value is not None:
            value = _activations.name_of(value) or "linear"
        elif isinstance(value, tuple):
            value = list(value)
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ValueError(f"{layer}: argument {key}={_checks.shown(value)} is not supported "
                             "(see docs/python.md)") from None
        fields[key] = value
    return fields


def _no_extra_common(kwargs, layer):
    kwargs.pop("trainable", None)  # kept in _init_args: Layer.trainable reads it
    _check_penalties(kwargs, layer)
    dtype = kwargs.pop("dtype", None)
    if isinstance(dtype, dict) and (dtype.get("config") or {}).get("name") == "float32":
        dtype = "float32"  # Keras 3's serialized DTypePolicy (a file's config)
    if dtype not in (None, "float32"):
        raise ValueError(f"{layer}: only float32 layers are supported")


def _no_extra(kwargs, layer):
    # Keras's common arguments with no effect here are accepted; others are errors.
    _no_extra_common(kwargs, layer)
    if kwargs:
        raise ValueError(f"{layer}: unsupported argument(s) {', '.join(sorted(kwargs))} "
                         "(see docs/python.md)")


# --- Image and sequence reshaping layers (issue 57): built by the Keras layer
# table from their Keras 3 configs, as the file readers build them.
__all__ += ["UpSampling2D", "ZeroPadding1D", "ZeroPadding2D", "Cropping1D", "Cropping2D",
            "Conv3D", "MaxPooling3D", "AveragePooling3D", "GlobalAveragePooling3D",
            "GlobalMaxPooling3D", "UpSampling3D", "ZeroPadding3D", "Cropping3D"]


def _channels_last(data_format, layer):
    if data_format not in (None, "channels_last"):
        raise ValueError(f"{layer}: only data_format='channels_last' is supported")


def _sides(value, what, layer, pairs, rank=2):
    """Keras's padding/cropping: an int, a pair (1D), or for 2D/3D `rank`
    ints or `rank` pairs, as a JSON value the layer table reads
    (keras/src/layers/reshaping/)."""
    if isinstance(value, (tuple, list)) and pairs and any(isinstance(v, (tuple, list))
                                                          for v in value):
        if len(value) != rank:
            raise ValueError(f"{layer}: {what} must be an int, {rank} ints or {rank} pairs of "
                             f"ints, got {_checks.shown(value)}")
        return [_ints(v, 2, f"{what}[{i}]", layer, 0) for i, v in enumerate(value)]
    if isinstance(value, (tuple, list)):
        return _ints(value, rank, what, layer, 0)
    return _int(value, what, layer, 0)


class UpSampling2D(Layer):
    def __init__(self, size=(2, 2), data_format=None, interpolation="nearest", name=None,
                 **kwargs):
        _no_extra(kwargs, "UpSampling2D")
        _channels_last(data_format, "UpSampling2D")
        if interpolation != "nearest":
            raise ValueError(f"UpSampling2D: interpolation {interpolation!r} is not supported "
                             "(nearest)")
        super().__init__(_from_table("UpSampling2D", {
            "name": _name(name, "UpSampling2D"), "size": _ints(size, 2, "size", "UpSampling2D"),
            "interpolation": interpolation}))


class ZeroPadding1D(Layer):
    def __init__(self, padding=1, data_format=None, name=None, **kwargs):
        _no_extra(kwargs, "ZeroPadding1D")
        _channels_last(data_format, "ZeroPadding1D")
        super().__init__(_from_table("ZeroPadding1D", {
            "name": _name(name, "ZeroPadding1D"),
            "padding": _sides(padding, "padding", "ZeroPadding1D", False)}))


class ZeroPadding2D(Layer):
    def __init__(self, padding=(1, 1), data_format=None, name=None, **kwargs):
        _no_extra(kwargs, "ZeroPadding2D")
        _channels_last(data_format, "ZeroPadding2D")
        super().__init__(_from_table("ZeroPadding2D", {
            "name": _name(name, "ZeroPadding2D"),
            "padding": _sides(padding, "padding", "ZeroPadding2D", True)}))


class Cropping1D(Layer):
    def __init__(self, cropping=(1, 1), name=None, **kwargs):
        _no_extra(kwargs, "Cropping1D")
        super().__init__(_from_table("Cropping1D", {
            "name": _name(name, "Cropping1D"),
            "cropping": _sides(cropping, "cropping", "Cropping1D", False)}))


class Cropping2D(Layer):
    def __init__(self, cropping=((0, 0), (0, 0)), data_format=None, name=None, **kwargs):
        _no_extra(kwargs, "Cropping2D")
        _channels_last(data_format, "Cropping2D")
        super().__init__(_from_table("Cropping2D", {
            "name": _name(name, "Cropping2D"),
            "cropping": _sides(cropping, "cropping", "Cropping2D", True)}))


class UpSampling3D(Layer):
    """keras/src/layers/reshaping/up_sampling3d.py: each of depth, rows and
    cols repeated size[i] times."""

    def __init__(self, size=(2, 2, 2), data_format=None, name=None, **kwargs):
        _no_extra(kwargs, "UpSampling3D")
        _channels_last(data_format, "UpSampling3D")
        super().__init__(_from_table("UpSampling3D", {
            "name": _name(name, "UpSampling3D"), "size": _ints(size, 3, "size", "UpSampling3D")}))


class ZeroPadding3D(Layer):
    """keras/src/layers/reshaping/zero_padding3d.py."""

    def __init__(self, padding=((1, 1), (1, 1), (1, 1)), data_format=None, name=None, **kwargs):
        _no_extra(kwargs, "ZeroPadding3D")
        _channels_last(data_format, "ZeroPadding3D")
        super().__init__(_from_table("ZeroPadding3D", {
            "name": _name(name, "ZeroPadding3D"),
            "padding": _sides(padding, "padding", "ZeroPadding3D", True, 3)}))


class Cropping3D(Layer):
    """keras/src/layers/reshaping/cropping3d.py."""

    def __init__(self, cropping=((1, 1), (1, 1), (1, 1)), data_format=None, name=None, **kwargs):
        _no_extra(kwargs, "Cropping3D")
        _channels_last(data_format, "Cropping3D")
        super().__init__(_from_table("Cropping3D", {
            "name": _name(name, "Cropping3D"),
            "cropping": _sides(cropping, "cropping", "Cropping3D", True, 3)}))


# --- Attention (issue 55's "one more Keras layer"): built by the Keras layer
# table (src/io/keras/layers/attention.cc), as the file readers build it.
__all__ += ["Attention", "AdditiveAttention"]


class Attention(Layer):
    """keras.layers.Attention: dot-product (Luong-style) attention of a query
    over a value, called on [query, value] or [query, value, key]
    (keras/src/layers/attention/attention.py). Masks come from the inputs
    (Embedding(mask_zero=True), Masking); use_causal_mask and
    return_attention_scores are call arguments, as in Keras."""

    _kind = "Attention"

    def __init__(self, use_scale=False, score_mode="dot", dropout=0.0, seed=None, name=None,
                 **kwargs):
        kind = self._kind
        _no_extra(kwargs, kind)
        self._config = {"name": _name(name, kind), "use_scale": bool(use_scale),
                        "dropout": _rate(dropout, "dropout", kind)}
        if kind == "Attention":  # AdditiveAttention has no score_mode
            if score_mode not in ("dot", "concat"):
                raise ValueError("Invalid value for argument score_mode. Expected one of "
                                 f"{{'dot', 'concat'}}. Received: score_mode={score_mode}")
            self._config["score_mode"] = score_mode
        self._seed = _seed(seed, kind)
        self._call_args = None  # the call arguments of the first call
        super().__init__(_from_table(kind, self._config, self._seed))

    def __call__(self, inputs, mask=None, training=None, return_attention_scores=False,
                 use_causal_mask=False, **kwargs):
        if mask is not None:
            raise ValueError(f"layer '{self.name}': give masks through "
                             "Embedding(mask_zero=True) or a Masking layer, not mask=")
        if kwargs:
            raise ValueError(f"layer '{self.name}': unsupported call argument(s) "
                             f"{', '.join(sorted(kwargs))}")
        if not isinstance(inputs, (list, tuple)) or len(inputs) not in (2, 3):
            raise ValueError("Attention layer must be called on a list of inputs, namely "
                             "[query, value] or [query, value, key]")
        args = {k: True for k, v in (("use_causal_mask", use_causal_mask),
                                     ("return_attention_scores", return_attention_scores)) if v}
        if self._call_args is None:
            self._call_args = args
            if args:  # the table reads call arguments as fields (a file's node kwargs)
                self._native = _from_table(self._kind, {**self._config, "name": self.name,
                                                        **args}, self._seed).native
        elif args != self._call_args:
            raise ValueError(f"layer '{self.name}': every call must give the same "
                             "use_causal_mask and return_attention_scores as the first")
        out = Layer.__call__(self, list(inputs))
        first = out[0] if isinstance(out, list) else out
        if isinstance(first, KerasTensor):
            first._call_kwargs = args  # written as the node's kwargs by model.save
        return out


class AdditiveAttention(Attention):
    """keras.layers.AdditiveAttention (additive_attention.py): Bahdanau-style
    scores sum(scale * tanh(query + key), -1), ``scale`` a weight of the
    query's last dimension (``use_scale``, the default)."""

    _kind = "AdditiveAttention"

    def __init__(self, use_scale=True, dropout=0.0, seed=None, name=None, **kwargs):
        super().__init__(use_scale=use_scale, dropout=dropout, seed=seed, name=name, **kwargs)


# --- Preprocessing layers (issue 57): built by the Keras layer table
# (keras/_preprocessing_layers.py); TimeDistributed and most augmentation
# layers are traced layers written from Keras 3's definitions.
from ._preprocessing_layers import (  # noqa: E402 (they subclass Layer above)
    CategoryEncoding, CenterCrop, Discretization, Normalization, Resizing, TimeDistributed)

__all__ += ["Normalization", "CenterCrop", "Resizing", "CategoryEncoding", "Discretization",
            "TimeDistributed"]
from ._augmentation_layers import (  # noqa: E402
    RandomContrast, RandomCrop, RandomFlip, RandomRotation, RandomTranslation, RandomZoom)

__all__ += ["RandomFlip", "RandomCrop", "RandomContrast", "RandomTranslation", "RandomZoom",
            "RandomRotation"]
