"""keras.preprocessing.sequence: ``pad_sequences`` (the same as keras.utils')."""

from ..utils import pad_sequences

__all__ = ["pad_sequences"]
