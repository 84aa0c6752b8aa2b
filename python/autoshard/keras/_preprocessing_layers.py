"""Keras 3's preprocessing layers inside models: Normalization (with adapt),
CenterCrop, Resizing, CategoryEncoding and Discretization, and the
TimeDistributed wrapper.

The preprocessing layers are built by the Keras layer table the file
readers use (src/io/keras/layers/preprocessing.cc, src/nn/
preprocessing_layers.cc): one definition with the command line.
Normalization's adapted statistics are its non-trainable weights (Keras 3's
"mean" and "variance"), saved with the model. TimeDistributed is traced
into the one step graph (keras/_custom_layers.py). A model holding any of
them is planned, sharded and trained like any other: the batch axis may be
split and every device computes the same numbers as one.
"""

import numpy as np

from .. import _checks
from . import ops
from .layers import Layer, _from_table, _name, _no_extra


def _positive(value, what, layer):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{layer}: {what} must be a positive integer, got {value!r}")
    return int(value)


def _keep_axes(axis, rank, layer):
    """Normalization's kept axes (keras/src/layers/preprocessing/normalization.py)."""
    if axis is None:
        return ()
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    kept = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or not -rank <= a < rank or a % rank == 0:
            raise ValueError(f"{layer}: axis {axis!r} must name non-batch axes of inputs of "
                             f"rank {rank}")
        kept.append(int(a) % rank)
    return tuple(sorted(kept))


def _plain(value):
    """A config value as JSON holds it (numbers and lists)."""
    return None if value is None else np.asarray(value, np.float32).tolist()


class Normalization(Layer):
    """keras.layers.Normalization: (x - mean) / max(sqrt(variance), 1e-7)
    over the kept ``axis`` (the last by default; None: one scalar mean and
    variance), from ``mean``/``variance`` or from ``adapt(data)``;
    ``invert=True`` maps normalized values back. Built by the Keras layer
    table (src/io/keras/layers/preprocessing.cc), as files build it: adapted
    statistics are the non-trainable weights "mean" and "variance"."""

    def __init__(self, axis=-1, mean=None, variance=None, invert=False, name=None,
                 input_shape=None, **kwargs):
        _no_extra(kwargs, "Normalization")
        if (mean is None) != (variance is None):
            raise ValueError("Normalization: give both mean and variance, or neither (and "
                             "call adapt)")
        if axis is not None and not isinstance(axis, (int, np.integer, tuple, list)):
            raise ValueError(f"Normalization: axis must be an int, a tuple of ints or None, "
                             f"got {axis!r}")
        self.axis = axis
        self.invert = bool(invert)
        self._given = mean is not None
        axes = None if axis is None else [int(a) for a in
                                          ((axis,) if isinstance(axis, (int, np.integer))
                                           else axis)]
        super().__init__(_from_table("Normalization", {
            "name": _name(name, "Normalization"), "axis": axes, "invert": self.invert,
            "mean": _plain(mean), "variance": _plain(variance)}), input_shape)
        self._adapted = None  # (mean, variance) from adapt, set once the model is built
        self._count = 0  # Keras's int count: a file's, else 0 (Keras 3's adapt leaves it so)

    def adapt(self, data, batch_size=None, steps=None):
        """Computes the mean and (population) variance of ``data`` over every
        axis but the kept ones, as Keras's adapt does."""
        if self._given:
            raise ValueError("Normalization: adapt is for a layer made without mean and "
                             "variance")
        x = np.asarray(data, np.float32)
        if x.ndim < 1 or x.size == 0:
            raise ValueError(f"Normalization.adapt: data must be a non-empty array, got shape "
                             f"{x.shape}")
        keep = _keep_axes(self.axis, max(x.ndim, 2), "Normalization")
        reduce = tuple(d for d in range(x.ndim) if d not in keep)
        mean = x.astype(np.float64).mean(axis=reduce)
        variance = x.astype(np.float64).var(axis=reduce)
        self._adapted = (mean.astype(np.float32), variance.astype(np.float32))
        if getattr(getattr(self, "_model", None), "_native", None) is not None:
            self._attached()  # its model is built: now (else once it is)

    def _attached(self):
        """Called once the layer's model is built (and by adapt after): the
        adapted statistics become the weights' values (Keras's adapt assigns
        them)."""
        if self._adapted is None:
            return
        native = self._model._built()
        paths = [p for p in native.non_trainable_weight_paths()
                 if p.split(".")[-2:-1] == [self.name]]
        for stat, value in zip(("mean", "variance"), self._adapted):
            path = next(p for p in paths if p.endswith("." + stat))
            # np.array (not ascontiguousarray, which makes a scalar [1]) keeps axis=None's [].
            native.set_weight(path, np.array(
                np.broadcast_to(value, tuple(native.weight_shape(path))), np.float32, order="C"))

    def _keras_counters(self):
        """Keras's int variables saved after the weights: the count of an
        adapted layer (keras/src/layers/preprocessing/normalization.py,
        Normalization.build); none with given statistics."""
        return [] if self._given else [self._count]

    def _set_keras_counters(self, values):
        (self._count,) = (int(v) for v in values)


class CenterCrop(Layer):
    """keras.layers.CenterCrop(height, width): the central height x width
    window, starting at (in - out) // 2 (keras/src/layers/preprocessing/
    image_preprocessing/center_crop.py), built by the Keras layer table.
    Images smaller than the window (which Keras resizes first) are refused."""

    def __init__(self, height, width, data_format=None, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "CenterCrop")
        if data_format not in (None, "channels_last"):
            raise ValueError("CenterCrop: only data_format='channels_last' is supported")
        self.height = _positive(height, "height", "CenterCrop")
        self.width = _positive(width, "width", "CenterCrop")
        super().__init__(_from_table("CenterCrop", {
            "name": _name(name, "CenterCrop"), "height": self.height, "width": self.width}),
            input_shape)


class Resizing(Layer):
    """keras.layers.Resizing(height, width, interpolation="bilinear"):
    images resized to height x width ("bilinear" or "nearest", half-pixel
    centres, no antialiasing), after the optional crop_to_aspect_ratio or
    pad_to_aspect_ratio (keras/src/layers/preprocessing/image_preprocessing/
    resizing.py), built by the Keras layer table."""

    def __init__(self, height, width, interpolation="bilinear", crop_to_aspect_ratio=False,
                 pad_to_aspect_ratio=False, fill_mode="constant", fill_value=0.0,
                 data_format=None, name=None, input_shape=None, **kwargs):
        _no_extra(kwargs, "Resizing")
        if data_format not in (None, "channels_last"):
            raise ValueError("Resizing: only data_format='channels_last' is supported")
        if interpolation not in ("bilinear", "nearest"):
            raise ValueError(f"Resizing: interpolation {interpolation!r} is not supported "
                             "(bilinear or nearest)")
        if crop_to_aspect_ratio and pad_to_aspect_ratio:
            raise ValueError("Resizing: crop_to_aspect_ratio and pad_to_aspect_ratio exclude "
                             "each other")
        if fill_mode != "constant":
            raise ValueError(f"Resizing: fill_mode {fill_mode!r} is not supported (constant)")
        self.height = _positive(height, "height", "Resizing")
        self.width = _positive(width, "width", "Resizing")
        self.interpolation = interpolation
        super().__init__(_from_table("Resizing", {
            "name": _name(name, "Resizing"), "height": self.height, "width": self.width,
            "interpolation": interpolation, "crop_to_aspect_ratio": bool(crop_to_aspect_ratio),
            "pad_to_aspect_ratio": bool(pad_to_aspect_ratio),
            "fill_value": _checks.number(fill_value, "fill_value", "Resizing")}), input_shape)


class CategoryEncoding(Layer):
    """keras.layers.CategoryEncoding(num_tokens, output_mode): ids to
    "one_hot" vectors (a trailing axis of 1 replaced), or per example
    "multi_hot" (1 where an id occurs) or "count" vectors of [batch, ids]
    (keras/src/layers/preprocessing/category_encoding.py), built by the
    Keras layer table. An int32 id outside [0, num_tokens) is an error when
    the step runs, as tf-keras raises (Keras 3 encodes it as zeros: a
    departure); float ids computed in the model encode
    as zeros there."""

    def __init__(self, num_tokens=None, output_mode="multi_hot", sparse=False, name=None,
                 input_shape=None, **kwargs):
        _no_extra(kwargs, "CategoryEncoding")
        if num_tokens is None:
            raise ValueError("CategoryEncoding: num_tokens is needed")
        if output_mode not in ("one_hot", "multi_hot", "count"):
            raise ValueError(f"CategoryEncoding: output_mode {output_mode!r} is not one of "
                             "'one_hot', 'multi_hot', 'count'")
        if sparse:
            raise ValueError("CategoryEncoding: sparse=True is not supported")
        self.num_tokens = _positive(num_tokens, "num_tokens", "CategoryEncoding")
        self.output_mode = output_mode
        super().__init__(_from_table("CategoryEncoding", {
            "name": _name(name, "CategoryEncoding"), "num_tokens": self.num_tokens,
            "output_mode": output_mode}), input_shape)


class Discretization(Layer):
    """keras.layers.Discretization(bin_boundaries): each value's bucket, the
    number of boundaries at or below it (bucket i holds
    boundaries[i-1] <= x < boundaries[i]; keras/src/layers/preprocessing/
    discretization.py, output_mode "int"), as float32 numbers (Keras:
    int64), built by the Keras layer table."""

    def __init__(self, bin_boundaries=None, num_bins=None, epsilon=0.01, output_mode="int",
                 sparse=False, name=None, input_shape=None, **kwargs):
        if kwargs.get("dtype") in ("int64", "int32"):  # its int output (tf-keras saves int64)
            kwargs.pop("dtype")
        _no_extra(kwargs, "Discretization")
        if bin_boundaries is None:
            raise ValueError("Discretization: give bin_boundaries (adapt with num_bins is not "
                             "supported)")
        if output_mode != "int" or sparse:
            raise ValueError("Discretization: only output_mode='int' is supported")
        bounds = [_checks.number(b, "bin_boundaries", "Discretization")
                  for b in bin_boundaries]
        if any(b > c for b, c in zip(bounds, bounds[1:])):
            raise ValueError(f"Discretization: bin_boundaries must increase, got {bounds}")
        self.bin_boundaries = bounds
        super().__init__(_from_table("Discretization", {
            "name": _name(name, "Discretization"), "bin_boundaries": bounds,
            "output_mode": "int"}), input_shape)


class TimeDistributed(Layer):
    """keras.layers.TimeDistributed(layer): ``layer`` applied to every step
    of [batch, steps, ...] inputs, one set of weights for all steps
    (keras/src/layers/rnn/time_distributed.py): the steps join the batch
    for the inner call and are split off again."""

    _keras_builtin = True  # saved as keras.layers\' own class

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(layer, Layer):
            raise ValueError(f"TimeDistributed: layer must be a keras.layers.Layer, got "
                             f"{type(layer).__name__}")
        self.layer = layer

    def call(self, inputs, training=None):
        shape = inputs.shape
        if len(shape) < 3:
            raise ValueError(f"TimeDistributed: inputs must be [batch, steps, ...], got shape "
                             f"{tuple(shape)}")
        batch, steps = shape[0], shape[1]
        joined = ops.reshape(inputs, (batch * steps,) + tuple(shape[2:]))
        out = self.layer(joined, training=training) if _takes_training(self.layer) else \
            self.layer(joined)
        return ops.reshape(out, (batch, steps) + tuple(out.shape[1:]))

    def get_config(self):
        from ._model_files import _layer_config  # noqa: PLC0415 (imports layers)
        config = super().get_config()
        config["layer"] = _layer_config(self.layer)  # Keras's serialized inner layer
        return config

    @classmethod
    def from_config(cls, config):
        from ._registry import lookup  # noqa: PLC0415
        config = dict(config)
        inner = config.pop("layer")
        layer = lookup(inner, None, "TimeDistributed").from_config(inner["config"])
        return cls(layer, **config)


def _takes_training(layer):
    import inspect  # noqa: PLC0415
    call = getattr(type(layer), "call", None)
    return call is not None and "training" in inspect.signature(call).parameters

