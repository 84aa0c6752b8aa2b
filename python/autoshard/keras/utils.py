"""keras.utils: set_random_seed."""

import random

import numpy as np

_seed = None


def set_random_seed(seed):
    """Seeds Python's and NumPy's generators, fit's shuffling and the initial
    weights (and dropout masks) of models built from now on."""
    global _seed
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    _seed = seed
    random.seed(seed)
    np.random.seed(seed % 2**32)


def seed():
    """The seed set by set_random_seed, or None."""
    return _seed
