"""``model.layers`` of a model the file reader loaded (load_model of a file
holding only Keras's own classes, which the C++ reader builds).

Such a model has no Python layer objects of its own: its layers live in the
engine. Keras users still walk ``model.layers`` to freeze a base before
fine-tuning (``for layer in base.layers[:-1]: layer.trainable = False``),
to read one layer's weights, or to look a layer up by name. Each entry here
is a handle on one layer of the file's architecture (Keras 3's config
form, whatever format the file had): an object of the stock class where
keras.layers has it (so ``isinstance(layer, keras.layers.BatchNormalization)``
holds), built from the layer's config by the Keras layer table; its
``weights`` are the loaded model's; ``trainable`` starts as the file says and is read at compile, as
for any layer. A handle cannot be called on new inputs: its weights belong
to the loaded model, and a call would build a new layer with fresh ones.
"""

from . import layers as _layers

# Keras's model classes, whose configs nest layers of their own.
_MODEL_CLASSES = ("Functional", "Model", "Sequential")


class FileLayer(_layers.Layer):
    """A layer of a loaded model with no stock Python class here (an
    InputLayer, a nested model, a class only the file reader builds)."""

    def __init__(self, entry, inner):
        # No engine layer of its own: Layer.__init__ is not called.
        self._entry = entry
        self._inner = inner  # a nested model's layers (handles), else []

    @property
    def name(self):
        return self._entry["config"].get("name", "")

    @property
    def class_name(self):
        return self._entry.get("class_name", "")

    @property
    def layers(self):
        """A nested model's layers (Keras's model.layers), else []."""
        return list(self._inner)

    def _python_layers(self):
        return [layer for layer in self._inner
                if getattr(layer, "class_name", None) != "InputLayer"]

    def get_config(self):
        return dict(self._entry["config"])

    def __repr__(self):
        return f"<{self.class_name} name={self.name} (read from a file)>"


def _nested_entries(entry):
    layers = entry.get("config", {}).get("layers", [])
    return layers if isinstance(layers, list) else []


def _handle(entry, model):
    class_name = entry.get("class_name", "")
    config = entry.get("config", {})
    layer = None
    cls = getattr(_layers, class_name, None) if class_name in _layers.__all__ else None
    if isinstance(cls, type) and issubclass(cls, _layers.Layer):
        # Built by the Keras layer table from the file's config (it reads
        # every field Keras writes, as the file reader did), not by the
        # class's constructor.
        try:
            native = _layers._from_table(class_name, config)
        except Exception:  # noqa: BLE001 (the table refuses it here: a plain handle)
            native = None
        if native is not None:
            layer = cls.__new__(cls)
            _layers.Layer.__init__(layer, native)
    if layer is None:
        inner = [_handle(e, model) for e in _nested_entries(entry)] \
            if class_name in _MODEL_CLASSES else []
        layer = FileLayer(entry, inner)
    layer._model = model
    layer._file_handle = True
    layer._trainable = bool(config.get("trainable", True))
    return layer


def file_layers(model, architecture):
    """The handles of ``model``'s layers from its architecture (a Keras 3
    model config): a functional model's InputLayers then its layers, a
    Sequential's layers without its InputLayer (Keras 3's
    Sequential.layers)."""
    handles = [_handle(e, model) for e in _nested_entries(architecture)]
    if architecture.get("class_name") == "Sequential":
        handles = [h for h in handles if getattr(h, "class_name", None) != "InputLayer"]
    return handles
