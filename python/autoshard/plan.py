"""autoshard.plan: how AutoShard would lay a model out over devices, and why.

The planner is the C++ one ``autoshard plan`` runs (the report has the keys
and figures of ``autoshard plan --json --predict``); nothing is allocated for
the weights and the model keeps its own distribution::

    import autoshard, autoshard.keras as keras
    model.compile("adam", "sparse_categorical_crossentropy")
    p = autoshard.plan(model, 4, batch=32)        # AutoShard chooses the mesh
    p.layouts        # {"dense.kernel": (None, "model"), ...}
    p.step_time      # predicted seconds per training step
    p                # a table (in a notebook: the picture of `autoshard plan --html`)
"""

import json
import re

from . import _native

__all__ = ["Plan", "plan"]

_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _bytes(value):
    """memory_per_device as bytes: a number, or a string like "16GiB" / "512MB"."""
    if value is None:
        return 0.0
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9.]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"plan: memory_per_device {value!r} is no size; give bytes or a "
                             "string like '16GiB'")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"plan: memory_per_device must be a positive number of bytes, not "
                         f"{value!r}")
    return float(value)


def _bf16(dtype):
    names = {"float32": False, "f32": False, "bfloat16": True, "bf16": True,
             "mixed_bfloat16": True}
    if str(dtype) not in names:
        raise ValueError(f"plan: dtype must be 'float32' or 'bfloat16' (mixed precision), not "
                         f"{dtype!r}")
    return names[str(dtype)]


def _mesh_or_devices(mesh_or_devices):
    """(native mesh or None, device count) from a keras DeviceMesh or an int."""
    from .keras.distribution import DeviceMesh

    if isinstance(mesh_or_devices, DeviceMesh):
        return mesh_or_devices._native, 0
    if isinstance(mesh_or_devices, bool) or not isinstance(mesh_or_devices, int):
        raise ValueError(f"plan: give a keras.distribution.DeviceMesh or a number of devices, "
                         f"not {mesh_or_devices!r}")
    if not 1 <= mesh_or_devices <= 2**31 - 1:
        raise ValueError(f"plan: the number of devices must be at least 1 (and at most "
                         f"2147483647), not {mesh_or_devices}")
    return None, int(mesh_or_devices)


def _sparse_targets(loss):
    from .keras import losses

    if isinstance(loss, (list, tuple)) and len(loss) == 1:
        loss = loss[0]
    if isinstance(loss, dict) and len(loss) == 1:
        loss = next(iter(loss.values()))
    return isinstance(loss, losses.SparseCategoricalCrossentropy) or loss in (
        "sparse_categorical_crossentropy", "SparseCategoricalCrossentropy")


def plan(model, mesh_or_devices, batch, cluster=None, dtype="float32", memory_per_device=None,
         *, seq=None, plan_time=None, deterministic=False, batch_dim_name=None, seed=0):
    """Plans ``model``'s training step with AutoShard and returns a :class:`Plan`.

    model: a compiled ``autoshard.keras`` model (one input, one output; the
        optimizer's state and the loss's targets are part of the step), or a
        language model as ``autoshard plan --model`` names it (a preset such
        as ``"mini"``, a config.json or a model directory).
    mesh_or_devices: a ``keras.distribution.DeviceMesh`` (batches split over
        ``batch_dim_name``, default its first axis), or a number of devices
        whose mesh AutoShard chooses (as ``autoshard plan --devices N
        --predict``: for a language model, pipelines too, and a pipelined
        plan where one is faster).
    batch: examples (sequences) per step. seq: a language model's tokens per
        sequence (default min(128, its positions)).
    cluster: what plans are priced on: ``"cpu"`` (this machine, the
        default), ``"a100-80g"``, ``"h100-80g"`` or a cluster JSON file.
    dtype: ``"float32"``, or ``"bfloat16"`` to price mixed precision.
    memory_per_device: bytes (or ``"16GiB"``) each device may hold (default:
        the cluster's). plan_time: seconds the solver may take.
    deterministic: the solver's limits counted in work rather than seconds
        (``autoshard plan --deterministic``): the same plan on every run and
        machine, however busy, at about ``plan_time`` seconds on an idle one.

    Bad arguments raise ValueError; a plan that does not fit raises
    ValueError naming what might.
    """
    native_mesh, devices = _mesh_or_devices(mesh_or_devices)
    # Bounded as the extension takes them (past them, a pybind11 TypeError).
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 2**63 - 1:
        raise ValueError(f"plan: batch must be a positive integer, not {batch!r}")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)
                            or not 1 <= seq <= 2**63 - 1):
        raise ValueError(f"plan: seq must be a positive integer, not {seq!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**64 - 1:
        raise ValueError(f"plan: seed must be an integer from 0 to 2**64 - 1, not {seed!r}")
    args = dict(cluster=str(cluster or "cpu"), bf16=_bf16(dtype),
                memory_per_device=_bytes(memory_per_device), plan_time=float(plan_time or 0),
                deterministic=bool(deterministic))
    if isinstance(model, str):
        if batch_dim_name not in (None, "data"):
            raise ValueError("plan: a language model's batches split over 'data'")
        report = _native.plan_language_model(model, native_mesh, devices, batch, int(seq or 0),
                                             int(seed), **args)
        return Plan(json.loads(report))
    from .keras.models import Model

    if not isinstance(model, Model):
        raise ValueError(f"plan: model must be an autoshard.keras model or a language model's "
                         f"name or path, not {type(model).__name__}")
    if seq is not None:
        raise ValueError("plan: seq is for language models (a Keras model's input shape is its "
                         "own)")
    native = model._built()
    if model._compiled is None:
        raise ValueError("plan: compile() the model first: the plan prices its training step "
                         "(the loss's targets and the optimizer's state)")
    if native_mesh is not None and batch_dim_name is None:
        batch_dim_name = mesh_or_devices.axis_names[0]
    report, distribution = _native.plan_keras(native, native_mesh, devices,
                                              str(batch_dim_name or ""), batch,
                                              _sparse_targets(model._compiled[1]), **args)
    return Plan(json.loads(report), distribution)


def _mib(nbytes):
    return f"{nbytes / 2**20:.2f} MiB"


def _seconds(s):
    return f"{s * 1e3:.4g} ms" if s < 1 else f"{s:.4g} s"


class Plan:
    """AutoShard's plan of a training step.

    A language model planned on a number of devices may come back as a
    pipeline (``mesh`` has a ``pipe`` axis; ``pipeline`` says its schedule,
    micro-batches and stages), where one is predicted faster than every plan
    without a pipe axis, or is the only one that fits; as ``autoshard plan
    --devices N --predict`` chooses.

    Attributes:
        mesh: ``{axis name: size}``.
        layouts: ``{weight path: (axis name or None per dimension)}``.
        shapes: ``{weight path: shape}``.
        step_time: the predicted seconds of one training step on the cluster.
        memory_per_device: bytes on the largest device: ``weights``,
            ``optimizer_state``, ``activations`` (planned buffers), ``total``.
        explanation: the planner's reasons, one line each (the outcome, then
            each weight's layout against its next best, then the meshes tried).
        collectives: the step's collectives on device 0 (kind, axis, value, bytes).
        predicted: the cost model's whole prediction (compute, communication, ...).
        pipeline: None, or for a pipeline ``schedule``, ``stages``,
            ``microbatches``, ``microbatch_size`` (sequences per data
            replica), ``virtual_stages`` and ``per_stage`` (each stage's
            blocks, time per micro-batch, memory).
        stage_plan: a pipeline's layout inside each stage (``"megatron"``
            or ``"auto"``); None without a pipe axis. A pipeline's
            ``layouts``, ``shapes`` and ``collectives`` are empty (each
            stage's plan is priced, not kept).
    """

    def __init__(self, report, distribution=None):
        # The picture's figures (op kinds, memory over the step) are not
        # part of the report ``autoshard plan --json`` prints.
        self._figures = report.pop("figures", None)
        self._report = report
        self._distribution = distribution  # AutoShard, planned (for TensorParallel)
        self.mesh = dict(report["mesh"])
        self.explanation = list(report.get("reasons", []))
        self.predicted = dict(report["predicted"])
        self.step_time = float(self.predicted["step_s"])
        if "parameters" not in report:  # a pipeline (app/pipeline_pricing.h's report)
            self._pipeline_attributes()
            return
        self.pipeline = self.stage_plan = None
        params = report["parameters"]
        # (None, "model") per weight; a dimension over several axes as a tuple.
        self.layouts = {p: tuple(tuple(a) if isinstance(a, list) else a for a in v["layout"])
                        for p, v in params.items()}
        self.shapes = {p: tuple(v["shape"]) for p, v in params.items()}
        self.memory_per_device = dict(report["bytes_per_device"])
        self.collectives = list(report["collectives"])

    def _pipeline_attributes(self):
        p = self.predicted
        self.pipeline = {k: p[k] for k in ("schedule", "stages", "microbatches",
                                           "microbatch_size", "virtual_stages", "per_stage")}
        self.stage_plan = self._report["plan"]
        self.layouts, self.shapes, self.collectives = {}, {}, []
        self.memory_per_device = dict(p["memory_bytes"], total=p["peak_bytes_per_device"])

    def to_dict(self):
        """The report as ``autoshard plan --json --predict`` prints it (a deep copy)."""
        return json.loads(json.dumps(self._report))

    def _mesh_str(self):
        return ",".join(f"{a}={n}" for a, n in self.mesh.items())

    @staticmethod
    def _layout_str(layout):
        return "(" + ", ".join("None" if a is None else repr(a) for a in layout) + \
            ("," if len(layout) == 1 else "") + ")"

    def _rows(self):
        params = self._report["parameters"]
        return [(p, "x".join(str(d) for d in self.shapes[p]) or "scalar",
                 self._layout_str(self.layouts[p]), _mib(params[p]["bytes_per_device"]))
                for p in self.layouts]

    def _memory_rows(self):
        m = self.memory_per_device
        return [("weights", m["weights"]), ("optimizer state", m["optimizer_state"]),
                ("activations", m["activations"]), ("total", m["total"])]

    def _pipeline_repr(self):
        p = self.pipeline
        lines = [f"Plan on mesh {self._mesh_str()}: a pipeline, predicted step "
                 f"{_seconds(self.step_time)}, {_mib(self.memory_per_device['total'])} per device",
                 f"schedule {p['schedule']}, {p['stages']} stages, {p['microbatches']} "
                 f"micro-batches of {p['microbatch_size']} per replica, {self.stage_plan} inside "
                 "the stages", "", "stage  blocks   per micro-batch  memory/device"]
        for st in p["per_stage"]:
            blocks = f"{st['layers'][0]}-{st['layers'][1]}"
            lines.append(f"{st['stage']:<6} {blocks:<8} {_seconds(st['microbatch_s']):<16} "
                         f"{_mib(st['peak_bytes'])}")
        if self.explanation:
            lines += ["", "why:"] + [f"  {r}" for r in self.explanation]
        return "\n".join(lines)

    def __repr__(self):
        if self.pipeline is not None:
            return self._pipeline_repr()
        header = ("weight", "shape", "layout", "bytes/device")
        rows = [header] + self._rows()
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"Plan on mesh {self._mesh_str()}: predicted step {_seconds(self.step_time)}, "
                 f"{_mib(self.memory_per_device['total'])} per device", ""]
        lines += ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3]
                  for r in rows]
        lines += ["", "memory per device (largest device):"]
        lines += [f"  {name:<16} {_mib(v)}" for name, v in self._memory_rows()]
        if self.explanation:
            lines += ["", "why (AutoShard):"] + [f"  {r}" for r in self.explanation]
        return "\n".join(lines)

    def _repr_html_(self):
        """The plan as a picture (``autoshard plan --html``'s page): the mesh, each
        weight's blocks coloured by device, the predicted step by op kind and
        mesh axis, memory over the step and the alternatives rejected. A
        pipeline has no picture yet: None (a notebook shows its repr)."""
        if self.pipeline is not None:
            return None
        report = dict(self._report)
        if self._figures is not None:
            report["figures"] = self._figures
        title = (f"Plan on mesh {self._mesh_str()}: predicted step {_seconds(self.step_time)}, "
                 f"{_mib(self.memory_per_device['total'])} per device")
        return _native.plan_html(json.dumps(report), title)
