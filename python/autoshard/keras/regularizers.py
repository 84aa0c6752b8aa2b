"""keras.regularizers: L1, L2, L1L2 and OrthogonalRegularizer (Keras 3's
keras/src/regularizers/regularizers.py).

A layer's ``kernel_regularizer``, ``bias_regularizer`` (and the other
weights' ``*_regularizer``) and ``activity_regularizer`` take one of these,
its name ("l1", "l2", "l1_l2", "orthogonal_regularizer") or its serialized
form; the engine adds the penalties to the loss of every training and
evaluation step (autoshard/nn/regularizers.h). Called on an array, a
regularizer computes its penalty in NumPy.
"""

import json

import numpy as np

from .. import _checks, _native

__all__ = ["Regularizer", "L1", "L2", "L1L2", "OrthogonalRegularizer", "l1", "l2", "l1_l2",
           "orthogonal_regularizer", "get", "serialize", "deserialize"]


def _factor(value, name, where):
    return _checks.number(0.0 if value is None else value, name, where, minimum=0)


class Regularizer:
    """The base class: ``__call__(x)`` is the penalty, ``get_config()`` its arguments."""

    def __call__(self, x):
        return np.float32(0.0)

    def get_config(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement get_config()")

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def _engine(self, where):
        if type(self).__name__ not in _CLASSES or _CLASSES[type(self).__name__] is not type(self):
            raise ValueError(f"{where}: custom regularizers ({type(self).__name__}) are not "
                             "supported; use L1, L2, L1L2 or OrthogonalRegularizer")
        return _native.regularizer(json.dumps(serialize(self)), where)


class L1L2(Regularizer):
    def __init__(self, l1=0.0, l2=0.0):
        self.l1 = _factor(l1, "l1", "L1L2")
        self.l2 = _factor(l2, "l2", "L1L2")

    def __call__(self, x):
        x = np.asarray(x, dtype=np.float64)
        return np.float32(self.l1 * np.abs(x).sum() + self.l2 * np.square(x).sum())

    def get_config(self):
        return {"l1": float(self.l1), "l2": float(self.l2)}


class L1(L1L2):
    def __init__(self, l1=0.01):
        super().__init__(l1=0.01 if l1 is None else l1)

    def get_config(self):
        return {"l1": float(self.l1)}


class L2(L1L2):
    def __init__(self, l2=0.01):
        super().__init__(l2=0.01 if l2 is None else l2)

    def get_config(self):
        return {"l2": float(self.l2)}


class OrthogonalRegularizer(Regularizer):
    def __init__(self, factor=0.01, mode="rows"):
        self.factor = _factor(factor, "factor", "OrthogonalRegularizer")
        if mode not in ("rows", "columns"):
            raise ValueError(f"OrthogonalRegularizer: mode must be 'rows' or 'columns', got "
                             f"{_checks.shown(mode)}")
        self.mode = mode

    def __call__(self, x):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"OrthogonalRegularizer: inputs must have rank 2, got {x.shape}")
        v = x if self.mode == "rows" else x.T
        n = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-7)
        product = np.abs(n @ n.T) * (1 - np.eye(len(n)))
        return np.float32(self.factor * 0.5 * product.sum() / (len(n) * (len(n) - 1) / 2))

    def get_config(self):
        return {"factor": float(self.factor), "mode": self.mode}


_CLASSES = {c.__name__: c for c in (L1, L2, L1L2, OrthogonalRegularizer)}
_NAMES = {"l1": L1, "l2": L2, "l1_l2": lambda: L1L2(0.01, 0.01),
          "orthogonal_regularizer": OrthogonalRegularizer}
l1, l2, orthogonal_regularizer = L1, L2, OrthogonalRegularizer


def l1_l2(l1=0.01, l2=0.01):
    """keras.regularizers.l1_l2: L1L2 with both factors 0.01 by default."""
    return L1L2(l1=l1, l2=l2)


def serialize(regularizer):
    return {"module": "keras.regularizers", "class_name": type(regularizer).__name__,
            "config": regularizer.get_config(), "registered_name": None}


def deserialize(config, custom_objects=None):
    name = config.get("class_name") if isinstance(config, dict) else None
    if name not in _CLASSES:
        raise ValueError(f"keras.regularizers: unknown regularizer {_checks.shown(name)} "
                         f"(known: {', '.join(_CLASSES)})")
    return _CLASSES[name].from_config(config.get("config") or {})


def get(identifier):
    """A Regularizer from one, its name, its serialized dict, or None."""
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _NAMES:
            raise ValueError(f"keras.regularizers: unknown regularizer '{identifier}' (known: "
                             f"{', '.join(_NAMES)})")
        return _NAMES[identifier]()
    if isinstance(identifier, dict):
        return deserialize(identifier)
    raise ValueError(f"a regularizer must be a keras.regularizers object, its name or its "
                     f"config, got {_checks.shown(identifier)} (custom regularizer functions "
                     "are not supported)")
