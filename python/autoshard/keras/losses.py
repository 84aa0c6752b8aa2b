"""keras.losses: Keras 3's loss classes (and names), the engine's losses."""

from .. import _checks, _native
from . import _custom_losses
from ._custom_layers import snake_case as _snake_case
from . import utils as _utils


class Loss:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _utils.record_init_args(cls)  # model.save writes them as the compile config

    def __init__(self, kind=None, from_logits=False, label_smoothing=0.0, delta=1.0, name=None,
                 reduction="sum_over_batch_size", dtype=None):
        if kind is None or "call" in type(self).__dict__:  # a user's subclass with call
            _reduction({"reduction": reduction})
            self.name = name or _snake_case(type(self).__name__)
            self._native = _native.PyLoss(_custom_losses.traced_loss(self.call, self.name))
            return
        self.name = name or kind
        where = type(self).__name__
        # What the sample-weighted form of the loss is made from (_native.sample_weighted_loss).
        self._spec = (kind, bool(from_logits), float(label_smoothing), float(delta))
        self._native = _native.loss(kind, bool(from_logits),
                                    _checks.number(label_smoothing, "label_smoothing", where, 0, 1),
                                    _checks.number(delta, "delta", where, above=0))

    @classmethod
    def from_native(cls, native, name="loss"):
        """A Loss around the engine's loss ``native`` (one a model file's
        compile config gave)."""
        loss = cls.__new__(cls)
        loss.name, loss._native = name, native
        return loss


class SparseCategoricalCrossentropy(Loss):
    def __init__(self, from_logits=False, name="sparse_categorical_crossentropy", **kwargs):
        _reduction(kwargs)
        super().__init__("sparse_categorical_crossentropy", from_logits=from_logits, name=name)


class CategoricalCrossentropy(Loss):
    def __init__(self, from_logits=False, label_smoothing=0.0, name="categorical_crossentropy",
                 **kwargs):
        _reduction(kwargs)
        super().__init__("categorical_crossentropy", from_logits, label_smoothing, name=name)


class BinaryCrossentropy(Loss):
    def __init__(self, from_logits=False, label_smoothing=0.0, name="binary_crossentropy",
                 **kwargs):
        _reduction(kwargs)
        super().__init__("binary_crossentropy", from_logits, label_smoothing, name=name)


class MeanSquaredError(Loss):
    def __init__(self, name="mean_squared_error", **kwargs):
        _reduction(kwargs)
        super().__init__("mean_squared_error", name=name)


class MeanAbsoluteError(Loss):
    def __init__(self, name="mean_absolute_error", **kwargs):
        _reduction(kwargs)
        super().__init__("mean_absolute_error", name=name)


class Huber(Loss):
    def __init__(self, delta=1.0, name="huber_loss", **kwargs):
        _reduction(kwargs)
        super().__init__("huber", delta=delta, name=name)


class LossFunctionWrapper(Loss):
    """Keras's wrapper of a loss function ``fn(y_true, y_pred, **kwargs)``
    of keras.ops (what compile makes of a function)."""

    def __init__(self, fn, reduction="sum_over_batch_size", name=None, dtype=None, **kwargs):
        _reduction({"reduction": reduction})
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "loss")
        self._native = _native.PyLoss(_custom_losses.traced_loss(
            lambda y_true, y_pred: fn(y_true, y_pred, **kwargs), self.name))


def _reduction(kwargs):
    if kwargs.pop("reduction", "sum_over_batch_size") != "sum_over_batch_size":
        raise ValueError("losses: only reduction='sum_over_batch_size' is supported")
    if kwargs:
        raise ValueError(f"losses: unsupported argument(s) {', '.join(sorted(kwargs))}")


_ALIASES = {"mse": "mean_squared_error", "mae": "mean_absolute_error", "huber_loss": "huber"}

# --- Keras's loss functions (keras/src/losses/losses.py): per example, over
# the last axis, on arrays or traced tensors. Given to compile as they are,
# each is the engine's loss of its name (the classes' defaults).

_EPSILON = 1e-7  # keras.config.epsilon(): probabilities are clipped to [eps, 1 - eps]


def mean_squared_error(y_true, y_pred):
    from . import ops
    return ops.mean(ops.square(ops.subtract(y_pred, y_true)), axis=-1)


def mean_absolute_error(y_true, y_pred):
    from . import ops
    return ops.mean(ops.abs(ops.subtract(y_pred, y_true)), axis=-1)


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    from . import ops
    if label_smoothing:
        y_true = ops.add(ops.multiply(y_true, 1.0 - label_smoothing), 0.5 * label_smoothing)
    if from_logits:  # softplus(x) - t x
        values = ops.subtract(ops.softplus(y_pred), ops.multiply(y_true, y_pred))
    else:
        p = ops.clip(y_pred, _EPSILON, 1.0 - _EPSILON)
        values = ops.multiply(-1.0, ops.add(ops.multiply(y_true, ops.log(p)), ops.multiply(
            ops.subtract(1.0, y_true), ops.log(ops.subtract(1.0, p)))))
    return ops.mean(values, axis=axis)


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    from . import ops
    if label_smoothing:
        classes = y_pred.shape[axis]
        y_true = ops.add(ops.multiply(y_true, 1.0 - label_smoothing),
                         label_smoothing / classes)
    if from_logits:
        logp = ops.log_softmax(y_pred, axis=axis)
    else:
        p = ops.divide(y_pred, ops.sum(y_pred, axis=axis, keepdims=True))
        logp = ops.log(ops.clip(p, _EPSILON, 1.0 - _EPSILON))
    return ops.multiply(-1.0, ops.sum(ops.multiply(y_true, logp), axis=axis))


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, axis=-1):
    from . import ops
    classes = y_pred.shape[axis]
    return categorical_crossentropy(ops.one_hot(y_true, classes), y_pred, from_logits,
                                    axis=axis)


def huber(y_true, y_pred, delta=1.0):
    from . import ops
    error = ops.abs(ops.subtract(y_pred, y_true))
    small = ops.minimum(error, delta)
    return ops.mean(ops.add(ops.multiply(0.5, ops.square(small)),
                            ops.multiply(delta, ops.subtract(error, small))), axis=-1)


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error

_FUNCTIONS = {mean_squared_error: "mean_squared_error", mean_absolute_error: "mean_absolute_error",
              binary_crossentropy: "binary_crossentropy",
              categorical_crossentropy: "categorical_crossentropy",
              sparse_categorical_crossentropy: "sparse_categorical_crossentropy",
              huber: "huber"}


def get(identifier):
    """A Loss from a Loss object or a Keras name ("sparse_categorical_crossentropy", "mse", ...)."""
    if isinstance(identifier, Loss):
        return identifier
    if identifier in _FUNCTIONS:  # keras.losses.binary_crossentropy: the engine's, by name
        loss = get(_FUNCTIONS[identifier])
        loss.name = identifier.__name__
        return loss
    if callable(identifier) and not isinstance(identifier, type):
        return LossFunctionWrapper(identifier)
    if isinstance(identifier, str):
        loss = Loss.__new__(Loss)
        loss.name = identifier
        loss._native = _native.loss_by_name(_ALIASES.get(identifier, identifier))
        loss._spec = (_ALIASES.get(identifier, identifier), False, 0.0, 1.0)
        return loss
    raise ValueError(f"loss must be a Keras loss name, a keras.losses object or a function "
                     f"(y_true, y_pred), not {identifier!r}")
