"""How autoshard.keras_hub lays a preset out (from_preset's mesh,
distribution and sharding) and shows it (PresetPlan, a task's ``plan``).
See docs/keras-hub.md, "sharding="auto" and the plan".
"""

import re

from .. import _checks, _native
from .. import hf as _hf

__all__ = ["PresetPlan"]


class _Placement:
    """How from_preset lays the model out: the engine's mesh, plan, device
    count and (plan "layout_map") the weight layouts of a Keras LayoutMap."""

    def __init__(self, mesh="", plan="auto", devices=0, layout_map=()):
        self.mesh, self.plan, self.devices, self.layout_map = mesh, plan, devices, list(layout_map)

    def args(self):
        return self.mesh, self.devices, self.plan, "cpu", 0, self.layout_map


def placement(path, mesh, distribution, sharding, where):
    """The placement of from_preset's mesh, distribution and sharding."""
    from ..keras import distribution as _dist

    if distribution is None and mesh is None and sharding is None:
        distribution = _dist.distribution()  # keras.distribution.set_distribution's
    if distribution is not None:
        if mesh is not None or sharding is not None:
            raise ValueError(f"{where}: give a distribution, or mesh and sharding, not both")
        mesh = _hf._mesh_spec(distribution.device_mesh)
        if isinstance(distribution, _dist.DataParallel):
            return _Placement(mesh, "data")
        if isinstance(distribution, _dist.AutoShard):
            return _Placement(mesh, "auto")
        if isinstance(distribution, _dist.ModelParallel):
            return _Placement(mesh, "layout_map", 0,
                              _weight_layouts(path, distribution, where))
        raise ValueError(f"{where}: distribution must be a keras.distribution.DataParallel, "
                         f"ModelParallel or AutoShard, not {_checks.shown(distribution)}")
    if sharding is None or (isinstance(sharding, str) and sharding == "auto"):
        if mesh is None and sharding == "auto":
            # keras-hub#2806: AutoShard plans the model on the in-process
            # devices, choosing the mesh's shape (autoshard --devices N).
            devices = len(_native.list_devices(0))
            return _Placement("", "auto", devices if devices > 1 else 0)
        return _Placement(_hf._mesh_spec(mesh), "auto")
    if hasattr(sharding, "shape") and hasattr(sharding, "axis_names"):  # a DeviceMesh
        if mesh is not None:
            raise ValueError(f"{where}: give the mesh as mesh or as sharding, not both")
        return _Placement(_hf._mesh_spec(sharding), "auto")
    raise ValueError(f"{where}: sharding must be None, \"auto\" (AutoShard's plan) or a "
                     f"DeviceMesh, not {_checks.shown(sharding)}")


def _weight_layouts(path, distribution, where):
    """A ModelParallel's LayoutMap (keys over KerasHub's variable paths) as
    layouts of the engine's weights, looked up as Keras looks them up
    (keras/src/distribution/distribution_lib.py, LayoutMap.__getitem__: an
    exact key, else the one key re.search finds; two is an error). A key
    that matches no variable is an error: it would leave what it was meant
    to split replicated without a word (keras-hub#2806)."""
    from ..keras import distribution as _dist

    layout_map = distribution.layout_map
    variables = _native.keras_hub_variables(path)
    paths = [p for p, _, _ in variables]
    unmatched = [k for k in layout_map.keys()
                 if k not in paths and not any(re.search(k, p) for p in paths)]
    if unmatched:
        raise ValueError(
            f"{where}: the LayoutMap key(s) {', '.join(repr(k) for k in unmatched)} match no "
            f"variable of this preset, whose variable paths are like {paths[0]!r}, "
            f"{paths[min(3, len(paths) - 1)]!r} (the plan lists them all); fix the key(s) "
            "rather than leave those weights replicated")
    layouts = {}
    for p in paths:
        layout = layout_map[p]  # Keras's lookup; two matching keys raise ValueError
        if layout is not None:
            layouts[p] = _dist.native_axes(layout.axes)
    mesh = distribution.device_mesh
    weights = _native.keras_hub_weight_layouts(path, list(mesh.axis_names),
                                               [int(n) for n in mesh.shape], layouts)
    return [("^" + re.escape(w) + "$", axes) for w, axes in sorted(weights.items())]


class PresetPlan:
    """A loaded preset's layout: ``mesh``, ``distribution`` ("AutoShard",
    "ModelParallel", "DataParallel" or "one device"), ``variables`` (per
    KerasHub variable.path: its shape, autoshard weight, the weight's
    sharding and the Keras ``layout`` tuple), ``layout_map`` (path ->
    layout, what a keras.distribution.LayoutMap would hold), ``replicated``
    (the paths left whole), ``explanation`` (AutoShard's reasons: the
    predicted step, then each weight against its next best layout) and
    ``predicted_step_s``. ``print(plan)`` shows a table and the reasons."""

    def __init__(self, report):
        self.mesh = report["mesh"]
        self.distribution = report["distribution"]
        self.variables = {v["path"]: v for v in report["variables"]}
        self.layout_map = {p: v["layout"] for p, v in self.variables.items()}
        self.replicated = [p for p, layout in self.layout_map.items()
                           if all(a is None for a in layout)]
        self.explanation = list(report["reasons"])
        self.predicted_step_s = report["predicted_step_s"]

    def __repr__(self):
        width = max((len(p) for p in self.variables), default=0)
        lines = [f"{self.distribution} on {self.mesh or 'one device'}: "
                 f"{len(self.variables) - len(self.replicated)} of {len(self.variables)} "
                 "variables split"]
        for p, v in self.variables.items():
            lines.append(f"  {p:<{width}}  {str(tuple(v['shape'])):<14} {v['layout']}")
        lines += [f"  {r}" for r in self.explanation]
        return "\n".join(lines)
