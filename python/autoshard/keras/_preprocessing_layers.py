"""Keras 3's preprocessing layers inside models: Normalization (with adapt),
CenterCrop, Resizing, CategoryEncoding and Discretization.

Normalization and CenterCrop are built by the Keras layer table the file
readers use (src/io/keras/layers/preprocessing.cc); Normalization's adapted
statistics are its non-trainable weights (Keras 3's "mean" and "variance"),
saved with the model. The others are layers traced into the one step graph
(keras/_custom_layers.py), written from Keras 3's definitions
(keras/src/layers/preprocessing/). A model holding any of them is planned,
sharded and trained like any other: the batch axis may be split and every
device computes the same numbers as one.
"""

import numpy as np

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


def _image_shape(input_shape, layer):
    if len(input_shape) != 4 or input_shape[1] is None or input_shape[2] is None:
        raise ValueError(f"{layer}: inputs must be images [batch, height, width, channels] of "
                         f"known size, got shape {tuple(input_shape)}")
    return int(input_shape[1]), int(input_shape[2])


def _bilinear_taps(n_in, n_out):
    """Half-pixel bilinear sampling without antialiasing (tf.image.resize,
    jax.image.resize with antialias=False, Keras 3's Resizing default): each
    output position o reads src = (o + 0.5) * n_in / n_out - 0.5 between
    rows floor(src) and floor(src) + 1 (clamped to the image)."""
    src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    low = np.floor(src)
    lower = np.clip(low, 0, n_in - 1).astype(np.int64)
    upper = np.clip(low + 1, 0, n_in - 1).astype(np.int64)
    return src, low, lower, upper


def _resize_axis(x, axis, n_in, n_out, interpolation):
    if n_in == n_out:
        return x
    if interpolation == "nearest":  # half-pixel centres, rounding down
        idx = np.minimum(np.floor((np.arange(n_out) + 0.5) * (n_in / n_out)), n_in - 1)
        return ops.take(x, idx.astype(np.int64), axis=axis)
    src, low, lower, upper = _bilinear_taps(n_in, n_out)
    a = ops.take(x, lower, axis=axis)
    b = ops.take(x, upper, axis=axis)
    # The fractions src - floor(src) as a traced vector (positions from
    # arange; the engine's constants are single-valued).
    frac = ops.arange(float(n_out)) * (n_in / n_out) + (0.5 * n_in / n_out - 0.5)
    frac = frac - ops.take(ops.arange(float(n_in + 2)) - 1.0, (low + 1).astype(np.int64))
    shape = [1, 1, 1, 1]
    shape[axis] = n_out
    return a + (b - a) * ops.reshape(frac, shape)


class Resizing(Layer):
    """keras.layers.Resizing(height, width, interpolation="bilinear"):
    images resized to height x width ("bilinear" or "nearest")."""

    _keras_builtin = True  # saved as keras.layers\' own class

    def __init__(self, height, width, interpolation="bilinear", crop_to_aspect_ratio=False,
                 pad_to_aspect_ratio=False, data_format=None, **kwargs):
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise ValueError("Resizing: only data_format='channels_last' is supported")
        if interpolation not in ("bilinear", "nearest"):
            raise ValueError(f"Resizing: interpolation {interpolation!r} is not supported "
                             "(bilinear or nearest)")
        if crop_to_aspect_ratio or pad_to_aspect_ratio:
            raise ValueError("Resizing: crop_to_aspect_ratio and pad_to_aspect_ratio are not "
                             "supported")
        self.height = _positive(height, "height", "Resizing")
        self.width = _positive(width, "width", "Resizing")
        self.interpolation = interpolation

    def call(self, inputs):
        h, w = _image_shape(inputs.shape, "Resizing")
        x = _resize_axis(inputs, 1, h, self.height, self.interpolation)
        return _resize_axis(x, 2, w, self.width, self.interpolation)

    def get_config(self):
        config = super().get_config()
        config.update({"height": self.height, "width": self.width,
                       "interpolation": self.interpolation})
        return config


class CategoryEncoding(Layer):
    """keras.layers.CategoryEncoding(num_tokens, output_mode): int32 token
    ids to "one_hot" vectors (one id per example, or a trailing axis of 1),
    or per example "multi_hot" (1 where an id occurs) or "count" vectors
    (keras/src/layers/preprocessing/category_encoding.py). Ids must lie in
    [0, num_tokens): one outside encodes as zeros here (Keras raises)."""

    _keras_builtin = True  # saved as keras.layers\' own class

    def __init__(self, num_tokens=None, output_mode="multi_hot", sparse=False, **kwargs):
        super().__init__(**kwargs)
        if num_tokens is None:
            raise ValueError("CategoryEncoding: num_tokens is needed")
        if output_mode not in ("one_hot", "multi_hot", "count"):
            raise ValueError(f"CategoryEncoding: output_mode {output_mode!r} is not one of "
                             "'one_hot', 'multi_hot', 'count'")
        if sparse:
            raise ValueError("CategoryEncoding: sparse=True is not supported")
        self.num_tokens = _positive(num_tokens, "num_tokens", "CategoryEncoding")
        self.output_mode = output_mode

    def call(self, inputs):
        shape = inputs.shape
        if self.output_mode == "one_hot":
            if len(shape) > 1 and shape[-1] == 1:
                inputs = ops.squeeze(inputs, -1)
            return ops.one_hot(inputs, self.num_tokens)
        if len(shape) != 2:
            raise ValueError(f"CategoryEncoding: {self.output_mode} takes [batch, ids] inputs, "
                             f"got shape {tuple(shape)}")
        counts = ops.sum(ops.one_hot(inputs, self.num_tokens), axis=1)
        return counts if self.output_mode == "count" else ops.minimum(counts, 1.0)

    def get_config(self):
        config = super().get_config()
        config.update({"num_tokens": self.num_tokens, "output_mode": self.output_mode,
                       "sparse": False})
        return config


class Discretization(Layer):
    """keras.layers.Discretization(bin_boundaries): each value's bucket, the
    number of boundaries at or below it (bucket i holds
    boundaries[i-1] <= x < boundaries[i]; keras/src/layers/preprocessing/
    discretization.py, output_mode "int"), as float32 numbers (Keras: int64;
    the engine's traced ids come only from inputs)."""

    _keras_builtin = True  # saved as keras.layers\' own class

    def __init__(self, bin_boundaries=None, num_bins=None, epsilon=0.01, output_mode="int",
                 sparse=False, **kwargs):
        super().__init__(**kwargs)
        if bin_boundaries is None:
            raise ValueError("Discretization: give bin_boundaries (adapt with num_bins is not "
                             "supported)")
        if output_mode != "int" or sparse:
            raise ValueError("Discretization: only output_mode='int' is supported")
        bounds = [float(b) for b in bin_boundaries]
        if any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise ValueError(f"Discretization: bin_boundaries must increase, got {bounds}")
        self.bin_boundaries = bounds

    def call(self, inputs):
        buckets = ops.zeros_like(inputs)
        for b in self.bin_boundaries:
            buckets = buckets + ops.greater_equal(inputs, b)
        return buckets

    def get_config(self):
        config = super().get_config()
        config.update({"bin_boundaries": self.bin_boundaries, "output_mode": "int"})
        return config


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
