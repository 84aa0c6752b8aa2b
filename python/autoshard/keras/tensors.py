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

    def __init__(self, native, history=None, first=None, index=0):
        self._native = native
        # (layer, its input KerasTensor or list of them) for a layer's
        # output, None for an input; the count orders calls (model.save).
        self._history = history
        self._order = next(_tensor_count)
        # Output ``index`` of a layer of several outputs (return_state): the
        # call is recorded on output 0 (``first``), the others point at it.
        self._index, self._first = index, first
        if history is not None and index == 0:  # layer.output: Keras 3 reads the first call's
            history[0].__dict__.setdefault("_outputs_made", []).append(self)

    @property
    def shape(self):
        if not self._native.is_input:
            return None
        return (None,) + tuple(None if d == -1 else d for d in self._native.shape)

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
        shape = _checks.shape(batch_shape, "batch_shape", "Input", allow_none=True)[1:]
    if shape is None:
        raise ValueError("Input: give shape (per example, without the batch dimension)")
    if sparse or tensor is not None or optional:
        raise ValueError("Input: sparse, tensor and optional inputs are not supported")
    # None: a size known only when data arrives (a sequence's length); the
    # model traces and compiles its step once per distinct batch shape.
    shape = _checks.shape(shape, "shape", "Input", allow_none=True)
    try:
        dtype = np.dtype(dtype or "float32").name
    except TypeError:
        raise ValueError(f"Input: dtype must be 'float32' or 'int32', got "
                         f"{_checks.shown(dtype)}") from None
    return KerasTensor(_native.Input([-1 if d is None else d for d in shape], dtype,
                                     _checks.name(name, "Input")))


class InputLayer:
    """keras.layers.InputLayer, for a Sequential's first entry."""

    def __init__(self, shape=None, batch_size=None, dtype=None, batch_shape=None, name=None,
                 input_shape=None, **kwargs):
        self.output = Input(shape if shape is not None else input_shape, dtype=dtype,
                            batch_shape=batch_shape, name=name)

    @property
    def name(self):
        return self.output.name

    @property
    def input(self):
        return self.output

    def __repr__(self):
        return f"<InputLayer name={self.name}>"
