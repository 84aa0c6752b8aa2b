"""keras.distribution: DeviceMesh, TensorLayout, LayoutMap, DataParallel,
ModelParallel, set_distribution (and autoshard's AutoShard), on in-process
devices. A distribution set when a model is compiled (or, for a Sequential
without an Input, first run) applies to it."""

import contextlib
import difflib
import math
import re
import warnings

import numpy as np

from .. import _checks, _native

__all__ = ["DeviceMesh", "TensorLayout", "LayoutMap", "DataParallel", "ModelParallel",
           "AutoShard", "set_distribution", "distribution", "list_devices"]


def list_devices(device_type=None):
    """The in-process devices, ``["cpu:0", ..., "cpu:N-1"]`` (N: the cores)."""
    if device_type not in (None, "cpu", "CPU"):
        raise ValueError(f"list_devices: only 'cpu' devices exist here, not {device_type!r}")
    return _native.list_devices(0)


class DeviceMesh:
    """Devices in a grid with named axes: DeviceMesh(shape=(2, 2), axis_names=("data", "model"))."""

    def __init__(self, shape, axis_names, devices=None):
        if not isinstance(shape, (tuple, list)):
            shape = (shape,)
        shape = tuple(_checks.integer(s, f"shape[{i}]", "DeviceMesh", 1, _checks.INT32_MAX)
                      for i, s in enumerate(shape))
        axis_names = tuple(str(a) for a in axis_names)
        if len(shape) != len(axis_names):
            raise ValueError(f"DeviceMesh: shape {shape} and axis_names {axis_names} differ in "
                             "length")
        size = math.prod(shape)
        if devices is None:
            devices = _native.list_devices(size)
        devices = [str(d) for d in np.asarray(devices).reshape(-1)]
        if len(devices) != size:
            raise ValueError(f"DeviceMesh: shape {shape} holds {size} devices, {len(devices)} "
                             "given")
        expected = [f"cpu:{i}" for i in range(size)]
        if devices != expected:
            raise ValueError(f"DeviceMesh: devices must be the in-process devices "
                             f"{expected[0]}..{expected[-1]} in order, got {devices}")
        self._native = _native.DeviceMesh(list(shape), list(axis_names))
        self.shape = shape
        self.axis_names = axis_names
        self.devices = np.array(devices).reshape(shape)

    def __repr__(self):
        return f"<DeviceMesh {self._native!r}>"


class TensorLayout:
    """Per dimension of a tensor: a mesh axis name, a tuple of them (the
    dimension split over their product, named in the mesh's order, as in
    ``("data", "model")``), or None (whole)."""

    def __init__(self, axes, device_mesh=None):
        if not isinstance(axes, (tuple, list)):
            raise TypeError(f"TensorLayout: axes is a tuple of mesh axis names or None per "
                            f"dimension, got {_checks.shown(axes)}")
        self.axes = tuple(tuple(a) if isinstance(a, list) else a for a in axes)
        self.device_mesh = device_mesh


def native_axes(axes):
    """A layout's axes as the native module takes them: a list of names per
    dimension (none for None)."""
    out = []
    for a in axes:
        if a is None:
            out.append([])
        elif isinstance(a, str):
            out.append([a])
        elif isinstance(a, (tuple, list)) and a and all(isinstance(x, str) for x in a):
            out.append(list(a))
        else:
            raise ValueError(f"TensorLayout: each dimension takes a mesh axis name, a tuple of "
                             f"them or None, got {a!r}")
    return out


def _axes(value):
    if isinstance(value, TensorLayout):
        return value.axes
    if value is None or isinstance(value, str):
        raise ValueError(f"LayoutMap values are tuples of axis names or None, got {value!r}")
    return tuple(value)


class LayoutMap:
    """Regular expressions over weight paths to layouts, looked up as Keras does:
    an exact key wins, else the one key that ``re.search`` finds in the path
    (two such keys is an error), else None (replicated)."""

    def __init__(self, device_mesh):
        self.device_mesh = device_mesh
        self._entries = {}

    def __setitem__(self, key, layout):
        # Checked when set, so that the error names the key (not the
        # distribution or the model that uses the map later).
        if not isinstance(key, str):
            raise TypeError(f"LayoutMap: keys are regular expressions (strings) over weight "
                            f"paths, got {_checks.shown(key)}")
        try:
            re.compile(key)
        except re.error as e:
            raise ValueError(f"LayoutMap: key {key!r} is not a regular expression ({e})") \
                from None
        if key in self._entries:
            raise ValueError(f"LayoutMap: key {key!r} is already set")
        if not isinstance(layout, (TensorLayout, tuple, list)):
            raise TypeError(f"LayoutMap[{key!r}]: a layout is a tuple of mesh axis names or "
                            f"None per dimension (or a TensorLayout), got {_checks.shown(layout)}")
        axes = _axes(layout)
        try:
            native_axes(axes)
        except ValueError as e:
            raise ValueError(f"LayoutMap[{key!r}]: {e}") from None
        self._entries[key] = TensorLayout(axes, self.device_mesh)

    def __getitem__(self, path):
        if path in self._entries:
            return self._entries[path]
        matches = [k for k in self._entries if re.search(k, path)]
        if len(matches) > 1:
            raise ValueError(f"LayoutMap: path {path!r} matches several keys {matches}; make "
                             "them exclusive")
        return self._entries[matches[0]] if matches else None

    def __delitem__(self, key):
        del self._entries[key]

    def __len__(self):
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def keys(self):
        return self._entries.keys()

    def _to_native(self):
        return _native.LayoutMap([(k, native_axes(v.axes)) for k, v in self._entries.items()])

    def _resolved(self, keys, paths, model_name, outputs=()):
        """This map for one model's weights, Keras's lookup run on Keras 3's
        variable paths (``paths``; the engine's dotted ``keys`` are matched
        too, autoshard's older spelling): the engine's map of each weight's
        exact key to its layout. A key that matches no variable is a
        ValueError naming it and the nearest paths: a rename would
        otherwise leave the weights replicated without a word
        (keras-hub#2806)."""
        used, out = set(), []
        for key, path in zip(keys, paths):
            found = [k for k in (path, key) if k in self._entries][:1] or [
                k for k in self._entries if re.search(k, path) or re.search(k, key)]
            if len(found) > 1:
                raise ValueError(f"LayoutMap: variable '{path}' matches several keys {found}; "
                                 "make them exclusive")
            if found:
                used.add(found[0])
                out.append(("^" + re.escape(key) + "$", native_axes(self._entries[found[0]].axes)))
        for k in self._entries:
            if k not in used and any(re.search(k, p) for p in paths):
                raise ValueError(f"LayoutMap: key {k!r} lays out no variable of model "
                                 f"'{model_name}': each variable it matches has a key of its "
                                 "exact path, which wins (Keras's rule); delete it")
            if k not in used and any(k == o or re.search(k, o) for o in outputs):
                # Keras's layout of a layer's output ("d2/output", the
                # distribution guide's): the engine derives activation
                # layouts from the weights' and its plan.
                warnings.warn(f"LayoutMap: key {k!r} lays out a layer's output; autoshard "
                              "chooses activation layouts itself and ignores it", stacklevel=3)
                continue
            if k not in used:
                near = difflib.get_close_matches(k, paths, n=3, cutoff=0)
                raise ValueError(f"LayoutMap: key {k!r} matches no variable of model "
                                 f"'{model_name}' (nearest: {', '.join(near) or 'none'}); keys "
                                 "are regular expressions searched in Keras 3's variable paths "
                                 "(model.weights[i].path, such as 'dense/kernel'): fix the key "
                                 "or delete it")
        return _native.LayoutMap(out)


def _mesh(value, where, name):
    if not isinstance(value, DeviceMesh):
        raise TypeError(f"{where}: {name} must be a keras.distribution.DeviceMesh, got "
                        f"{_checks.shown(value)}")
    return value


def _axis_name(value, mesh, where):
    # batch_dim_name: one of the mesh's axis names (its first by default).
    if value is None:
        return mesh.axis_names[0]
    if not isinstance(value, str):
        raise TypeError(f"{where}: batch_dim_name must be one of the mesh's axis names "
                        f"{mesh.axis_names}, got {_checks.shown(value)}")
    return value


class Distribution:
    """A distribution; ``with d.scope():`` sets it for the block."""

    def __init__(self, native, device_mesh):
        self._native = native
        self.device_mesh = device_mesh

    @property
    def batch_dim_name(self):
        return self._native.batch_dim_name

    @contextlib.contextmanager
    def scope(self):
        previous = distribution()
        set_distribution(self)
        try:
            yield self
        finally:
            set_distribution(previous)


class DataParallel(Distribution):
    """Replicates the weights and splits each batch over the mesh's first axis."""

    def __init__(self, device_mesh=None, devices=None, **kwargs):
        if kwargs:
            raise ValueError(f"DataParallel: unsupported argument(s) {', '.join(sorted(kwargs))}")
        if device_mesh is None:
            devices = devices if devices is not None else list_devices()
            if isinstance(devices, (str, bytes)) or not hasattr(devices, "__len__"):
                raise TypeError("DataParallel: devices is a list of device names "
                                "(keras.distribution.list_devices()), got "
                                f"{_checks.shown(devices)}")
            device_mesh = DeviceMesh((len(devices),), ("batch",), devices)
        _mesh(device_mesh, "DataParallel", "device_mesh")
        super().__init__(_native.DataParallel(device_mesh._native, device_mesh.axis_names[0]),
                         device_mesh)


class ModelParallel(Distribution):
    """Weights laid out by a LayoutMap; batches split over ``batch_dim_name``."""

    def __init__(self, *, layout_map=None, batch_dim_name=None, device_mesh=None, **kwargs):
        if kwargs:
            raise ValueError(f"ModelParallel: unsupported argument(s) {', '.join(sorted(kwargs))}")
        if layout_map is None:
            raise ValueError("ModelParallel needs a layout_map")
        if not isinstance(layout_map, LayoutMap):
            raise TypeError(f"ModelParallel: layout_map must be a keras.distribution.LayoutMap, "
                            f"got {_checks.shown(layout_map)}")
        device_mesh = _mesh(device_mesh or layout_map.device_mesh, "ModelParallel",
                            "device_mesh")
        batch_dim_name = _axis_name(batch_dim_name, device_mesh, "ModelParallel")
        super().__init__(_native.ModelParallel(device_mesh._native, layout_map._to_native(),
                                               batch_dim_name), device_mesh)
        self.layout_map = layout_map
        self._batch_dim = batch_dim_name

    def _for_model(self, keys, paths, model_name, outputs=()):
        """The engine's distribution for one model: the layout map resolved
        against its variables and layer outputs (LayoutMap._resolved)."""
        return _native.ModelParallel(self.device_mesh._native,
                                     self.layout_map._resolved(keys, paths, model_name, outputs),
                                     self._batch_dim)


class AutoShard(Distribution):
    """autoshard's planner chooses every layout by predicted cost (docs/planner.md)."""

    def __init__(self, mesh=None, memory_per_device=None, cluster="cpu", batch_dim_name=None,
                 device_mesh=None):
        mesh = mesh or device_mesh
        if mesh is None:
            raise ValueError("AutoShard needs a mesh (a keras.distribution.DeviceMesh)")
        _mesh(mesh, "AutoShard", "mesh")
        memory = _checks.number(memory_per_device or 0, "memory_per_device", "AutoShard",
                                minimum=0)
        super().__init__(_native.AutoShard(mesh._native,
                                           _axis_name(batch_dim_name, mesh, "AutoShard"),
                                           str(cluster), memory), mesh)


_current = None


def set_distribution(value):
    """Sets the distribution models compile under (None: one device)."""
    global _current
    if value is not None and not isinstance(value, Distribution):
        raise ValueError(f"set_distribution takes a keras.distribution distribution or None, "
                         f"not {type(value).__name__}")
    _native.set_distribution(None if value is None else value._native)
    _current = value


def distribution():
    """The distribution set now, or None."""
    return _current


@contextlib.contextmanager
def for_model(variables, model_name):
    """While a model compiles: the distribution set now, made for that
    model's weights where it depends on them (a ModelParallel's layout
    map); ``variables()`` gives their engine keys, their Keras 3 paths and
    the model's layer outputs ("d2/output")."""
    if not isinstance(_current, ModelParallel):
        yield
        return
    keys, paths, outputs = variables()
    _native.set_distribution(_current._for_model(keys, paths, model_name, outputs))
    try:
        yield
    finally:
        _native.set_distribution(_current._native)
