"""keras.utils: set_random_seed, to_categorical, normalize, pad_sequences."""

import random

import numpy as np

_seed = None


def set_random_seed(seed):
    """Seeds Python's and NumPy's generators, fit's shuffling and the initial
    weights (and dropout masks) of models built from now on."""
    from .. import _checks

    global _seed
    # Checked now: a seed past uint64 was kept and refused by every model
    # built afterwards (a pybind11 TypeError).
    seed = _checks.integer(seed, "seed", "set_random_seed", 0, 2**64 - 1)
    _seed = seed
    random.seed(seed)
    np.random.seed(seed % 2**32)


def seed():
    """The seed set by set_random_seed, or None."""
    return _seed


def record_init_args(cls):
    """Makes ``cls``'s instances keep the arguments of their outermost
    constructor (``self._init_args``, by parameter name): what model.save
    writes as the Keras config of layers, optimizers and losses."""
    import functools
    import inspect

    init = cls.__dict__.get("__init__")
    if init is None or getattr(init, "_records_args", False):
        return
    signature = inspect.signature(init)

    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        if "_init_args" not in self.__dict__:  # the outermost constructor
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError:
                bound = None  # init itself raises the error
            if bound is not None:
                bound.apply_defaults()
                given = dict(bound.arguments)
                given.pop("self", None)
                given.update(given.pop("kwargs", {}) or {})
                self._init_args = given
        init(self, *args, **kwargs)

    wrapped._records_args = True
    cls.__init__ = wrapped


# keras.utils' array helpers, NumPy in and out, as Keras 3 defines them
# (keras/src/utils/numerical_utils.py and sequence_utils.py).


def to_categorical(x, num_classes=None):
    """One-hot rows of the class ids ``x``: shape ``x.shape + (num_classes,)``.

    As Keras: a last axis of size 1 is dropped first, ``num_classes``
    defaults to ``max(x) + 1``, floats are truncated to ids and the result is
    float64. Unlike Keras, an id outside ``[0, num_classes)`` is a
    ValueError (Keras wraps negative ids around silently).
    """
    array = np.asarray(x)
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        raise ValueError("to_categorical: the class ids contain NaN or infinity")
    ids = array.astype(np.int64)
    shape = ids.shape
    if len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    ids = ids.reshape(-1)
    if num_classes is None or num_classes == 0:
        num_classes = int(ids.max()) + 1 if ids.size else 0
    from .. import _checks

    num_classes = _checks.integer(num_classes, "num_classes", "to_categorical", 0, 2**31 - 1)
    if ids.size and (ids.min() < 0 or ids.max() >= num_classes):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise ValueError(f"to_categorical: class id {bad} is outside [0, {num_classes}): "
                         f"pass num_classes larger than the largest id")
    one_hot = np.zeros((ids.size, num_classes))
    one_hot[np.arange(ids.size), ids] = 1
    return one_hot.reshape(tuple(shape) + (num_classes,))


def normalize(x, axis=-1, order=2):
    """``x`` divided by its ``order``-norm along ``axis`` (zero norms left as 1)."""
    if not isinstance(order, int) or isinstance(order, bool) or order < 1:
        raise ValueError(f"normalize: order must be an int >= 1, got {order!r}")
    x = np.asarray(x)
    norm = np.atleast_1d(np.linalg.norm(x, order, axis))
    norm[norm == 0] = 1
    return x / np.expand_dims(norm, axis if axis is not None else -1)


def pad_sequences(sequences, maxlen=None, dtype="int32", padding="pre", truncating="pre",
                  value=0.0):
    """A list of sequences as one array ``(len(sequences), maxlen) + item shape``.

    Shorter sequences are filled with ``value`` before (``padding="pre"``,
    Keras's default) or after them; longer ones lose their first
    (``truncating="pre"``) or last items. ``maxlen`` defaults to the longest
    sequence.
    """
    for name, where in (("padding", padding), ("truncating", truncating)):
        if where not in ("pre", "post"):
            raise ValueError(f"pad_sequences: {name} must be 'pre' or 'post', got {where!r}")
    if not hasattr(sequences, "__len__"):
        raise ValueError("pad_sequences: sequences must be a list of sequences")
    arrays = []
    for i, s in enumerate(sequences):
        if not hasattr(s, "__len__"):
            raise ValueError(f"pad_sequences: sequence {i} is not a sequence ({type(s).__name__})")
        arrays.append(np.asarray(s, dtype=dtype) if len(s) else None)
    item_shape = next((a.shape[1:] for a in arrays if a is not None), ())
    if maxlen is None:
        maxlen = max((len(s) for s in sequences), default=0)
    from .. import _checks

    maxlen = _checks.integer(maxlen, "maxlen", "pad_sequences", 0, 2**31 - 1)
    out = np.full((len(arrays), maxlen) + item_shape, value, dtype=dtype)
    for i, a in enumerate(arrays):
        if a is None or maxlen == 0:
            continue
        if a.shape[1:] != item_shape:
            raise ValueError(f"pad_sequences: the items of sequence {i} have shape "
                             f"{a.shape[1:]}, the first sequence's have {item_shape}")
        kept = a[-maxlen:] if truncating == "pre" else a[:maxlen]
        if padding == "pre":
            out[i, maxlen - len(kept):] = kept
        else:
            out[i, :len(kept)] = kept
    return out


# keras.utils' names for the saving registry (keras.saving's are the same).
from ._registry import (get_registered_name, get_registered_object,  # noqa: E402
                        register_keras_serializable)

# keras.utils.PyDataset (and Keras 2's name for it, Sequence).
from ._datasets import PyDataset  # noqa: E402

Sequence = PyDataset

# keras.utils.plot_model and model_to_dot (Graphviz's dot).
from ._plot import model_to_dot, plot_model  # noqa: E402
