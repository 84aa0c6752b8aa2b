"""keras.activations: the activations layers accept, by name or as these functions.

Each function also computes its activation on a NumPy array (float32), for
use outside a model; inside a model the engine's own kernels run.
"""

import numpy as np

from .. import _native

_NAMES = [
    "linear", "relu", "relu6", "leaky_relu", "elu", "selu", "gelu", "sigmoid",
    "hard_sigmoid", "hard_silu", "hard_swish", "tanh", "softmax", "log_softmax",
    "silu", "swish", "softplus", "softsign", "mish", "exponential",
]


def _numpy(name):
    def f(x, **kwargs):
        if hasattr(x, "_value") or hasattr(x, "_history") or hasattr(x, "_owner"):
            from . import ops  # a traced tensor (in a custom call) or a model's tensor
            return ops.activation(x, name)
        x = np.asarray(x, dtype=np.float32)
        if name == "linear":
            return x
        if name == "relu":
            return np.maximum(x, 0)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-x))
        if name == "tanh":
            return np.tanh(x)
        if name == "softmax":
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        if name in ("silu", "swish"):
            return x / (1 + np.exp(-x))
        if name == "softplus":
            return np.logaddexp(0, x)
        raise NotImplementedError(
            f"keras.activations.{name} runs inside models only (no NumPy version)")

    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = f"The '{name}' activation (Keras 3's formula and defaults)."
    return f


for _name in _NAMES:
    globals()[_name] = _numpy(_name)


def get(identifier):
    """The activation named ``identifier`` (a string, a function of this module, or None)."""
    return globals()[name_of(identifier) or "linear"]


def serialize(activation):
    return name_of(activation) or "linear"


def name_of(activation):
    """The engine's name for an activation argument ("" for None / linear)."""
    if activation is None:
        return ""
    if callable(activation):
        name = getattr(activation, "__name__", None)
        if name not in _NAMES:
            raise ValueError(
                f"activation {activation!r} is not one of keras.activations' functions; "
                f"use one of: {', '.join(_NAMES)}")
        activation = name
    if not isinstance(activation, str):
        raise ValueError(f"activation must be a string, a keras.activations function or None, "
                         f"not {type(activation).__name__}")
    if activation in ("", "linear"):
        return ""
    _native.check_activation(activation)
    return activation
