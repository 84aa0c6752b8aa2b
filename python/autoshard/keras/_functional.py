"""The functional surface around models: the graph of layer calls a model's
KerasTensors record (model.layers, get_layer, layer.input/output), calling
a model inside another (nested models), weights shared between models that
hold the same layer objects, and a model's Keras 3 config back into layers
(get_config/from_config, to_json/model_from_json, clone_model).

The engine gives each model its own weights. Keras shares one layer's
weights between every model that holds it (an autoencoder trained whole,
its encoder then used alone), so a layer here records which model last
changed its weights; another model holding the layer copies them before it
next runs or shows them.
"""

import itertools
import json
import os
import weakref
import zipfile

from .. import _checks
from . import _registry
from .tensors import Input, InputLayer, KerasTensor

# --- the graph of calls --------------------------------------------------------


def calls(outputs):
    """Every layer call reachable from ``outputs`` (their result
    KerasTensors), in the order they were made."""
    found, seen, stack = [], set(), list(outputs)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t._first is not None:  # another output of a call: the call is on output 0
            stack.append(t._first)
        elif t._history is not None:
            found.append(t)
            args = t._history[1]
            stack.extend(args if isinstance(args, list) else [args])
    found.sort(key=lambda t: t._order)
    return found


def _input_layer(tensor):
    """The InputLayer of a keras.Input result (Keras's model.layers[0])."""
    layer = tensor.__dict__.get("_input_layer")
    if layer is None:
        layer = InputLayer.__new__(InputLayer)
        layer.output = tensor
        tensor._input_layer = layer
    return layer


def model_layers(model, flat=False):
    """Keras's model.layers: a functional model's InputLayers, then each
    layer once, in call order (a nested model's calls as that model, unless
    ``flat``); a Sequential's layers."""
    if hasattr(model, "_layers"):  # a Sequential (whose entries are layers only)
        return list(model._layers)
    if "_file_layers" in model.__dict__:  # read by the file reader: handles
        return list(model._file_layers)
    inputs = getattr(model, "_input_tensors", None)
    if inputs is None:
        return []
    out = [_input_layer(t) for t in inputs]
    seen = set()
    for t in calls(model._output_tensors):
        layer = t._history[0] if flat else t.__dict__.get("_nested_in") or t._history[0]
        if id(layer) not in seen:
            seen.add(id(layer))
            out.append(layer)
    return out


def get_layer(model, name=None, index=None):
    """Keras's Model.get_layer: by name, or by index into model.layers."""
    layers = model_layers(model)
    if index is not None:
        if name is not None:
            raise ValueError("get_layer: give name or index, not both")
        index = _checks.integer(index, "index", "get_layer", -len(layers), len(layers) - 1)
        return layers[index]
    if name is None:
        raise ValueError("get_layer: give the name (or index) of a layer")
    for layer in layers:
        if layer.name == name:
            return layer
    raise ValueError(f"No such layer: {name}. Existing layers are: "
                     f"{[layer.name for layer in layers]}.")


def layer_output(layer, what="output"):
    made = layer.__dict__.get("_outputs_made")
    if not made:
        raise ValueError(f"The layer {layer.name} has never been called and thus has no "
                         f"defined {what}.")
    return made[0] if what == "output" else made[0]._history[1]


# --- a model called on tensors ---------------------------------------------------


# A model the file reader loaded, or one of its layers, called on new
# inputs: its weights live in that reader's engine model, so the call is
# refused with the way to a Python model holding them.
_FILE_MODEL_CALL = (
    "{} was read from a file and cannot be called on new inputs; rebuild the model in "
    "Python with its weights: py = keras.models.model_from_json(base.to_json()); "
    "py.set_weights(base.get_weights()); then call py")


def call_model(model, inputs):
    """``model(inputs)`` on KerasTensors: its layers called again on them
    (their weights shared, as Keras shares a nested model's), the model's
    outputs' counterparts returned."""
    if hasattr(model, "_layers"):  # a Sequential
        t = inputs[0] if isinstance(inputs, (list, tuple)) and len(inputs) == 1 else inputs
        for layer in model._layers:
            t = layer(t)
            t._nested_in = model  # the outer model's layers list this model
        return t
    if "_file_layers" in model.__dict__:
        raise ValueError(_FILE_MODEL_CALL.format(f"model '{model.name}'"))
    given = list(inputs.values()) if isinstance(inputs, dict) else (
        list(inputs) if isinstance(inputs, (list, tuple)) else [inputs])
    own = model._input_tensors
    if len(given) != len(own):
        raise ValueError(f"model '{model.name}' takes {len(own)} inputs, got {len(given)}")
    made = {id(a): b for a, b in zip(own, given)}
    for t in calls(model._output_tensors):
        layer, args = t._history
        mapped = [made[id(a)] for a in args] if isinstance(args, list) else made[id(args)]
        made[id(t)] = layer(mapped)
        made[id(t)]._nested_in = model  # the outer model's layers list this model
    outs = [made[id(t)] for t in model._output_tensors]
    return outs if model._outputs_are_list else outs[0]


# --- weights shared between models holding one layer ------------------------------

_stamps = itertools.count(1)


def _weight_prefixes(layer):
    return tuple(layer.name + sep for sep in ("/", "."))


def mark_changed(model):
    """``model`` changed its weights (fit, set_weights, load_weights): it
    holds its layers' current values now."""
    stamp = next(_stamps)
    seen = model.__dict__.setdefault("_layer_stamps", {})
    for layer in model_layers(model, flat=True):
        layer._holder = (weakref.ref(model), stamp)
        seen[id(layer)] = stamp


def pull_shared(model):
    """Copies into ``model`` the weights of its layers that another model
    changed since ``model`` last saw them."""
    native = model.__dict__.get("_native")
    if native is None:
        return
    seen = model.__dict__.setdefault("_layer_stamps", {})
    for layer in model_layers(model, flat=True):
        holder = layer.__dict__.get("_holder")
        if holder is None or seen.get(id(layer)) == holder[1]:
            continue
        source = holder[0]()
        seen[id(layer)] = holder[1]
        if source is None or source is model or source.__dict__.get("_native") is None:
            continue
        prefixes = _weight_prefixes(layer)
        theirs = set(source._native.weight_paths())
        for path in native.weight_paths():
            if path.startswith(prefixes) and path in theirs:
                native.set_weight(path, source._native.get_weight(path))


# --- configs back into models ------------------------------------------------------


def _layer_from_entry(entry, custom_objects, what):
    cls = _registry.lookup(entry, custom_objects, what)
    config = dict(entry.get("config") or {})
    from_config = getattr(cls, "from_config", None)  # Keras's default: cls(**config)
    return from_config(config) if from_config is not None else cls(**config)


def _tensor_refs(args):
    """The keras_history triples of a node's arguments (one tensor or a list)."""
    if isinstance(args, dict) and args.get("class_name") == "__keras_tensor__":
        return args["config"]["keras_history"]
    if isinstance(args, (list, tuple)):
        return [_tensor_refs(a) for a in args]
    raise ValueError(f"from_config: a layer's argument {args!r} is not a tensor reference")


def functional_from_config(cls, config, custom_objects=None, what="from_config"):
    """A functional model (of class ``cls``) from Keras 3's config of one:
    its layers made from their configs, called as the config records."""
    tensors, layers = {}, {}
    for entry in config["layers"]:
        if entry["class_name"] == "InputLayer":
            c = entry["config"]
            shape = c.get("batch_shape") or c.get("batch_input_shape")
            t = Input(batch_shape=shape, dtype=c.get("dtype"), name=c.get("name"))
            tensors[(entry.get("name") or c["name"], 0, 0)] = t
            continue
        layers[entry["name"]] = _layer_from_entry(entry, custom_objects, what)
    for entry in config["layers"]:
        if entry["class_name"] == "InputLayer":
            continue
        for node_index, node in enumerate(entry.get("inbound_nodes", [])):
            refs = _tensor_refs(node["args"][0])
            pick = lambda r: tensors[tuple(r)]  # noqa: E731
            args = [pick(r) for r in refs] if refs and isinstance(refs[0], list) else pick(refs)
            kwargs = {}
            states = (node.get("kwargs") or {}).get("initial_state")
            if states is not None:  # a recurrent layer's (Keras 3 writes it by name)
                refs = _tensor_refs(states)
                kwargs["initial_state"] = ([pick(r) for r in refs] if refs and
                                           isinstance(refs[0], list) else [pick(refs)])
            made = layers[entry["name"]](args, **kwargs)
            for k, t in enumerate(made if isinstance(made, list) else [made]):
                tensors[(entry["name"], node_index, k)] = t

    def ends(key):
        refs = config[key]
        if refs and not isinstance(refs[0], list):
            refs = [refs]
        return [tensors[tuple(r)] for r in refs]

    inputs, outputs = ends("input_layers"), ends("output_layers")
    return cls(inputs, outputs if len(outputs) > 1 else outputs[0], name=config.get("name"))


def sequential_from_config(cls, config, custom_objects=None, what="from_config"):
    """A Sequential (of class ``cls``) from Keras 3's config of one."""
    entries = list(config["layers"])
    first = []
    if entries and entries[0]["class_name"] == "InputLayer":
        c = entries.pop(0)["config"]
        first = [Input(batch_shape=c.get("batch_shape") or c.get("batch_input_shape"),
                       dtype=c.get("dtype"), name=c.get("name"))]
    layers = [_layer_from_entry(e, custom_objects, what) for e in entries]
    return cls(first + layers, name=config.get("name"))


def model_from_config(config, custom_objects=None, what="from_config"):
    """A model from {"class_name", "config"} (model.to_json's content)."""
    if not isinstance(config, dict) or "config" not in config:
        raise ValueError(f"{what}: expected a model config with 'class_name' and 'config', got "
                         f"{_checks.shown(config)}")
    cls = _registry.lookup(config, custom_objects, what)
    return cls.from_config(config["config"], custom_objects=custom_objects)


def model_from_json(json_string, custom_objects=None):
    """keras.models.model_from_json: the model model.to_json() described,
    with new weights (the initializers' draws)."""
    try:
        config = json.loads(json_string)
    except (TypeError, ValueError) as e:
        raise ValueError(f"model_from_json: not a model's JSON ({e})") from None
    return model_from_config(config, custom_objects, "model_from_json")


def _layers():
    from . import layers  # noqa: PLC0415 (layers imports this module)
    return layers


def custom_model_config(filepath, custom_objects):
    """The architecture of a ``.keras`` file that names classes of Python
    code (in ``custom_objects`` or the registry), else None (the C++ reader
    reads the file, and refuses classes it does not know by name)."""
    try:  # a path load_model refuses, or a file it cannot read, is its to name
        path = os.fspath(filepath)
        if not (isinstance(path, str) and path.endswith(".keras") and zipfile.is_zipfile(path)):
            return None
        with zipfile.ZipFile(path) as z:
            config = json.loads(z.read("config.json"))
    except (TypeError, ValueError, OSError, KeyError, zipfile.BadZipFile):
        return None
    if not isinstance(config, dict):
        return None
    custom = custom_objects or {}

    def python_class(entry):
        """Whether the entry, or a layer of a model it holds, names a class
        of Python code (a subclassed model is the file's top entry)."""
        if not isinstance(entry, dict):
            return False
        names = (entry.get("registered_name"), entry.get("class_name"))
        if any(isinstance(n, str) and (n in custom or n in _registry._REGISTERED)
               for n in names):
            return True
        if isinstance(names[1], str) and getattr(getattr(_layers(), names[1], None),
                                                  "_keras_builtin", False):
            return True  # Keras's layers that autoshard builds in Python
        inner = entry.get("config")
        return isinstance(inner, dict) and any(python_class(e) for e in inner.get("layers") or [])

    return config if python_class(config) else None


def clone_model(model, input_tensors=None, clone_function=None, call_function=None,
                recursive=False, **kwargs):
    """keras.models.clone_model: the same architecture with new layers and
    new weights (the initializers' draws)."""
    if input_tensors is not None or call_function is not None or kwargs:
        raise ValueError("clone_model: input_tensors and call_function are not supported")
    if clone_function is not None:
        raise ValueError("clone_model: clone_function is not supported")
    return model_from_config(model._keras_architecture(), None, "clone_model")


def is_symbolic(inputs):
    items = list(inputs.values()) if isinstance(inputs, dict) else (
        list(inputs) if isinstance(inputs, (list, tuple)) else [inputs])
    return bool(items) and all(isinstance(t, KerasTensor) for t in items)
