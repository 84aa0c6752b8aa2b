"""autoshard.keras_layout_map: AutoShard's plan as a Keras 3 LayoutMap.

The map ``autoshard plan --export-layout-map`` writes (docs/keras-hub.md,
"LayoutMaps out"), for a model named by its file or directory::

    import autoshard
    from autoshard.keras.distribution import DeviceMesh
    m = autoshard.keras_layout_map("tests/data/hf_llama", DeviceMesh((2, 2), ("data", "model")),
                                   batch=4, seq=8)
    m["layout_map"]   # {"^transformer_layer_\\d+/self_attention/query/kernel$": (None, "model", None), ...}
"""

import json
import os

from . import _native
from .keras.distribution import native_axes
from .plan import plan

__all__ = ["keras_layout_map"]


def keras_layout_map(model, mesh_or_devices, batch=8, *, form="json", **plan_args):
    """Plans ``model`` with :func:`autoshard.plan` and returns the plan as a
    Keras LayoutMap: anchored regular expressions over the Keras variable
    paths, each valued with a tuple of mesh axes and None.

    model: a Hugging Face directory or KerasHub preset (its KerasHub
        backbone's variables are keyed), or a saved Keras model (``.keras``,
        ``.h5``, a TensorFlow.js ``model.json``: the Keras 3 paths of its
        variables). mesh_or_devices, batch and the keyword arguments: as
        ``autoshard.plan`` takes them.
    form: ``"json"`` gives a dict (``layout_map`` with tuples, ``mesh``,
        ``batch_dim_name``, ``predicted``, ``uneven_splits``, ``variables``);
        ``"py"`` the text of a module defining ``get_layout_map(device_mesh)``.

    Every variable is matched by exactly one key, or a ValueError names it.
    """
    if not isinstance(model, str):
        raise ValueError("keras_layout_map: give the model's file or directory (the Keras "
                         f"variable paths come from it), not {type(model).__name__}")
    if form not in ("json", "py"):
        raise ValueError(f"keras_layout_map: form must be 'json' or 'py', not {form!r}")
    planned = model
    keras_file = os.path.isfile(model) and _native.KerasFile.format_of(model) or \
        os.path.isfile(os.path.join(model, "model.json"))
    if keras_file:
        from .keras import saving

        planned = saving.load_model(model)
    p = plan(planned, mesh_or_devices, batch, **plan_args)
    names, sizes = list(p.mesh.keys()), list(p.mesh.values())
    text = _native.keras_layout_map(model, names, sizes,
                                    {w: native_axes(v) for w, v in p.layouts.items()},
                                    {w: list(s) for w, s in p.shapes.items()}, p.step_time,
                                    float(p.memory_per_device["total"]),
                                    str(plan_args.get("cluster") or "cpu"), form)
    if form == "py":
        return text
    out = json.loads(text)
    # A dimension over several axes comes as a list: Keras's tuple.
    def keras_axes(layout):
        return tuple(tuple(a) if isinstance(a, list) else a for a in layout)

    out["layout_map"] = {k: keras_axes(v) for k, v in out["layout_map"].items()}
    for v in out["variables"].values():
        v["layout"] = keras_axes(v["layout"])
    return out
