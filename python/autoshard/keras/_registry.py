"""The one registry of classes a Keras config may name: keras.layers' and
keras.models' own, classes registered with
``keras.saving.register_keras_serializable`` and those a call gives as
``custom_objects``. Model.from_config, model_from_json, clone_model and
load_model look classes up here (keras/src/saving/object_registration.py
defines the names: "package>name")."""

_REGISTERED = {}  # "package>name" -> class or function


def register_keras_serializable(package="Custom", name=None):
    """keras.saving.register_keras_serializable: a decorator registering a
    class (or function) as ``package>name`` (name: the class's own)."""
    if not isinstance(package, str) or ">" in package:
        raise ValueError(f"register_keras_serializable: package must be a string without '>', "
                         f"got {package!r}")

    def decorate(obj):
        key = f"{package}>{name or obj.__name__}"
        if not callable(obj):
            raise ValueError(f"register_keras_serializable: {obj!r} is not a class or function")
        _REGISTERED[key] = obj
        obj._registered_name = key
        return obj

    return decorate


def get_registered_name(obj):
    """The name ``obj`` was registered under, else its own name."""
    return getattr(obj, "_registered_name", None) or getattr(obj, "__name__", type(obj).__name__)


def get_registered_object(name, custom_objects=None, module_objects=None):
    """The class or function registered (or given in ``custom_objects``) as
    ``name``; None when there is none."""
    for table in (custom_objects or {}, _REGISTERED, module_objects or {}):
        if name in table:
            return table[name]
    return None


def lookup(entry, custom_objects, what):
    """The class a config entry names ({"class_name", "registered_name",
    "module"}): custom_objects first (by registered or class name), then
    the registry, then keras.layers / keras.models. One ValueError naming
    the class and what to do otherwise."""
    from . import layers, models

    class_name = entry.get("class_name")
    registered = entry.get("registered_name") or class_name
    custom = custom_objects or {}
    for key in (registered, class_name):
        if key in custom:
            return custom[key]
    for key in (registered, class_name):
        if key in _REGISTERED:
            return _REGISTERED[key]
    builtin = {"Functional": models.Model, "Model": models.Model,
               "Sequential": models.Sequential}.get(class_name)
    if builtin is None and class_name in layers.__all__:
        builtin = getattr(layers, class_name)
    if builtin is None:
        raise ValueError(f"{what}: unknown class '{registered}': register it with "
                         "@keras.saving.register_keras_serializable() or pass it in "
                         f"custom_objects={{'{class_name}': {class_name}}}")
    return builtin
