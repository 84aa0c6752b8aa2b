"""keras.metrics: the metrics compile() accepts, by name or object."""

from .. import _checks, _native


class Metric:
    def __init__(self, native, name=None):
        self._native = native
        self.name = name or native.name


def _named(engine_name):
    class _M(Metric):
        def __init__(self, name=None, **kwargs):
            kwargs.pop("dtype", None)
            if kwargs:
                raise ValueError(f"metrics: unsupported argument(s) {', '.join(sorted(kwargs))}")
            super().__init__(_native.metric_by_name(engine_name))

    return _M


Accuracy = _named("accuracy")
SparseCategoricalAccuracy = _named("sparse_categorical_accuracy")
MeanAbsoluteError = _named("mae")
MeanSquaredError = _named("mse")


class BinaryAccuracy(Metric):
    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5):
        super().__init__(_native.binary_accuracy(
            _checks.number(threshold, "threshold", "BinaryAccuracy", 0, 1)))


class SparseTopKCategoricalAccuracy(Metric):
    def __init__(self, k=5, name="sparse_top_k_categorical_accuracy", dtype=None):
        super().__init__(_native.sparse_top_k_categorical_accuracy(
            _checks.integer(k, "k", "SparseTopKCategoricalAccuracy", 1, _checks.INT32_MAX)))


def get(identifier):
    """A Metric from a Metric object or a Keras name ("accuracy", "mae", ...)."""
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        return Metric(_native.metric_by_name(identifier))
    raise ValueError(f"metric must be a Keras metric name or a keras.metrics object, "
                     f"not {identifier!r}")
