"""keras.constraints: MaxNorm, MinMaxNorm, NonNeg and UnitNorm (Keras 3's
keras/src/constraints/constraints.py).

A layer's ``kernel_constraint`` and ``bias_constraint`` (and the other
weights' ``*_constraint``) take one of these, its name ("max_norm",
"min_max_norm", "non_neg", "unit_norm") or its serialized form; after each
optimizer update the engine replaces the weight by the constraint of it, as
Keras's optimizer does (autoshard/nn/regularizers.h). Called on an array, a
constraint computes it in NumPy.
"""

import json

import numpy as np

from .. import _checks, _native

__all__ = ["Constraint", "MaxNorm", "MinMaxNorm", "NonNeg", "UnitNorm", "max_norm",
           "min_max_norm", "non_neg", "unit_norm", "get", "serialize", "deserialize"]

_EPSILON = 1e-7  # Keras's backend.epsilon()


def _axis(value, where):
    axes = value if isinstance(value, (list, tuple)) else [value]
    return [_checks.integer(a, "axis", where, -64, 64) for a in axes]


def _norms(w, axis):
    return np.sqrt(np.square(w).sum(axis=tuple(axis), keepdims=True))


class Constraint:
    """The base class: ``__call__(w)`` is the constrained weight."""

    def __call__(self, w):
        return w

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def _engine(self, where):
        if _CLASSES.get(type(self).__name__) is not type(self):
            raise ValueError(f"{where}: custom constraints ({type(self).__name__}) are not "
                             "supported; use MaxNorm, MinMaxNorm, NonNeg or UnitNorm")
        return _native.constraint(json.dumps(serialize(self)), where)


class MaxNorm(Constraint):
    def __init__(self, max_value=2, axis=0):
        self.max_value = _checks.number(max_value, "max_value", "MaxNorm", minimum=0)
        self.axis = _axis(axis, "MaxNorm")

    def __call__(self, w):
        w = np.asarray(w, dtype=np.float64)
        norms = _norms(w, self.axis)
        return (w * (np.clip(norms, 0, self.max_value) / (_EPSILON + norms))).astype(np.float32)

    def get_config(self):
        return {"max_value": self.max_value, "axis": self.axis}


class MinMaxNorm(Constraint):
    def __init__(self, min_value=0.0, max_value=1.0, rate=1.0, axis=0):
        where = "MinMaxNorm"
        self.min_value = _checks.number(min_value, "min_value", where, minimum=0)
        self.max_value = _checks.number(max_value, "max_value", where, minimum=self.min_value)
        self.rate = _checks.number(rate, "rate", where, minimum=0)
        self.axis = _axis(axis, where)

    def __call__(self, w):
        w = np.asarray(w, dtype=np.float64)
        norms = _norms(w, self.axis)
        desired = (self.rate * np.clip(norms, self.min_value, self.max_value) +
                   (1 - self.rate) * norms)
        return (w * (desired / (_EPSILON + norms))).astype(np.float32)

    def get_config(self):
        return {"min_value": self.min_value, "max_value": self.max_value, "rate": self.rate,
                "axis": self.axis}


class NonNeg(Constraint):
    def __call__(self, w):
        w = np.asarray(w, dtype=np.float32)
        return w * (w >= 0)


class UnitNorm(Constraint):
    def __init__(self, axis=0):
        self.axis = _axis(axis, "UnitNorm")

    def __call__(self, w):
        w = np.asarray(w, dtype=np.float64)
        return (w / (_EPSILON + _norms(w, self.axis))).astype(np.float32)

    def get_config(self):
        return {"axis": self.axis}


_CLASSES = {c.__name__: c for c in (MaxNorm, MinMaxNorm, NonNeg, UnitNorm)}
_NAMES = {"max_norm": MaxNorm, "min_max_norm": MinMaxNorm, "non_neg": NonNeg,
          "unit_norm": UnitNorm}
max_norm, min_max_norm, non_neg, unit_norm = MaxNorm, MinMaxNorm, NonNeg, UnitNorm


def serialize(constraint):
    return {"module": "keras.constraints", "class_name": type(constraint).__name__,
            "config": constraint.get_config(), "registered_name": None}


def deserialize(config, custom_objects=None):
    name = config.get("class_name") if isinstance(config, dict) else None
    if name not in _CLASSES:
        raise ValueError(f"keras.constraints: unknown constraint {_checks.shown(name)} "
                         f"(known: {', '.join(_CLASSES)})")
    return _CLASSES[name].from_config(config.get("config") or {})


def get(identifier):
    """A Constraint from one, its name, its serialized dict, or None."""
    if identifier is None or isinstance(identifier, Constraint):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _NAMES:
            raise ValueError(f"keras.constraints: unknown constraint '{identifier}' (known: "
                             f"{', '.join(_NAMES)})")
        return _NAMES[identifier]()
    if isinstance(identifier, dict):
        return deserialize(identifier)
    raise ValueError(f"a constraint must be a keras.constraints object, its name or its "
                     f"config, got {_checks.shown(identifier)} (custom constraint functions are "
                     "not supported)")
