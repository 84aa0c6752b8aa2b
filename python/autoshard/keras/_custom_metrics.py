"""Custom metrics: subclasses of keras.metrics.Metric with ``add_variable``,
``update_state``, ``result`` and ``reset_state``, in compile().

The engine computes a metric from each batch's targets and predictions and
adds per-batch sums over the epoch (nn/metrics.h), so that a sharded run
gives one device's numbers. A custom metric is fitted to that: for each
batch its state is reset, ``update_state(y_true, y_pred)`` runs on the
batch's NumPy arrays (keras.ops computes on them eagerly), and its state
variables are the batch's sums; at the epoch's end (and for each batch's
log) the variables are set to the epoch's sums and ``result()`` is read.
That is exact for state that adds across batches: totals and counts, as
in Keras's Mean, Sum and the confusion counts (Keras sums metric variables
across replicas the same way, aggregation="sum"); other aggregations are
refused.

MetricAPI holds what Keras's Metric offers a subclass; keras.metrics.Metric
inherits it.
"""

import numpy as np

from .. import _native


class MetricVariable:
    """A metric's state (Keras's Metric.add_variable): a NumPy array with
    ``assign``, ``assign_add``, ``assign_sub`` and arithmetic."""

    def __init__(self, shape, initializer, dtype, name):
        from . import initializers
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype or "float32")
        self.name = name
        self._initializer = initializers.get(initializer or "zeros")
        self._value = None
        self.reset()

    def reset(self):
        self.assign(self._initializer(self.shape) if self.shape else
                    self._initializer((1,)).reshape(()))

    def assign(self, value):
        value = np.asarray(value, self.dtype)
        if value.shape != self.shape:
            value = np.broadcast_to(value, self.shape)
        self._value = np.array(value, self.dtype)
        return self

    def assign_add(self, value):
        return self.assign(self._value + np.asarray(value, self.dtype))

    def assign_sub(self, value):
        return self.assign(self._value - np.asarray(value, self.dtype))

    @property
    def value(self):
        return self._value

    def numpy(self):
        return self._value.copy()

    def __array__(self, dtype=None, copy=None):
        return self._value if dtype is None else self._value.astype(dtype)

    def __float__(self):
        return float(self._value)

    def __repr__(self):
        return f"<MetricVariable {self.name} shape={self.shape} value={self._value}>"


def _arith(name):
    def op(self, other):
        return getattr(self._value, name)(np.asarray(other))
    return op


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__pow__", "__gt__", "__lt__", "__ge__", "__le__",
              "__getitem__"):
    setattr(MetricVariable, _name, _arith(_name))
MetricVariable.__neg__ = lambda self: -self._value


def start(metric, dtype=None, name=None):
    """Keras's Metric.__init__(dtype=None, name=None) for a subclass."""
    if dtype not in (None, "float32", np.float32):
        raise ValueError(f"{type(metric).__name__}: only float32 metrics are supported, got "
                         f"dtype {dtype}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{type(metric).__name__}: name must be a string, got {name!r}")
    from ._custom_layers import snake_case
    metric.name = name or snake_case(type(metric).__name__)
    metric.dtype = "float32"
    metric._metric_variables = []
    metric._native = _native.PyStatefulMetric(metric.name, lambda y, p: _batch_sums(metric, y, p),
                                              lambda sums: _result_of(metric, sums))


def _batch_sums(metric, y_true, y_pred):
    """One batch's state, from a reset one, flattened (the engine adds it
    over the epoch's batches)."""
    metric.reset_state()
    metric.update_state(y_true, y_pred)
    return [float(v) for var in metric._metric_variables for v in np.ravel(var.value)]


def _result_of(metric, sums):
    at = 0
    for var in metric._metric_variables:
        n = int(np.prod(var.shape))
        var.assign(np.asarray(sums[at:at + n]).reshape(var.shape))
        at += n
    return float(np.asarray(metric.result(), np.float64))


class MetricAPI:
    """What keras.metrics.Metric offers a subclass."""

    def add_variable(self, shape=(), initializer="zeros", dtype=None, aggregation="sum",
                     name=None):
        if aggregation != "sum":
            raise ValueError(f"metric '{self.name}': add_variable(aggregation={aggregation!r}) "
                             "is not supported: a metric's state is summed over the epoch's "
                             "batches (keep totals and counts, and divide in result())")
        if dtype not in (None, "float32", "int32", "float64", np.float32, np.int32, np.float64):
            raise ValueError(f"metric '{self.name}': variable dtype {dtype} is not supported")
        var = MetricVariable(() if shape is None else shape, initializer, dtype,
                             name or f"variable_{len(self._metric_variables)}")
        self._metric_variables.append(var)
        return var

    def add_weight(self, shape=(), initializer=None, dtype=None, name=None, **kwargs):
        aggregation = kwargs.pop("aggregation", "sum")
        if kwargs:
            raise ValueError(f"metric '{self.name}': unsupported add_weight argument(s) "
                             f"{', '.join(sorted(kwargs))}")
        return self.add_variable(shape, initializer or "zeros", dtype, aggregation, name)

    @property
    def variables(self):
        return list(getattr(self, "_metric_variables", []))

    def reset_state(self):
        """Every state variable back to its initial value."""
        for var in self._metric_variables:
            var.reset()

    def update_state(self, *args, **kwargs):
        raise NotImplementedError(f"metric {type(self).__name__} defines no update_state")

    def result(self):
        raise NotImplementedError(f"metric {type(self).__name__} defines no result")

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self):
        return {"name": self.name, "dtype": getattr(self, "dtype", "float32")}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
