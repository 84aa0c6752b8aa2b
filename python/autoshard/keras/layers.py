"""keras.layers: Keras 3's layer classes, each one of the C++ API's layers.

A layer is made when constructed (so its name, "dense", "dense_1", ..., is
fixed then, as in Keras) and called on KerasTensors (keras.Input's results)
to build functional models, or listed in a Sequential.
"""

from .. import _native
from . import activations as _activations
from . import utils as _utils
from .models import Input, InputLayer, KerasTensor

__all__ = [
    "Layer", "InputLayer", "Input", "Dense", "Embedding", "Conv1D", "Conv2D", "DepthwiseConv2D",
    "SeparableConv2D", "Conv2DTranspose", "MaxPooling1D", "MaxPooling2D", "AveragePooling1D",
    "AveragePooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
    "GlobalMaxPooling2D", "Flatten", "Reshape", "Permute", "RepeatVector", "Rescaling", "Dropout",
    "Activation", "ReLU", "Softmax", "LayerNormalization", "BatchNormalization",
    "GroupNormalization", "MultiHeadAttention", "LSTM", "GRU", "SimpleRNN", "Add", "Subtract",
    "Multiply", "Average", "Maximum", "Minimum", "Concatenate",
]


def _initializer(value):
    if value is None:
        return "zeros"
    if isinstance(value, str):
        return value
    name = getattr(value, "_autoshard_name", None) or type(value).__name__
    # Keras's class names (GlorotUniform) to the engine's (glorot_uniform).
    snake = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
    return snake


def _ints(value, rank, what):
    if isinstance(value, int):
        return [value] * rank
    value = [int(v) for v in value]
    if len(value) != rank:
        raise ValueError(f"{what} must be an integer or {rank} integers, got {value}")
    return value


class Layer:
    """A layer of the engine. Calling it on KerasTensors records a functional call."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _utils.record_init_args(cls)  # model.save writes them as the layer's Keras config

    def __init__(self, native, input_shape=None):
        self._native = native
        # Keras 2's input_shape on a Sequential's first layer still works.
        self._input_shape = tuple(input_shape) if input_shape is not None else None

    @property
    def name(self):
        return self._native.name

    def __call__(self, inputs, *args, **kwargs):
        if args or kwargs:
            raise ValueError(f"layer '{self.name}' takes its inputs only (got more arguments)")
        # The call is recorded on its result (keras_history, for model.save).
        if isinstance(inputs, (list, tuple)):
            return KerasTensor(self._native([_symbolic(t, self.name) for t in inputs]),
                               history=(self, list(inputs)))
        return KerasTensor(self._native(_symbolic(inputs, self.name)), history=(self, inputs))

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}>"


def _symbolic(t, layer):
    if not isinstance(t, KerasTensor):
        raise ValueError(f"layer '{layer}' is called on {type(t).__name__}; call layers on "
                         "keras.Input(...) results to build a model (eager calls on arrays are "
                         "not supported)")
    return t._native


class Dense(Layer):
    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Dense")
        super().__init__(_native.Dense(int(units), _activations.name_of(activation), bool(use_bias),
                                       _initializer(kernel_initializer),
                                       _initializer(bias_initializer), name or ""), input_shape)


class Embedding(Layer):
    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", name=None,
                 input_shape=None, **kwargs):
        _no_extra(kwargs, "Embedding")
        init = _initializer(embeddings_initializer)
        init = "random_uniform" if init == "uniform" else init
        super().__init__(_native.Embedding(int(input_dim), int(output_dim), init, name or ""),
                         input_shape)


class _Conv(Layer):
    _rank = 2
    _kind = "Conv2D"

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", name=None,
                 depth_multiplier=1, input_shape=None, **kwargs):
        _no_extra(kwargs, self._kind)
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{self._kind}: only data_format='channels_last' is supported")
        super().__init__(
            _native.Conv(self._kind, int(filters), _ints(kernel_size, self._rank, "kernel_size"),
                         _ints(strides, self._rank, "strides"), padding,
                         _ints(dilation_rate, self._rank, "dilation_rate"), int(groups),
                         int(depth_multiplier), _activations.name_of(activation), bool(use_bias),
                         _initializer(kernel_initializer), _initializer(bias_initializer),
                         name or ""), input_shape)


class Conv1D(_Conv):
    _rank, _kind = 1, "Conv1D"


class Conv2D(_Conv):
    _rank, _kind = 2, "Conv2D"


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
        strides = [] if strides is None else _ints(strides, self._rank, "strides")
        super().__init__(_native.Pooling(self._kind, _ints(pool_size, self._rank, "pool_size"),
                                         strides, padding, name or ""), input_shape)


class MaxPooling1D(_Pool):
    _rank, _kind = 1, "MaxPooling1D"


class MaxPooling2D(_Pool):
    _rank, _kind = 2, "MaxPooling2D"


class AveragePooling1D(_Pool):
    _rank, _kind = 1, "AveragePooling1D"


class AveragePooling2D(_Pool):
    _rank, _kind = 2, "AveragePooling2D"


class _GlobalPool(Layer):
    _kind = ""

    def __init__(self, data_format=None, keepdims=False, name=None, **kwargs):
        _no_extra(kwargs, self._kind)
        super().__init__(_native.GlobalPooling(self._kind, bool(keepdims), name or ""))


class GlobalAveragePooling1D(_GlobalPool):
    _kind = "GlobalAveragePooling1D"


class GlobalAveragePooling2D(_GlobalPool):
    _kind = "GlobalAveragePooling2D"


class GlobalMaxPooling1D(_GlobalPool):
    _kind = "GlobalMaxPooling1D"


class GlobalMaxPooling2D(_GlobalPool):
    _kind = "GlobalMaxPooling2D"


class Flatten(Layer):
    def __init__(self, data_format=None, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Flatten")
        super().__init__(_native.Flatten(name or ""), input_shape)


class Reshape(Layer):
    def __init__(self, target_shape, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Reshape")
        super().__init__(_native.Reshape([int(d) for d in target_shape], name or ""), input_shape)


class Permute(Layer):
    def __init__(self, dims, name=None, **kwargs):
        _no_extra(kwargs, "Permute")
        super().__init__(_native.Permute([int(d) for d in dims], name or ""))


class RepeatVector(Layer):
    def __init__(self, n, name=None, **kwargs):
        _no_extra(kwargs, "RepeatVector")
        super().__init__(_native.RepeatVector(int(n), name or ""))


class Rescaling(Layer):
    def __init__(self, scale, offset=0.0, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Rescaling")
        super().__init__(_native.Rescaling(float(scale), float(offset), name or ""), input_shape)


class Dropout(Layer):
    def __init__(self, rate, noise_shape=None, seed=None, name=None, **kwargs):
        _no_extra(kwargs, "Dropout")
        if noise_shape is not None:
            raise ValueError("Dropout: noise_shape is not supported")
        super().__init__(_native.Dropout(float(rate), int(seed or 0), name or ""))


class Activation(Layer):
    def __init__(self, activation, name=None, **kwargs):
        _no_extra(kwargs, "Activation")
        super().__init__(_native.Activation(_activations.name_of(activation) or "linear",
                                            name or ""))


class ReLU(Activation):
    def __init__(self, name=None, **kwargs):
        super().__init__("relu", name=name, **kwargs)


class Softmax(Activation):
    def __init__(self, axis=-1, name=None, **kwargs):
        if axis != -1:
            raise ValueError("Softmax: only axis=-1 is supported")
        super().__init__("softmax", name=name, **kwargs)


class LayerNormalization(Layer):
    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, rms_scaling=False,
                 name=None, **kwargs):
        _no_extra(kwargs, "LayerNormalization")
        if axis not in (-1, [-1], (-1,)):
            raise ValueError("LayerNormalization: only axis=-1 is supported")
        super().__init__(_native.LayerNormalization(float(epsilon), bool(center), bool(scale),
                                                    bool(rms_scaling), name or ""))


class BatchNormalization(Layer):
    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True, name=None,
                 **kwargs):
        _no_extra(kwargs, "BatchNormalization")
        super().__init__(_native.BatchNormalization(int(axis), float(momentum), float(epsilon),
                                                    bool(center), bool(scale), name or ""))


class GroupNormalization(Layer):
    def __init__(self, groups=32, axis=-1, epsilon=1e-3, center=True, scale=True, name=None,
                 **kwargs):
        _no_extra(kwargs, "GroupNormalization")
        if axis != -1:
            raise ValueError("GroupNormalization: only axis=-1 is supported")
        super().__init__(_native.GroupNormalization(int(groups), float(epsilon), bool(center),
                                                    bool(scale), name or ""))


class MultiHeadAttention(Layer):
    """Self-attention when called on one tensor, or ``layer(query, value)``."""

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, name=None,
                 **kwargs):
        _no_extra(kwargs, "MultiHeadAttention")
        super().__init__(_native.MultiHeadAttention(int(num_heads), int(key_dim),
                                                    int(value_dim or 0), float(dropout),
                                                    bool(use_bias), name or ""))

    def __call__(self, query, value=None, key=None, **kwargs):
        if key is not None or kwargs:
            raise ValueError("MultiHeadAttention: only (query) or (query, value) are supported")
        return super().__call__(query if value is None else [query, value])


class _Recurrent(Layer):
    _kind = "LSTM"

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 dropout=0.0, recurrent_dropout=0.0, seed=None, return_sequences=False,
                 return_state=False, go_backwards=False, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, self._kind)
        if return_state:
            raise ValueError(f"{self._kind}: return_state=True is not supported in models "
                             "built from Python yet")
        super().__init__(_native.Recurrent(self._kind, int(units),
                                           _activations.name_of(activation) or "linear",
                                           _activations.name_of(recurrent_activation) or "linear",
                                           bool(use_bias), bool(return_sequences),
                                           bool(go_backwards), float(dropout),
                                           float(recurrent_dropout), int(seed or 0), name or ""),
                         input_shape)


class LSTM(_Recurrent):
    _kind = "LSTM"


class GRU(_Recurrent):
    _kind = "GRU"


class SimpleRNN(_Recurrent):
    _kind = "SimpleRNN"


class _Merge(Layer):
    _kind = "Add"

    def __init__(self, name=None, **kwargs):
        _no_extra(kwargs, self._kind)
        super().__init__(_native.Merge(self._kind, -1, name or ""))


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
        super().__init__(_native.Merge("Concatenate", int(axis), name or ""))


def _no_extra(kwargs, layer):
    # Keras's common arguments with no effect here are accepted; others are errors.
    if kwargs.pop("trainable", True) is not True:
        raise ValueError(f"{layer}: trainable=False is not supported")
    if kwargs.pop("dtype", None) not in (None, "float32"):
        raise ValueError(f"{layer}: only float32 layers are supported")
    if kwargs:
        raise ValueError(f"{layer}: unsupported argument(s) {', '.join(sorted(kwargs))} "
                         "(see docs/python.md)")
