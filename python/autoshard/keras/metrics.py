"""keras.metrics: the metrics compile() accepts, by name or object.

Each is the engine's (nn/metrics.h): computed from the step's predictions and
targets, summed over an epoch's batches and read once at its end, so that a
ratio such as Precision or AUC is the epoch's, on any mesh. A metric is
logged under the name it was given (``metrics=["acc"]`` logs ``acc``, as
Keras does).
"""

import numpy as np

from .. import _checks, _native
from . import _custom_metrics


class Metric(_custom_metrics.MetricAPI):
    """Keras's Metric. The stock metrics here are the engine's; a subclass
    with ``update_state``/``result`` (and state from ``add_variable``) is a
    custom metric (_custom_metrics.py): its update runs on each batch's
    targets and predictions, and its state is summed over the epoch."""

    def __init__(self, *args, **kwargs):
        if args and isinstance(args[0], _native.Metric):  # a stock metric: (native, name)
            self._stock(*args, **kwargs)
        else:  # Keras's Metric(dtype=None, name=None), from a subclass
            _custom_metrics.start(self, *args, **kwargs)

    def _stock(self, native, name=None):
        if name is not None and name != native.name:
            native = _native.metric_named(native, _checks.name(name, "metrics"))
        self._native = native
        self.name = native.name


def _no_extra(kwargs, cls):
    kwargs.pop("dtype", None)
    if kwargs:
        raise ValueError(f"{cls}: unsupported argument(s) {', '.join(sorted(kwargs))}")


def _named(engine_name):
    class _M(Metric):
        def __init__(self, name=None, **kwargs):
            _no_extra(kwargs, engine_name)
            super().__init__(_native.metric_by_name(engine_name), name)

    return _M


Accuracy = _named("accuracy")
SparseCategoricalAccuracy = _named("sparse_categorical_accuracy")
MeanAbsoluteError = _named("mae")
MeanSquaredError = _named("mse")


class BinaryAccuracy(Metric):
    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5):
        super().__init__(_native.binary_accuracy(
            _checks.number(threshold, "threshold", "BinaryAccuracy", 0, 1)), name)


class SparseTopKCategoricalAccuracy(Metric):
    def __init__(self, k=5, name="sparse_top_k_categorical_accuracy", dtype=None):
        super().__init__(_native.sparse_top_k_categorical_accuracy(
            _checks.integer(k, "k", "SparseTopKCategoricalAccuracy", 1, _checks.INT32_MAX)), name)


class CategoricalAccuracy(Metric):
    def __init__(self, name="categorical_accuracy", dtype=None):
        super().__init__(_native.metric_categorical_accuracy(), name)


class TopKCategoricalAccuracy(Metric):
    def __init__(self, k=5, name="top_k_categorical_accuracy", dtype=None):
        super().__init__(_native.metric_top_k_categorical_accuracy(
            _checks.integer(k, "k", "TopKCategoricalAccuracy", 1, _checks.INT32_MAX)), name)


class MeanAbsolutePercentageError(Metric):
    def __init__(self, name="mean_absolute_percentage_error", dtype=None):
        super().__init__(_native.metric_mape(), name)


def _threshold(thresholds, cls):
    """Keras's ``thresholds``: None, a number or a list of one (a list of
    several gives one value per threshold, which is not one number to log)."""
    if thresholds is None:
        return None
    if isinstance(thresholds, (list, tuple)):
        if len(thresholds) != 1:
            raise ValueError(f"{cls}: give one threshold, not {len(thresholds)} (a value per "
                             f"threshold is not one number to log); use one metric per threshold")
        thresholds = thresholds[0]
    return _checks.number(thresholds, "thresholds", cls, 0, 1)


def _optional_int(value, what, cls):
    return -1 if value is None else _checks.integer(value, what, cls, 0, _checks.INT32_MAX)


class _Confusion(Metric):
    _kind = ""

    def __init__(self, thresholds=None, name=None, dtype=None, top_k=None, class_id=None):
        cls = type(self).__name__
        top = _optional_int(top_k, "top_k", cls)
        super().__init__(_native.metric_confusion(self._kind, _threshold(thresholds, cls),
                                                  max(top, 0), _optional_int(class_id, "class_id",
                                                                             cls)), name)


class TruePositives(_Confusion):
    _kind = "true_positives"

    def __init__(self, thresholds=None, name=None, dtype=None):
        super().__init__(thresholds, name)


class FalsePositives(_Confusion):
    _kind = "false_positives"

    def __init__(self, thresholds=None, name=None, dtype=None):
        super().__init__(thresholds, name)


class TrueNegatives(_Confusion):
    _kind = "true_negatives"

    def __init__(self, thresholds=None, name=None, dtype=None):
        super().__init__(thresholds, name)


class FalseNegatives(_Confusion):
    _kind = "false_negatives"

    def __init__(self, thresholds=None, name=None, dtype=None):
        super().__init__(thresholds, name)


class Precision(_Confusion):
    _kind = "precision"

    def __init__(self, thresholds=None, top_k=None, class_id=None, name=None, dtype=None):
        super().__init__(thresholds, name, dtype, top_k, class_id)


class Recall(_Confusion):
    _kind = "recall"

    def __init__(self, thresholds=None, top_k=None, class_id=None, name=None, dtype=None):
        super().__init__(thresholds, name, dtype, top_k, class_id)


class AUC(Metric):
    def __init__(self, num_thresholds=200, curve="ROC", summation_method="interpolation",
                 name=None, dtype=None, thresholds=None, multi_label=False, num_labels=None,
                 label_weights=None, from_logits=False):
        if thresholds is not None or label_weights is not None:
            raise ValueError("AUC: thresholds and label_weights are not supported (the "
                             "thresholds are num_thresholds spread evenly over [0, 1])")
        n = _checks.integer(num_thresholds, "num_thresholds", "AUC", 2, 1 << 20)
        super().__init__(_native.metric_auc(n, str(curve).upper(), str(summation_method).lower(),
                                            bool(multi_label), bool(from_logits)), name)


class FBetaScore(Metric):
    def __init__(self, average=None, beta=1.0, threshold=None, name="fbeta_score", dtype=None):
        self._check_average(average)
        t = -1.0 if threshold is None else _checks.number(threshold, "threshold", "FBetaScore")
        super().__init__(_native.metric_fbeta(average, _checks.number(beta, "beta", "FBetaScore"),
                                              t), name)

    @staticmethod
    def _check_average(average):
        if average not in ("micro", "macro", "weighted"):
            raise ValueError(f"F-score: average={average!r} is not supported: give 'micro', "
                             f"'macro' or 'weighted' (Keras's default None gives a score per "
                             f"class, which is not one number to log)")


class F1Score(FBetaScore):
    def __init__(self, average=None, threshold=None, name="f1_score", dtype=None):
        super().__init__(average, 1.0, threshold, name)


class R2Score(Metric):
    def __init__(self, class_aggregation="uniform_average", num_regressors=0, name="r2_score",
                 dtype=None):
        super().__init__(_native.metric_r2(
            str(class_aggregation),
            _checks.integer(num_regressors, "num_regressors", "R2Score", 0, _checks.INT32_MAX)),
            name)


class MeanMetricWrapper(Metric):
    """Keras's wrapper of a metric function ``fn(y_true, y_pred)``: the mean
    of what it returns over every element of the epoch's batches. ``fn``
    runs eagerly on each batch's NumPy arrays (keras.ops computes on them)."""

    def __init__(self, fn, name=None, dtype=None, **kwargs):
        def sums(y_true, y_pred):
            values = np.asarray(fn(y_true, y_pred, **kwargs), np.float64)
            return float(values.sum()), float(values.size)

        super().__init__(_native.PyMetric(name or getattr(fn, "__name__", "metric"), sums))


def get(identifier):
    """A Metric from a Metric object, a Keras name ("accuracy", "acc", "mae",
    ...) or a function (y_true, y_pred), logged under that name."""
    if isinstance(identifier, Metric):
        return identifier
    if callable(identifier) and not isinstance(identifier, type):
        return MeanMetricWrapper(identifier)
    if isinstance(identifier, str):
        return Metric(_native.metric_by_name(identifier), identifier)
    raise ValueError(f"metric must be a Keras metric name, a keras.metrics object or a "
                     "function (y_true, y_pred), "
                     f"not {identifier!r}")
