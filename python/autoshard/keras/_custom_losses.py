"""Custom losses: a function ``(y_true, y_pred)`` of keras.ops, or a
keras.losses.Loss subclass with ``call(y_true, y_pred)``, traced into the
step graph (autoshard._native.PyLoss) where the engine's losses are.

As Keras's "sum_over_batch_size" reduction, what the function returns
(one loss per example, or per element) is averaged over all its elements.
Targets reach it as float32 (integer targets are cast, as for Keras's
losses on numbers).
"""

from ._traced import TracedTensor, tracing


def traced_loss(fn, name):
    """The engine's call of a custom loss: fn(y_true, y_pred) on traced
    tensors, averaged to the scalar the engine minimises."""

    def call(trace, predictions, targets):
        from . import ops
        with tracing(trace):
            out = fn(TracedTensor(targets), TracedTensor(predictions))
            if isinstance(out, (list, tuple, dict)):
                raise ValueError(f"loss '{name}' returned a {type(out).__name__}; a loss "
                                 "returns one tensor")
            out = ops.convert_to_tensor(out)
            if out.shape:
                out = ops.mean(out)
            return out._value

    return call
