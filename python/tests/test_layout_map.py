"""autoshard.keras_layout_map: AutoShard's plan as a Keras 3 LayoutMap, for a
Hugging Face directory (its KerasHub backbone's variables) and a saved Keras
model; looked up as Keras looks keys up (an exact key, else exactly one
re.search match), every variable gets its plan's layout."""

import os
import re
import types

import pytest

import autoshard
from autoshard.keras.distribution import DeviceMesh

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")


def keras_lookup(layout_map, path):
    """keras.distribution.LayoutMap.__getitem__'s rule."""
    if path in layout_map:
        return layout_map[path]
    keys = [k for k in layout_map if re.search(k, path)]
    assert len(keys) == 1, (path, keys)
    return layout_map[keys[0]]


@pytest.mark.parametrize("model,kwargs", [
    (os.path.join(DATA, "hf_llama"), dict(batch=4, seq=8)),
    (os.path.join(DATA, "keras_files", "lstm_language_model.keras"), dict(batch=6)),
])
def test_every_variable_gets_its_layout(model, kwargs):
    m = autoshard.keras_layout_map(model, DeviceMesh((2, 2), ("data", "model")), **kwargs)
    assert m["batch_dim_name"] == "data"
    assert m["mesh"] == {"shape": [2, 2], "axis_names": ["data", "model"]}
    assert m["variables"]
    for path, v in m["variables"].items():
        assert keras_lookup(m["layout_map"], path) == tuple(v["layout"]), path


def test_python_form_defines_get_layout_map():
    text = autoshard.keras_layout_map(os.path.join(DATA, "hf_gemma"),
                                      DeviceMesh((1, 2), ("data", "model")), batch=4, seq=8,
                                      form="py")
    stored = {}

    class LayoutMap(dict):
        def __init__(self, mesh):
            super().__init__()

        def __setitem__(self, key, layout):
            assert key not in self
            stored[key] = layout
            super().__setitem__(key, layout)

    keras = types.SimpleNamespace(distribution=types.SimpleNamespace(LayoutMap=LayoutMap))
    namespace = {"keras": keras}  # one namespace: the module's globals
    exec(compile(text.replace("import keras\n", ""), "layout.py", "exec"), namespace)
    mesh = types.SimpleNamespace(axis_names=namespace["MESH_AXIS_NAMES"])
    layout_map = namespace["get_layout_map"](mesh)
    assert layout_map == stored and stored
    assert namespace["BATCH_DIM_NAME"] == "data"


def test_bad_arguments_are_value_errors():
    mesh = DeviceMesh((1, 2), ("data", "model"))
    with pytest.raises(ValueError, match="give the model's file or directory"):
        autoshard.keras_layout_map(object(), mesh)
    with pytest.raises(ValueError, match="form must be"):
        autoshard.keras_layout_map(os.path.join(DATA, "hf_llama"), mesh, form="yaml")
