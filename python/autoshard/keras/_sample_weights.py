"""Keras's sample weights for fit, evaluate, train_on_batch and
test_on_batch: ``sample_weight`` (one weight per example, or per time step
of a sequence output [n, steps], per output as a list or dict),
``class_weight`` (a weight per class id, Keras's
data_adapter_utils.class_weight_to_sample_weights) and compile's
``weighted_metrics``. The weights travel packed into the targets' last axis
(autoshard/nn/sample_weights.h): [..., k] targets become [..., k + 1], class
ids [...] one-hot [..., classes + 1], float32.
"""

import numpy as np

from .. import _checks


def class_weights_to_sample_weights(y, class_weight, what):
    """Keras's rule: the class of each example is its target (rounded), or
    the argmax of a one-hot target; classes class_weight lacks weigh 1."""
    if not isinstance(class_weight, dict):
        raise ValueError(f"{what}: class_weight must be a dict of class id -> weight, got "
                         f"{_checks.shown(class_weight)}")
    y = np.asarray(y)
    if y.ndim > 1:
        y = np.argmax(y, axis=-1) if y.shape[-1] != 1 else np.squeeze(y, axis=-1)
    if y.ndim != 1:
        raise ValueError(f"{what}: class_weight needs one class per example (targets of shape "
                         f"(n,), (n, 1) or one-hot (n, classes)), got targets {y.shape}")
    ids = np.round(y).astype(np.int64)
    weights = np.ones(len(ids), dtype=np.float32)
    for cls, w in class_weight.items():
        weights[ids == int(cls)] = _checks.number(w, f"class_weight[{cls!r}]", what, minimum=0)
    return weights


def per_output(sample_weight, names, n, what, label="sample_weight"):
    """sample_weight as {output name: float32 [n] or [n, steps...]} (a list
    or dict per output, or one array for every output of a single-output
    model); pack checks a per-step weight's shape against the targets'."""
    if isinstance(sample_weight, dict):
        given = {k: v for k, v in sample_weight.items() if v is not None}
        unknown = [k for k in given if k not in names]
        if unknown:
            raise ValueError(f"{what}: {label} names '{unknown[0]}', not an output (the "
                             f"outputs: {', '.join(repr(k) for k in names)})")
    elif isinstance(sample_weight, (list, tuple)) and len(names) > 1:
        if len(sample_weight) != len(names):
            raise ValueError(f"{what}: {label} has {len(sample_weight)} entries for "
                             f"{len(names)} outputs")
        given = {k: v for k, v in zip(names, sample_weight) if v is not None}
    else:
        given = {k: sample_weight for k in names}
    out = {}
    for name, w in given.items():
        at = label if len(names) == 1 else f"{label}[{name!r}]"
        a = np.asarray(w)
        if a.dtype.kind not in "biuf":
            raise ValueError(f"{what}: {at} must hold numbers, not NumPy dtype {a.dtype}")
        if a.ndim == 2 and a.shape[1] == 1:
            a = a[:, 0]
        if a.ndim == 0 or a.shape[0] != n:
            raise ValueError(f"{what}: {at} must have one weight per example, shape ({n},), "
                             f"or one per time step, ({n}, steps), got {a.shape}")
        _checks.finite(a, at, what)
        if (a < 0).any():
            raise ValueError(f"{what}: {at} holds a negative weight ({a.min():g})")
        out[name] = a.astype(np.float32)
    return out


def pack(ys, weights, class_ids, classes=None):
    """The targets with their weights as one more entry of the last axis
    (weight 1 for outputs without weights); class_ids[name]: the output's
    targets are class ids, packed one-hot over ``classes``."""
    packed = {}
    for name, y in ys.items():
        w = weights.get(name)
        if w is None:
            w = np.ones(len(y), dtype=np.float32)
        if class_ids.get(name):
            if y.ndim >= 2 and y.shape[-1] == 1:
                y = y[..., 0]  # Keras's (n, 1) class ids
            if y.size and (y.min() < 0 or y.max() >= classes):
                raise ValueError(f"class id {int(y.min() if y.min() < 0 else y.max())} is not "
                                 f"one of the output's {classes} classes")
            t = np.eye(classes, dtype=np.float32)[y]
        else:
            t = y.astype(np.float32, copy=False)
            if t.ndim == 1:
                t = t[:, None]  # Keras's (n,) targets of an (n, 1) output
        # Keras's reduce_weighted_values: a weight per example spreads over
        # its values; one per time step ([n, steps], temporal sample
        # weights) weighs that step's loss, its rank expanded to the values'.
        lead = t.shape[:-1]
        if w.ndim > 1 and w.shape != lead[:w.ndim]:
            raise ValueError(f"sample_weight of shape {w.shape} does not match the targets' "
                             f"{lead} (one weight per example, or per time step)")
        spread = np.broadcast_to(w.reshape(w.shape + (1,) * (t.ndim - w.ndim)), lead + (1,))
        packed[name] = np.ascontiguousarray(np.concatenate([t, spread], axis=-1))
    return packed
