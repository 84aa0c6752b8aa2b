"""keras.utils: set_random_seed."""

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
