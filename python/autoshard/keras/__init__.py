"""Keras 3's public API on autoshard's engine: ``import autoshard.keras as keras``.

Only argument conversion lives here; the layers, models, losses, optimizers,
metrics and distributions are the C++ API's (python/src/native.cc). Names
implemented and where they depart from Keras: docs/python.md.
"""

from . import activations, callbacks, distribution, layers, losses, metrics, models, optimizers, utils
from . import constraints, initializers, ops, preprocessing, regularizers, saving
from .models import Input, Model, Sequential

__all__ = [
    "Input",
    "Model",
    "Sequential",
    "activations",
    "callbacks",
    "constraints",
    "distribution",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "models",
    "ops",
    "optimizers",
    "preprocessing",
    "regularizers",
    "saving",
    "utils",
]
