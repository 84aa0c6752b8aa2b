"""Keras 3's random augmentation layers inside models: RandomFlip,
RandomCrop and RandomContrast (keras/src/layers/preprocessing/
image_preprocessing/).

Active in training only (fit's steps); predict and evaluate pass images
through unchanged, as Keras does. The draws come from the engine's keyed
random bits (the dropout op's counter generator, keyed by the layer's seed
(its path when unseeded), the model's seed, the step and the element), so they differ from
step to step, repeat with the same seeds, and are the same on every mesh:
a model sharded over any devices trains exactly as on one. They are not
Keras's own draws (no two frameworks share a generator).
"""

import zlib

import numpy as np

from . import ops
from ._traced import current_trace
from ._preprocessing_layers import _positive, _resize_axis
from .layers import Layer

_BITS = 16  # resolution of a uniform draw: 2^-16


def _seed(value, layer):
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{layer}: seed must be an integer >= 0 or None, got {value!r}")
    return int(value)


def _uniform(layer, shape, name, low, high):
    """Uniform draws in [low, high) of ``shape``: _BITS fair bits each, from
    the engine's dropout op (element kept with probability 1/2, keyed by
    (key, step, element))."""
    trace = current_trace()
    t = ops._t  # the engine's traced ops
    # A seeded layer draws by its seed (two layers of one seed draw alike,
    # as Keras's SeedGenerator); an unseeded one by its path in the model.
    where = name if layer.seed is not None else trace.path(name)
    base = zlib.crc32(where.encode()) ^ (layer._seed_value * 0x9E3779B1)
    base = (base + trace.seed * 0x9E3779B97F4A7C15) % 2**64
    ones = t.constant(trace, list(shape), 1.0)
    unit = None
    for k in range(1, _BITS + 1):
        bit = ops._w(t.dropout(ones, 0.5, (base + k * 0x632BE59BD9B4E019) % 2**64))  # 0 or 2
        term = bit * (0.5 ** (k + 1))
        unit = term if unit is None else unit + term
    return unit * (high - low) + low


def _images(inputs, layer):
    shape = inputs.shape
    if len(shape) != 4:
        raise ValueError(f"{layer}: inputs must be images [batch, height, width, channels], "
                         f"got shape {tuple(shape)}")
    return shape


class _RandomLayer(Layer):
    _keras_builtin = True  # saved as keras.layers' own class

    def __init__(self, seed=None, data_format=None, **kwargs):
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{type(self).__name__}: only data_format='channels_last' is "
                             "supported")
        self.seed = seed
        self._seed_value = _seed(seed, type(self).__name__)

    def get_config(self):
        config = super().get_config()
        config["seed"] = self.seed
        return config


class RandomFlip(_RandomLayer):
    """keras.layers.RandomFlip(mode): in training each image is flipped left
    to right ("horizontal"), top to bottom ("vertical") or each of both
    ("horizontal_and_vertical", the default), each with probability 1/2."""

    _MODES = ("horizontal", "vertical", "horizontal_and_vertical")

    def __init__(self, mode="horizontal_and_vertical", seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        if mode not in self._MODES:
            raise ValueError(f"RandomFlip: mode {mode!r} is not one of {', '.join(self._MODES)}")
        self.mode = mode

    def call(self, inputs, training=None):
        if not training:
            return inputs
        shape = _images(inputs, "RandomFlip")
        x = inputs
        for axis, which in ((2, "horizontal"), (1, "vertical")):
            if which in self.mode:
                flipped = ops.take(x, np.arange(shape[axis])[::-1].copy(), axis=axis)
                coin = ops.greater_equal(_uniform(self, (shape[0], 1, 1, 1), which, 0.0, 1.0),
                                         0.5)
                x = x + coin * (flipped - x)
        return x

    def get_config(self):
        config = super().get_config()
        config["mode"] = self.mode
        return config


class RandomContrast(_RandomLayer):
    """keras.layers.RandomContrast(factor, value_range=(0, 255)): in
    training each image's channels move away from (or towards) their mean
    over the image by a factor drawn in [1 - lower, 1 + upper], then are
    clipped to value_range (keras/src/layers/preprocessing/
    image_preprocessing/random_contrast.py)."""

    def __init__(self, factor, value_range=(0, 255), seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        lower, upper = (factor, factor) if not isinstance(factor, (tuple, list)) else factor
        if not (0 <= float(lower) <= 1 and float(upper) >= 0):
            raise ValueError(f"RandomContrast: factor must be in [0, 1] (or a pair with lower "
                             f"in [0, 1]), got {factor!r}")
        self.factor = factor
        self._range = (1.0 - float(lower), 1.0 + float(upper))
        self.value_range = tuple(float(v) for v in value_range)

    def call(self, inputs, training=None):
        if not training:
            return inputs
        shape = _images(inputs, "RandomContrast")
        factor = _uniform(self, (shape[0], 1, 1, 1), "contrast", *self._range)
        mean = ops.mean(inputs, axis=(1, 2), keepdims=True)
        out = (inputs - mean) * factor + mean
        return ops.clip(out, self.value_range[0], self.value_range[1])

    def get_config(self):
        config = super().get_config()
        config.update({"factor": self.factor, "value_range": list(self.value_range)})
        return config


def _draw_index(layer, name, n):
    """A whole number drawn uniformly in [0, n) (one for the batch), as a
    traced [1] vector: the count of k in 1 .. n-1 with u * n >= k."""
    u = _uniform(layer, (1,), name, 0.0, float(n))
    index = ops.zeros_like(u)
    for k in range(1, n):
        index = index + ops.greater_equal(u, float(k))
    return index


def _window(x, axis, start, size):
    """x's rows start .. start + size - 1 along ``axis`` (1 or 2), for a
    traced start: a product with the 0/1 matrix picking them."""
    n = x.shape[axis]
    rows = ops.reshape(ops.arange(float(n)), (1, n))
    picks = ops.equal(rows, ops.reshape(ops.arange(float(size)), (size, 1)) + start)
    return ops.einsum("ir,brwc->biwc" if axis == 1 else "jw,bhwc->bhjc", picks, x)


class RandomCrop(_RandomLayer):
    """keras.layers.RandomCrop(height, width): in training one random
    height x width window for the whole batch (keras/src/layers/
    preprocessing/image_preprocessing/random_crop.py); in inference the
    largest central window of the target's aspect ratio, resized
    (bilinear) to height x width (keras/src/utils/image_utils.py,
    smart_resize). Images smaller than the window are refused."""

    def __init__(self, height, width, seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        self.height = _positive(height, "height", "RandomCrop")
        self.width = _positive(width, "width", "RandomCrop")

    def call(self, inputs, training=None):
        _, h, w, _ = _images(inputs, "RandomCrop")
        if h < self.height or w < self.width:
            raise ValueError(f"RandomCrop: images of {h}x{w} are smaller than the crop "
                             f"{self.height}x{self.width} (add a Resizing layer before)")
        if training:
            x = _window(inputs, 1, _draw_index(self, "top", h - self.height + 1), self.height)
            return _window(x, 2, _draw_index(self, "left", w - self.width + 1), self.width)
        crop_h = min(h, int(w * self.height / self.width))
        crop_w = min(w, int(h * self.width / self.height))
        top, left = (h - crop_h) // 2, (w - crop_w) // 2
        x = inputs[:, top:top + crop_h, left:left + crop_w, :]
        x = _resize_axis(x, 1, crop_h, self.height, "bilinear")
        return _resize_axis(x, 2, crop_w, self.width, "bilinear")

    def get_config(self):
        config = super().get_config()
        config.update({"height": self.height, "width": self.width})
        return config
