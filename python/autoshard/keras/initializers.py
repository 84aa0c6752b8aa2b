"""keras.initializers: Keras 3's initializer classes, each one of the
engine's (autoshard/nn/initializer.h).

An initializer object names how a weight's first values are drawn; the
engine draws them, element by element, keyed by the weight's path and the
model's seed, so any sharding starts from the same numbers. The classes,
their arguments, defaults and configs follow
keras/src/initializers/random_initializers.py and constant_initializers.py;
``seed`` is kept in the config but the draws follow the model's seed
(docs/python.md, "keras.initializers").
"""

import numpy as np

from .. import _native

__all__ = [
    "Initializer", "Constant", "Zeros", "Ones", "RandomNormal", "RandomUniform",
    "TruncatedNormal", "VarianceScaling", "GlorotUniform", "GlorotNormal", "HeNormal",
    "HeUniform", "LecunNormal", "LecunUniform", "Orthogonal", "OrthogonalInitializer",
    "Identity", "IdentityInitializer", "get", "serialize", "deserialize",
]


class Initializer:
    """Keras's base class: ``__call__(shape, dtype)`` returns the values (a
    NumPy array here), ``get_config``/``from_config`` round-trip it."""

    def __call__(self, shape, dtype=None):
        if dtype not in (None, "float32", np.float32):
            raise ValueError(f"{type(self).__name__}: only float32 values are drawn, got "
                             f"dtype {dtype}")
        seed = getattr(self, "seed", None)
        return self.native().draw([int(d) for d in shape], int(seed or 0))

    def native(self):
        """The engine's initializer (autoshard._native.Initializer)."""
        raise ValueError(
            f"{type(self).__name__}: a custom initializer (a Python function drawing values) "
            "cannot initialise engine weights; use one of keras.initializers' classes, or "
            "set_weights() after building")

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def clone(self):
        return self.__class__.from_config(self.get_config())


class Constant(Initializer):
    def __init__(self, value=0.0):
        if np.ndim(value) != 0:
            raise ValueError("Constant: value must be a number here (the engine fills a weight "
                             f"with one value), got an array of shape {np.shape(value)}")
        self.value = float(value)

    def native(self):
        return _native.Initializer("constant", self.value)

    def get_config(self):
        return {"value": self.value}


class Zeros(Initializer):
    def native(self):
        return _native.Initializer("zeros")


class Ones(Initializer):
    def native(self):
        return _native.Initializer("ones")


class _Seeded(Initializer):
    def _seed(self, seed):
        if seed is not None and not isinstance(seed, int):
            raise ValueError(f"{type(self).__name__}: seed must be an int or None, got "
                             f"{type(seed).__name__}")
        self.seed = seed


class RandomNormal(_Seeded):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev = float(mean), float(stddev)
        self._seed(seed)

    def native(self):
        return _native.Initializer("random_normal", self.mean, self.stddev)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class TruncatedNormal(RandomNormal):
    """Normal draws beyond two stddev from the mean are drawn again."""

    def native(self):
        return _native.Initializer("truncated_normal", self.mean, self.stddev)


class RandomUniform(_Seeded):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        self.minval, self.maxval = float(minval), float(maxval)
        self._seed(seed)

    def native(self):
        return _native.Initializer("random_uniform", self.minval, self.maxval)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


class VarianceScaling(_Seeded):
    """Variance ``scale / n`` (n: fan_in, fan_out or their mean), drawn from
    a truncated normal (stddev divided by .8796, the stddev of a unit normal
    cut at two), an untruncated normal, or a uniform of limit sqrt(3 scale / n)."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None,
                 input_axes=None, output_axes=None):
        _default_fans(type(self).__name__, input_axes, output_axes)
        if not isinstance(scale, (int, float)) or scale <= 0.0:
            raise ValueError(f"Argument `scale` must be positive float. Received: scale={scale}")
        modes = {"fan_in", "fan_out", "fan_avg"}
        if mode not in modes:
            raise ValueError(f"Invalid `mode` argument: expected one of {modes}. Received: "
                             f"mode={mode}")
        distribution = str(distribution).lower()
        if distribution == "normal":  # Keras's alias
            distribution = "truncated_normal"
        allowed = {"uniform", "truncated_normal", "untruncated_normal"}
        if distribution not in allowed:
            raise ValueError(f"Invalid `distribution` argument: expected one of {allowed}. "
                             f"Received: distribution={distribution}")
        self.scale, self.mode, self.distribution = float(scale), mode, distribution
        self._seed(seed)

    def native(self):
        return _native.Initializer("variance_scaling", self.scale, 0.0, self.mode,
                                   self.distribution)

    def get_config(self):
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution,
                "seed": self.seed}


def _default_fans(name, input_axes, output_axes):
    """Newer Keras lets the variance-scaling family count fan-in and
    fan-out over chosen axes (input_axes, output_axes) and saves both, null
    by default, in every such initializer's config (a real Keras 3.15 file,
    ../shared/keras-files/gru_forecast.keras, holds them; 3.10's do not). The default fans
    are the engine's; other axes are refused."""
    if input_axes is not None or output_axes is not None:
        raise ValueError(f"{name}: input_axes and output_axes other than None are not "
                         f"supported (got {input_axes!r}, {output_axes!r}); the fans are the "
                         "default ones")


def _preset(name, scale, mode, distribution, doc):
    class Preset(VarianceScaling):
        def __init__(self, seed=None, input_axes=None, output_axes=None):
            super().__init__(scale, mode, distribution, seed, input_axes, output_axes)

        def get_config(self):
            return {"seed": self.seed}

    Preset.__name__ = Preset.__qualname__ = name
    Preset.__doc__ = doc
    return Preset


GlorotUniform = _preset("GlorotUniform", 1.0, "fan_avg", "uniform",
                        "Uniform in +-sqrt(6 / (fan_in + fan_out)).")
GlorotNormal = _preset("GlorotNormal", 1.0, "fan_avg", "truncated_normal",
                       "Truncated normal, stddev sqrt(2 / (fan_in + fan_out)).")
HeNormal = _preset("HeNormal", 2.0, "fan_in", "truncated_normal",
                   "Truncated normal, stddev sqrt(2 / fan_in).")
HeUniform = _preset("HeUniform", 2.0, "fan_in", "uniform", "Uniform in +-sqrt(6 / fan_in).")
LecunNormal = _preset("LecunNormal", 1.0, "fan_in", "truncated_normal",
                      "Truncated normal, stddev sqrt(1 / fan_in).")
LecunUniform = _preset("LecunUniform", 1.0, "fan_in", "uniform",
                       "Uniform in +-sqrt(3 / fan_in).")
# The engine's glorot_uniform is its own kind (the same formula): stock
# layers' default kernels keep the draws they always had.
GlorotUniform.native = lambda self: _native.Initializer("glorot_uniform")


class OrthogonalInitializer(_Seeded):
    def __init__(self, gain=1.0, seed=None):
        self.gain = float(gain)
        self._seed(seed)

    def native(self):
        return _native.Initializer("orthogonal", self.gain)

    def get_config(self):
        return {"gain": self.gain, "seed": self.seed}


class IdentityInitializer(Initializer):
    """gain times the identity [rows, cols] (matrices only)."""

    def __init__(self, gain=1.0):
        self.gain = float(gain)

    def native(self):
        return _native.Initializer("identity", self.gain)

    def get_config(self):
        return {"gain": self.gain}


Orthogonal = OrthogonalInitializer
Identity = IdentityInitializer

# Keras's lowercase names (keras_export's aliases) and the names get()
# takes: each class's snake_case name, and uniform, normal, one, zero.
constant, zeros, ones = Constant, Zeros, Ones
random_normal, random_uniform, truncated_normal = RandomNormal, RandomUniform, TruncatedNormal
variance_scaling, glorot_uniform, glorot_normal = VarianceScaling, GlorotUniform, GlorotNormal
he_normal, he_uniform, lecun_normal, lecun_uniform = HeNormal, HeUniform, LecunNormal, LecunUniform
orthogonal, identity = OrthogonalInitializer, IdentityInitializer

_CLASSES = {c.__name__: c for c in (
    Constant, Zeros, Ones, RandomNormal, RandomUniform, TruncatedNormal, VarianceScaling,
    GlorotUniform, GlorotNormal, HeNormal, HeUniform, LecunNormal, LecunUniform,
    OrthogonalInitializer, IdentityInitializer)}
_CLASSES.update(Orthogonal=OrthogonalInitializer, Identity=IdentityInitializer)
_NAMES = {
    "constant": Constant, "zeros": Zeros, "zero": Zeros, "ones": Ones, "one": Ones,
    "random_normal": RandomNormal, "normal": RandomNormal, "random_uniform": RandomUniform,
    "uniform": RandomUniform, "truncated_normal": TruncatedNormal,
    "variance_scaling": VarianceScaling, "glorot_uniform": GlorotUniform,
    "glorot_normal": GlorotNormal, "he_normal": HeNormal, "he_uniform": HeUniform,
    "lecun_normal": LecunNormal, "lecun_uniform": LecunUniform,
    "orthogonal": OrthogonalInitializer, "orthogonal_initializer": OrthogonalInitializer,
    "identity": IdentityInitializer, "identity_initializer": IdentityInitializer,
}


def serialize(initializer):
    """Keras 3's config of an initializer: {module, class_name, config,
    registered_name}."""
    return {"module": "keras.initializers", "class_name": type(initializer).__name__,
            "config": initializer.get_config(), "registered_name": None}


def deserialize(config, custom_objects=None):
    """An initializer from serialize()'s dict (or Keras 2's {class_name,
    config})."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"Could not interpret initializer config: {config!r}")
    name = config["class_name"]
    cls = (custom_objects or {}).get(name) or _CLASSES.get(name) or _NAMES.get(name)
    if cls is None:
        raise ValueError(f"Could not interpret initializer identifier: {name!r} (known: "
                         f"{', '.join(sorted(_CLASSES))})")
    return cls.from_config(config.get("config") or {})


def get(identifier):
    """Keras's initializers.get: None, a name ("he_normal", "HeNormal"), a
    config dict, a class or an instance -> an initializer (or None)."""
    if identifier is None or isinstance(identifier, Initializer):
        return identifier
    if isinstance(identifier, str):
        cls = _NAMES.get(identifier) or _CLASSES.get(identifier)
        if cls is None:
            raise ValueError(f"Could not interpret initializer identifier: {identifier!r} "
                             f"(known: {', '.join(sorted(_NAMES))})")
        return cls()
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, type) and issubclass(identifier, Initializer):
        return identifier()
    if isinstance(identifier, (int, float)) and not isinstance(identifier, bool):
        return Constant(identifier)
    raise ValueError(f"Could not interpret initializer identifier: {identifier!r}")


def native(identifier, default="zeros"):
    """The engine initializer for a layer argument (None: ``default``)."""
    return get(default if identifier is None else identifier).native()


def table_config(identifier, default):
    """The Keras 3 config the layer table reads for a layer's initializer
    argument (None: ``default``): {class_name, config} of the stock class
    the initializer is (a subclass of one: that class, with its
    arguments). A custom initializer is refused here, as native() refuses it."""
    init = get(default if identifier is None else identifier)
    init.native()  # a Python function drawing values: refused with native()'s message
    cls = next(c for c in type(init).__mro__ if _CLASSES.get(c.__name__) is c)
    return {"class_name": cls.__name__, "config": cls.get_config(init)}
