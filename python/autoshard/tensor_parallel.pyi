# Type stubs of autoshard.TensorParallel (tensor_parallel.py).
from typing import Any, Optional, Union

from .keras.callbacks import History
from .keras.distribution import DeviceMesh, Distribution
from .keras.models import Model
from .plan import Plan

class TensorParallel:
    model: Model
    world_size: int
    plan: Optional[Plan]
    distribution: Optional[Distribution]
    def __init__(self, model: Model, world_size: Optional[int] = ..., *,
                 device_count: Optional[int] = ..., batch_size: int = ..., cluster: str = ...,
                 memory_per_device: Union[int, float, str, None] = ...,
                 distributed_backend: Optional[str] = ...,
                 use_parameter_sharding: bool = ...) -> None: ...
    @property
    def device_mesh(self) -> Optional[DeviceMesh]: ...
    def compile(self, optimizer: Any = ..., loss: Any = ..., loss_weights: Any = ...,
                metrics: Any = ..., **kwargs: Any) -> None: ...
    def fit(self, *args: Any, **kwargs: Any) -> History: ...
    def evaluate(self, *args: Any, **kwargs: Any) -> Any: ...
    def predict(self, *args: Any, **kwargs: Any) -> Any: ...
    def train_on_batch(self, *args: Any, **kwargs: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...
