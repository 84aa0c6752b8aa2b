"""keras.Input and KerasTensor: the symbolic tensors functional models are
built from, and InputLayer (a Sequential's first entry). Below layers and
models, which both use them.
"""

import itertools

import numpy as np

from .. import _checks, _native
from ._traced import TensorOperators

__all__ = ["Input", "InputLayer", "KerasTensor"]

_tensor_count = itertools.count()


class KerasTensor(TensorOperators):
    """A symbolic tensor of a functional model (keras.Input's result, a layer's output)."""

    def __init__(self, native, history=None):
        self._native = native
        # (layer, its input KerasTensor or list of them) for a layer's
        # output, None for an input; the count orders calls (model.save).
        self._history = history
        self._order = next(_tensor_count)

    @property
    def shape(self):
        return (None,) + tuple(self._native.shape) if self._native.is_input else None

    @property
    def dtype(self):
        return self._native.dtype

    @property
    def name(self):
        return self._native.name

    def __repr__(self):
        return f"<KerasTensor name={self.name}>"


def Input(shape=None, batch_size=None, dtype=None, sparse=None, batch_shape=None, name=None,
          tensor=None, optional=False):
    """keras.Input: a model input of per-example ``shape`` (no batch dimension)."""
    if batch_shape is not None:
        shape = _checks.shape(batch_shape, "batch_shape", "Input", allow_none_first=True)[1:]
    if shape is None:
        raise ValueError("Input: give shape (per example, without the batch dimension)")
    if sparse or tensor is not None or optional:
        raise ValueError("Input: sparse, tensor and optional inputs are not supported")
    if isinstance(shape, (tuple, list)) and any(d is None for d in shape):
        raise ValueError(f"Input: every dimension of shape must be known, got {tuple(shape)}")
    shape = _checks.shape(shape, "shape", "Input")
    try:
        dtype = np.dtype(dtype or "float32").name
    except TypeError:
        raise ValueError(f"Input: dtype must be 'float32' or 'int32', got "
                         f"{_checks.shown(dtype)}") from None
    return KerasTensor(_native.Input(list(shape), dtype, _checks.name(name, "Input")))


class InputLayer:
    """keras.layers.InputLayer, for a Sequential's first entry."""

    def __init__(self, shape=None, batch_size=None, dtype=None, batch_shape=None, name=None,
                 input_shape=None, **kwargs):
        self.output = Input(shape if shape is not None else input_shape, dtype=dtype,
                            batch_shape=batch_shape, name=name)
