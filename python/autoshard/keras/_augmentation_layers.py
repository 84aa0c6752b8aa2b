"""Keras 3's random augmentation layers inside models: RandomFlip,
RandomCrop, RandomContrast, RandomTranslation, RandomZoom and
RandomRotation (keras/src/layers/preprocessing/image_preprocessing/).
RandomCrop is built by the Keras layer table (src/nn/preprocessing_layers.cc,
whose draws are these layers' draws); the others are traced here.

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
from ._preprocessing_layers import _positive
from .layers import Layer, _from_table, _name, _no_extra

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


class RandomCrop(Layer):
    """keras.layers.RandomCrop(height, width): in training one random
    height x width window for the whole batch (keras/src/layers/
    preprocessing/image_preprocessing/random_crop.py); in inference the
    largest central window of the target's aspect ratio, resized
    (bilinear) to height x width (keras/src/utils/image_utils.py,
    smart_resize). Built by the Keras layer table, so files holding it
    predict and train from the command line with the same draws
    (src/nn/preprocessing_layers.cc). Training on images smaller than the
    window is refused."""

    def __init__(self, height, width, seed=None, data_format=None, name=None,
                 input_shape=None, **kwargs):
        _no_extra(kwargs, "RandomCrop")
        if data_format not in (None, "channels_last"):
            raise ValueError("RandomCrop: only data_format='channels_last' is supported")
        _seed(seed, "RandomCrop")
        self.seed = seed
        self.height = _positive(height, "height", "RandomCrop")
        self.width = _positive(width, "width", "RandomCrop")
        super().__init__(_from_table("RandomCrop", {
            "name": _name(name, "RandomCrop"), "height": self.height, "width": self.width,
            "seed": None if seed is None else int(seed)}), input_shape)


# --- affine sampling: RandomTranslation and RandomZoom ------------------------------------

_FILL_MODES = ("reflect", "wrap", "nearest", "constant")


def _factor_range(value, what, layer, signed=True):
    """Keras's height_factor / width_factor: a float f (the range [-f, f])
    or a pair (lower, upper)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{layer}: {what} must be a float or a pair, got {value!r}")
        lower, upper = float(value[0]), float(value[1])
    else:
        lower, upper = -abs(float(value)), abs(float(value))
    if lower > upper or (signed and (abs(lower) > 1 or abs(upper) > 1)):
        raise ValueError(f"{layer}: {what} must lie in [-1, 1] with lower <= upper, got "
                         f"{value!r}")
    return lower, upper


def _virtual_taps(r, n, fill_mode, reach):
    """The virtual positions (beyond the image too, up to ``reach`` rows from
    it) whose pixel is row r under ``fill_mode``
    (tf.raw_ops.ImageProjectiveTransformV3's modes): reflect
    "d c b a | a b c d | d c b a", wrap "a b c d | a b c d"; constant and
    nearest read row r only at r (nearest clamps the position instead)."""
    periods = int(reach) // n + 2
    if fill_mode == "reflect":
        return [t for k in range(-periods, periods + 1) for t in (r + 2 * k * n, 2 * k * n - r - 1)]
    if fill_mode == "wrap":
        return [r + k * n for k in range(-periods, periods + 1)]
    return [r]


def _hats(src, n, fill_mode, reach):
    """[..., n] bilinear weights of the positions ``src`` [...] over the n
    input rows: max(0, 1 - |src - t|) summed over each row's virtual
    positions t under ``fill_mode`` (the hat kernel is bilinear
    interpolation, each tap read through the fill mode)."""
    if fill_mode == "nearest":
        src = ops.clip(src, 0.0, float(n - 1))
    src = ops.expand_dims(src, -1)
    columns = []
    for r in range(n):
        hat = None
        for t in _virtual_taps(r, n, fill_mode, reach):
            h = ops.relu(1.0 - ops.abs(src - float(t)))
            hat = h if hat is None else hat + h
        columns.append(hat)
    return ops.concatenate(columns, axis=-1)


def _sample_axis(x, axis, src, fill_mode, fill_value, reach):
    """Bilinear sampling of x along ``axis`` (1: rows, 2: columns) at the
    traced positions ``src`` [batch, n_out]: output o is the sum over input
    rows r of max(0, 1 - |src_o - t|) x[r] over r's virtual positions t (the
    hat kernel is bilinear interpolation); a constant fill adds fill_value
    times the weight that fell outside the image."""
    n = x.shape[axis]
    weights = _hats(src, n, fill_mode, reach)  # [batch, n_out, n]
    out = ops.einsum("bor,brwc->bowc" if axis == 1 else "bor,bhrc->bhoc", weights, x)
    if fill_mode == "constant" and fill_value != 0:
        outside = 1.0 - ops.sum(weights, axis=-1)  # [batch, n_out]
        shape = (x.shape[0], -1, 1, 1) if axis == 1 else (x.shape[0], 1, -1, 1)
        out = out + ops.reshape(outside, shape) * fill_value
    return out


class _AffineLayer(_RandomLayer):
    def __init__(self, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, **kwargs):
        super().__init__(seed=seed, **kwargs)
        layer = type(self).__name__
        if fill_mode not in _FILL_MODES:
            raise ValueError(f"{layer}: fill_mode {fill_mode!r} is not one of "
                             f"{', '.join(_FILL_MODES)}")
        if interpolation != "bilinear":
            raise ValueError(f"{layer}: interpolation {interpolation!r} is not supported "
                             "(bilinear)")
        self.fill_mode, self.interpolation = fill_mode, interpolation
        self.fill_value = float(fill_value)

    def _sample(self, x, rows, cols, reach):
        """x sampled at positions ``rows`` [batch, h] and ``cols`` [batch, w],
        none farther than ``reach`` (a factor of each side) from the image."""
        h, w = x.shape[1], x.shape[2]
        x = _sample_axis(x, 1, rows, self.fill_mode, self.fill_value, reach * h)
        return _sample_axis(x, 2, cols, self.fill_mode, self.fill_value, reach * w)

    def get_config(self):
        config = super().get_config()
        config.update({"fill_mode": self.fill_mode, "interpolation": self.interpolation,
                       "fill_value": self.fill_value})
        return config


class RandomTranslation(_AffineLayer):
    """keras.layers.RandomTranslation(height_factor, width_factor): in
    training each image shifted by fractions of its height and width drawn
    in the factors' ranges, output pixel (i, j) read at (i - dy, j - dx)
    bilinearly, beyond the image by ``fill_mode`` (keras/src/layers/
    preprocessing/image_preprocessing/random_translation.py)."""

    def __init__(self, height_factor, width_factor, fill_mode="reflect",
                 interpolation="bilinear", seed=None, fill_value=0.0, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self._rows = _factor_range(height_factor, "height_factor", "RandomTranslation")
        self._cols = _factor_range(width_factor, "width_factor", "RandomTranslation")

    def call(self, inputs, training=None):
        if not training:
            return inputs
        b, h, w, _ = _images(inputs, "RandomTranslation")
        dy = _uniform(self, (b, 1), "dy", *self._rows) * float(h)
        dx = _uniform(self, (b, 1), "dx", *self._cols) * float(w)
        rows = ops.reshape(ops.arange(float(h)), (1, h)) - dy
        cols = ops.reshape(ops.arange(float(w)), (1, w)) - dx
        return self._sample(inputs, rows, cols, 1.0)  # factors within [-1, 1]

    def get_config(self):
        config = super().get_config()
        config.update({"height_factor": self.height_factor, "width_factor": self.width_factor})
        return config


class RandomZoom(_AffineLayer):
    """keras.layers.RandomZoom(height_factor, width_factor=None): in training
    each image zoomed about its centre by 1 + a draw in the factor's range
    (positive: out, negative: in; width_factor None: the height's zoom,
    keeping the aspect ratio), pixel i read at z (i - (n - 1) / 2) +
    (n - 1) / 2 (keras/src/layers/preprocessing/image_preprocessing/
    random_zoom.py)."""

    def __init__(self, height_factor, width_factor=None, fill_mode="reflect",
                 interpolation="bilinear", seed=None, fill_value=0.0, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self._rows = _factor_range(height_factor, "height_factor", "RandomZoom", False)
        self._cols = None if width_factor is None else _factor_range(
            width_factor, "width_factor", "RandomZoom", False)
        for lower, _ in filter(None, (self._rows, self._cols)):
            if lower <= -1:
                raise ValueError(f"RandomZoom: factors must be above -1 (a zoom of 1 + "
                                 f"factor > 0), got {height_factor!r}, {width_factor!r}")

    def call(self, inputs, training=None):
        if not training:
            return inputs
        b, h, w, _ = _images(inputs, "RandomZoom")
        zy = _uniform(self, (b, 1), "zoom_height", *self._rows) + 1.0
        zx = zy if self._cols is None else \
            _uniform(self, (b, 1), "zoom_width", *self._cols) + 1.0
        cy, cx = (h - 1) / 2, (w - 1) / 2
        rows = (ops.reshape(ops.arange(float(h)), (1, h)) - cy) * zy + cy
        cols = (ops.reshape(ops.arange(float(w)), (1, w)) - cx) * zx + cx
        uppers = [self._rows[1]] + ([self._cols[1]] if self._cols else [])
        return self._sample(inputs, rows, cols, (1 + max(uppers)) / 2)

    def get_config(self):
        config = super().get_config()
        config.update({"height_factor": self.height_factor, "width_factor": self.width_factor})
        return config


def _sin_cos(angle):
    """sin and cos of traced angles in [-2 pi, 2 pi] from the engine's
    arithmetic (it has no trig op): Taylor series at angle / 8 (within
    pi / 4, terms to the 13th power: error below 1e-10), then three
    doublings (sin 2a = 2 sin a cos a, cos 2a = cos^2 a - sin^2 a)."""
    a = angle * 0.125
    a2 = a * a
    sin, cos, term_s, term_c = a, 1.0 + a2 * 0.0, a, 1.0 + a2 * 0.0
    for k in range(1, 7):
        term_s = term_s * a2 * (-1.0 / ((2 * k) * (2 * k + 1)))
        term_c = term_c * a2 * (-1.0 / ((2 * k - 1) * (2 * k)))
        sin, cos = sin + term_s, cos + term_c
    for _ in range(3):
        sin, cos = 2.0 * sin * cos, cos * cos - sin * sin
    return sin, cos


class RandomRotation(_AffineLayer):
    """keras.layers.RandomRotation(factor): in training each image turned
    about its centre by 2 pi times a draw in the factor's range (a float f:
    [-f, f]); output pixel (x, y) is read bilinearly at (cos x - sin y +
    x0, sin x + cos y + y0), the offsets keeping the centre in place, beyond
    the image by ``fill_mode`` (keras/src/layers/preprocessing/
    image_preprocessing/random_rotation.py, its rotation matrix). The
    sampling is not separable: each output pixel weighs every row and every
    column, [batch, height, width, height + width] weights."""

    def __init__(self, factor, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, **kwargs):
        super().__init__(fill_mode, interpolation, seed, fill_value, **kwargs)
        self.factor = factor
        self._range = _factor_range(factor, "factor", "RandomRotation")

    def call(self, inputs, training=None):
        if not training:
            return inputs
        b, h, w, _ = _images(inputs, "RandomRotation")
        angle = _uniform(self, (b, 1, 1), "angle", *self._range) * (2 * np.pi)
        sin, cos = _sin_cos(angle)
        ys = ops.reshape(ops.arange(float(h)), (1, h, 1))
        xs = ops.reshape(ops.arange(float(w)), (1, 1, w))
        x0 = ((w - 1) - (cos * (w - 1) - sin * (h - 1))) * 0.5
        y0 = ((h - 1) - (sin * (w - 1) + cos * (h - 1))) * 0.5
        src_x = cos * xs - sin * ys + x0  # [batch, h, w]
        src_y = sin * xs + cos * ys + y0
        reach = h + w  # a turned pixel lies within the image's diagonal of it
        hy, hx = _hats(src_y, h, self.fill_mode, reach), _hats(src_x, w, self.fill_mode, reach)
        rows = ops.einsum("bijr,brck->bijck", hy, inputs)
        out = ops.einsum("bijc,bijck->bijk", hx, rows)
        if self.fill_mode == "constant" and self.fill_value != 0:
            inside = ops.sum(hy, axis=-1) * ops.sum(hx, axis=-1)
            out = out + ops.expand_dims(1.0 - inside, -1) * self.fill_value
        return out

    def get_config(self):
        config = super().get_config()
        config["factor"] = self.factor
        return config
