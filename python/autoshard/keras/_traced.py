"""Tensors inside a traced call: what a custom layer's ``call`` works on.

The engine traces a model's step into one graph; a custom layer's ``call``
runs then (autoshard._native.PyLayer), on TracedTensors that each name one
value of that graph. keras.ops turns operations on them into the graph's
primitives. A layer's weights (``add_weight``) are Variables, declared in
each trace and read there as TracedTensors.

Below ops and layers, which both use it.
"""

import contextlib
import threading

import numpy as np

_state = threading.local()


def current_trace():
    """The engine's Trace a custom layer's call runs in, or None (eager)."""
    return getattr(_state, "trace", None)


@contextlib.contextmanager
def tracing(trace):
    """Marks the code inside as running in ``trace`` (a custom layer's call)."""
    saved = (current_trace(), getattr(_state, "values", None))
    _state.trace = trace
    _state.values = saved[1] if saved[0] is trace else {}
    try:
        yield
    finally:
        _state.trace, _state.values = saved


def declare(variable, value):
    """``variable``'s Value in the current trace (Trace.weight's result)."""
    _state.values[id(variable)] = value


def value_of(variable):
    value = getattr(_state, "values", {}).get(id(variable)) if current_trace() else None
    if value is None:
        raise ValueError(f"variable '{variable.path}' is used outside the call of the layer "
                         "that made it (read a layer's weights in its own call, or with "
                         "model.get_weights())")
    return value


def dtype_name(value):
    """A native Value's dtype by Keras's name (float32, int32)."""
    return {"f32": "float32", "i32": "int32"}.get(value.dtype, value.dtype)


class TensorOperators:
    """Python's operators on tensors, as keras.ops (x * 2, x + y, -x, x[:, 0])."""

    def _ops(self):
        from . import ops
        return ops

    def __add__(self, o):
        return self._ops().add(self, o)

    def __radd__(self, o):
        return self._ops().add(o, self)

    def __sub__(self, o):
        return self._ops().subtract(self, o)

    def __rsub__(self, o):
        return self._ops().subtract(o, self)

    def __mul__(self, o):
        return self._ops().multiply(self, o)

    def __rmul__(self, o):
        return self._ops().multiply(o, self)

    def __truediv__(self, o):
        return self._ops().divide(self, o)

    def __rtruediv__(self, o):
        return self._ops().divide(o, self)

    def __matmul__(self, o):
        return self._ops().matmul(self, o)

    def __rmatmul__(self, o):
        return self._ops().matmul(o, self)

    def __pow__(self, o):
        return self._ops().power(self, o)

    def __rpow__(self, o):
        return self._ops().power(o, self)

    def __neg__(self):
        return self._ops().negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return self._ops().abs(self)

    def __gt__(self, o):
        return self._ops().greater(self, o)

    def __ge__(self, o):
        return self._ops().greater_equal(self, o)

    def __lt__(self, o):
        return self._ops().less(self, o)

    def __le__(self, o):
        return self._ops().less_equal(self, o)

    def __and__(self, o):
        return self._ops().logical_and(self, o)

    def __or__(self, o):
        return self._ops().logical_or(self, o)

    def __invert__(self):
        return self._ops().logical_not(self)

    def __getitem__(self, key):
        return self._ops()._getitem(self, key)

    @property
    def T(self):
        return self._ops().transpose(self)

    @property
    def ndim(self):
        return len(self.shape)


class TracedTensor(TensorOperators):
    """One value of the graph being traced (a custom layer's input, output,
    or anything keras.ops computes from them). Its shape is the traced
    one, batch dimension included."""

    __array_priority__ = 100  # numpy_array * tensor: the tensor's operator

    def __init__(self, value):
        self._value = value
        # Read now: the graph the value belongs to is gone after its trace
        # (a traceback's repr of the tensor must not reach it).
        self._shape = tuple(value.shape)
        self._dtype = dtype_name(value)

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    def __len__(self):
        return self.shape[0]

    def __bool__(self):
        raise TypeError("a traced tensor has no truth value: inside a layer's call, branch "
                        "with ops.where(condition, x, y) instead of `if`")

    def __iter__(self):
        raise TypeError("a traced tensor cannot be iterated: use ops.split or ops.unstack")

    def numpy(self):
        raise ValueError("a traced tensor has no values yet (it is part of the step being "
                         "traced): use ops on it, and read results from predict()")

    def __repr__(self):
        return f"<TracedTensor shape={self.shape} dtype={self.dtype}>"


class Variable(TensorOperators):
    """A weight a custom layer made with add_weight: declared in every trace
    of the layer's call (Trace.weight), read there as a tensor."""

    __array_priority__ = 100

    def __init__(self, owner, name, shape, initializer, trainable, dtype="float32"):
        self._owner = owner
        self.name = name
        self._shape = tuple(int(d) for d in shape)
        self._initializer = initializer  # the engine initializer, for Trace.weight
        self.trainable = bool(trainable)
        self.dtype = dtype
        self._engine_path = None  # set when first traced

    @property
    def shape(self):
        return self._shape

    @property
    def path(self):
        """Keras 3's Variable.path: the layer's name, then the weight's."""
        if self._engine_path is not None:
            return self._engine_path.replace(".", "/")
        return f"{self._owner.name}/{self.name}"

    def value(self):
        return TracedTensor(value_of(self))

    def _model(self):
        """The built model this variable's layer is part of (traced, so
        that the variable's path is known), or None."""
        model = getattr(self._owner, "_model", None)
        if model is not None and self._engine_path is None:
            model._built().weight_paths()  # the first trace names the variable
        return model

    def numpy(self):
        model = self._model()
        if model is None or self._engine_path is None:
            raise ValueError(f"variable '{self.path}' has no values until its layer is part "
                             "of a built model")
        return model._built().get_weight(self._engine_path)

    def assign(self, value):
        model = self._model()
        if model is None or self._engine_path is None or current_trace() is not None:
            raise ValueError(f"variable '{self.path}' can be assigned only outside a call, "
                             "once its layer is part of a built model (or use set_weights)")
        model._built().set_weight(self._engine_path, np.asarray(value, np.float32))

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def __repr__(self):
        return f"<Variable path={self.path} shape={self.shape}>"
