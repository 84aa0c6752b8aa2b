"""autoshard.TensorParallel: the Keras work's ``TensorParallelKeras`` wrapper,
with AutoShard choosing the mesh and every layout::

    tp = autoshard.TensorParallel(model, world_size=4)
    tp.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    tp.fit(x, y, epochs=5)

``compile`` plans the model's training step over ``world_size`` in-process
devices (``autoshard.plan``: the mesh's shape and the layouts) and compiles
the model under that plan; ``fit`` / ``evaluate`` / ``predict`` then run
sharded. The numbers are those of the same model under
``keras.distribution.set_distribution(AutoShard(mesh=...))`` on the mesh
chosen (``tp.plan.mesh``).

An ``autoshard.keras_hub`` model (a Backbone, CausalLM or TextClassifier,
whose inputs are KerasHub's dict of token_ids, segment_ids and
padding_mask) is laid out the same way by its engine (the Keras work's
quick start: ``TensorParallel(BertBackbone.from_preset(p), world_size=2)``,
then compile and fit on the dict; keras_hub/_tensor_parallel.py).
"""

from .plan import plan as _plan

__all__ = ["TensorParallel"]

_BACKENDS = (None, "auto", "autoshard", "jax", "pytorch", "tensorflow", "horovod")


class TensorParallel:
    """Wraps a built ``autoshard.keras`` model to train over ``world_size`` devices.

    Args:
        model: an ``autoshard.keras`` Model or Sequential with its input known.
        world_size: the number of in-process devices (``device_count`` is
            the same; default: every device ``autoshard.list_devices()``
            lists).
        batch_size: the batch the mesh is chosen for (fit's default, 32).
        cluster, memory_per_device: what AutoShard prices plans on and may
            use per device (see ``autoshard.plan``).
        distributed_backend, use_parameter_sharding: accepted for the Keras
            work's signature; autoshard's engine is the only backend.
    """

    def __init__(self, model, world_size=None, *, device_count=None, batch_size=32,
                 cluster="cpu", memory_per_device=None, distributed_backend=None,
                 use_parameter_sharding=True, **kwargs):
        from . import list_devices
        from .keras.models import Model
        from .keras_hub import _tensor_parallel as hub

        if kwargs:
            raise ValueError(f"TensorParallel: unsupported argument(s) "
                             f"{', '.join(sorted(kwargs))}")
        self._hub = hub.task_of(model)  # a keras_hub model's task, else None
        if self._hub is None and not isinstance(model, Model):
            raise ValueError(f"TensorParallel wraps an autoshard.keras or autoshard.keras_hub "
                             f"model, not {type(model).__name__}")
        if distributed_backend not in _BACKENDS:
            raise ValueError(f"TensorParallel: distributed_backend {distributed_backend!r} is "
                             "unknown (autoshard's engine runs every backend's part)")
        if not use_parameter_sharding:
            raise ValueError("TensorParallel: use_parameter_sharding=False is not supported "
                             "(AutoShard shards parameters where that pays)")
        if world_size is not None and device_count is not None and world_size != device_count:
            raise ValueError("TensorParallel: give world_size or device_count, not both")
        world_size = world_size if world_size is not None else device_count
        if world_size is None:
            world_size = len(list_devices())
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"TensorParallel: world_size must be a positive integer, not "
                             f"{world_size!r}")
        self.model = model
        self.world_size = world_size
        self._batch_size = int(batch_size)
        self._cluster = cluster
        self._memory = memory_per_device
        self.plan = None  # autoshard.Plan, after compile()
        self.distribution = None  # keras.distribution.Distribution, after compile()

    @property
    def device_mesh(self):
        """The mesh AutoShard chose (a keras.distribution.DeviceMesh), after compile()."""
        if self._hub is not None and self.plan is not None:
            from .keras_hub import _tensor_parallel as hub

            return hub.device_mesh_of(self.plan.mesh)
        return self.distribution.device_mesh if self.distribution else None

    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None, **kwargs):
        """Plans the model over ``world_size`` devices, then compiles it under the plan."""
        from .keras.distribution import DeviceMesh, Distribution

        if self._hub is not None:
            from .keras_hub import _tensor_parallel as hub

            self.plan = hub.tensor_parallel(self._hub, self.world_size, optimizer, loss, metrics,
                                            kwargs)
            return
        if len(getattr(self.model, "inputs", ()) or ()) > 1:
            self._compile_several_inputs(optimizer, loss, loss_weights, metrics, kwargs)
            return
        self.model.compile(optimizer, loss, loss_weights=loss_weights, metrics=metrics,
                           **kwargs)  # on one device: planning prices its training step
        self.plan = _plan(self.model, self.world_size, self._batch_size, cluster=self._cluster,
                          memory_per_device=self._memory)
        native = self.plan._distribution
        mesh = DeviceMesh(tuple(native.mesh.shape), tuple(native.mesh.axis_names))
        self.distribution = Distribution(native, mesh)
        with self.distribution.scope():
            self.model.compile(optimizer, loss, loss_weights=loss_weights, metrics=metrics,
                               **kwargs)

    def _compile_several_inputs(self, optimizer, loss, loss_weights, metrics, kwargs):
        """A model of several inputs (a dict or list of them): AutoShard lays
        it out on the mesh data=1, model=world_size, choosing every layout at
        the first step (keras.distribution.AutoShard); autoshard.plan, which
        also chooses the mesh's shape and reports the plan, prices models of
        one input only, so ``plan`` is None here (docs/python.md,
        "TensorParallel")."""
        from .keras.distribution import AutoShard, DeviceMesh

        mesh = DeviceMesh((1, self.world_size), ("data", "model"))
        self.distribution = AutoShard(mesh, memory_per_device=self._memory,
                                      cluster=self._cluster)
        with self.distribution.scope():
            self.model.compile(optimizer, loss, loss_weights=loss_weights, metrics=metrics,
                               **kwargs)
        self._several_inputs = True

    def _compiled(self, what):
        if self.plan is None and not getattr(self, "_several_inputs", False):
            raise ValueError(f"TensorParallel: call compile() before {what}()")
        return self.model if self._hub is None else self._hub

    def fit(self, *args, **kwargs):
        """The model's fit, sharded by the plan (returns its History)."""
        return self._compiled("fit").fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        return self._compiled("evaluate").evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        return self._compiled("predict").predict(*args, **kwargs)

    def train_on_batch(self, *args, **kwargs):
        return self._compiled("train_on_batch").train_on_batch(*args, **kwargs)

    def __getattr__(self, name):
        # get_weights, set_weights, summary, count_params, save, ...: the model's.
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def __repr__(self):
        mesh = self.device_mesh
        where = f"mesh {dict(zip(mesh.axis_names, mesh.shape))}" if mesh else "not compiled"
        name = getattr(self.model, "name", type(self.model).__name__)
        return f"<TensorParallel {name!r} world_size={self.world_size} {where}>"
