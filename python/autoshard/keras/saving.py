"""keras.saving: ``save_model``, ``load_model``, ``save_weights`` and ``load_weights``.

Files are read and written by the C++ readers and writers of Keras files
(autoshard/io/keras_model.h; docs/keras-files.md): a Keras 3 ``.keras`` zip,
a Keras 2 ``.h5`` and, for loading (or ``save_format="tfjs"``), a
TensorFlow.js ``model.json`` or its directory. How a model built in Python
is described to them: _model_files.py. Missing or unreadable files raise
OSError, files whose content autoshard cannot use raise ValueError.
Classes of Python code a config may name are registered in _registry.py
(``register_keras_serializable``) or given as ``custom_objects``.
"""

from ._model_files import load_weights, save_model, save_weights
from ._registry import get_registered_name, get_registered_object, register_keras_serializable
from .models import load_model

__all__ = ["load_model", "save_model", "save_weights", "load_weights",
           "register_keras_serializable", "get_registered_object", "get_registered_name"]
