"""keras.preprocessing: the ``sequence`` helpers Keras 3 still keeps there."""

from . import sequence

__all__ = ["sequence"]
