"""autoshard.TensorParallel over a KerasHub model
(python/autoshard/tensor_parallel.py): the task laid out anew over
``world_size`` devices. See docs/keras-hub.md, "autoshard.TensorParallel".
"""

from .. import _checks
from .models import Backbone, _Task


def task_of(model):
    """The task that runs a keras_hub model (a Backbone's own), else None."""
    if isinstance(model, Backbone):
        return model._task
    return model if isinstance(model, _Task) else None


class _CurrentPlan:
    """The task's plan when read (``tp.plan``): a first fit re-plans the
    training step, so the layout is the task's now, not compile's."""

    def __init__(self, task):
        self._task = task

    def __getattr__(self, name):
        return getattr(self._task.plan, name)

    def __repr__(self):
        return repr(self._task.plan)


def device_mesh_of(spec):
    """A keras.distribution.DeviceMesh of a mesh string ("data=1,model=2")."""
    from ..keras.distribution import DeviceMesh

    axes = [a.split("=") for a in spec.split(",")] if spec else [("data", "1")]
    return DeviceMesh(tuple(int(n) for _, n in axes), tuple(name for name, _ in axes))


_TP_LOSSES = ("auto", "sparse_categorical_crossentropy", None)
_TP_METRICS = ("accuracy", "sparse_categorical_accuracy", "auto")


def tensor_parallel(task, world_size, optimizer, loss, metrics, kwargs):
    """TensorParallel.compile of a keras_hub model: AutoShard lays the task
    out over ``world_size`` in-process devices (choosing the mesh as
    ``sharding="auto"`` does; the weights kept), and the task compiles with
    ``optimizer``. The head gives logits, so the loss is the sparse
    categorical cross-entropy of logits (the quick start's
    "sparse_categorical_crossentropy", KerasHub's "auto"); fit and evaluate
    report the accuracy. Returns the plan (read when used)."""
    for k in ("jit_compile", "run_eagerly", "steps_per_execution"):
        kwargs.pop(k, None)
    if kwargs:
        raise ValueError(f"TensorParallel.compile: unsupported argument(s) "
                         f"{', '.join(sorted(kwargs))}")
    loss_name = loss if loss is None or isinstance(loss, str) else type(loss).__name__
    if loss_name not in _TP_LOSSES + ("SparseCategoricalCrossentropy",):
        raise ValueError(f"TensorParallel.compile: a {type(task).__name__} trains on the sparse "
                         "categorical cross-entropy of its logits (loss="
                         f"\"sparse_categorical_crossentropy\"), not {_checks.shown(loss)}")
    for m in metrics if isinstance(metrics, (list, tuple)) else ([] if metrics is None
                                                                  else [metrics]):
        if m not in _TP_METRICS:
            raise ValueError(f"TensorParallel.compile: metric {m!r}: a keras_hub model reports "
                             "the loss and its accuracy (metrics=[\"accuracy\"])")
    task._native.set_placement("", world_size if world_size > 1 else 0, "auto")
    task.compile(optimizer=optimizer)
    return _CurrentPlan(task)
