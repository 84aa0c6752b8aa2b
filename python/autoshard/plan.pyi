# Type stubs of autoshard.plan (plan.py).
from typing import Any, Optional, Union

from .keras.distribution import DeviceMesh
from .keras.models import Model

class Plan:
    mesh: dict[str, int]
    layouts: dict[str, tuple[Optional[str], ...]]
    shapes: dict[str, tuple[int, ...]]
    step_time: float
    memory_per_device: dict[str, int]
    explanation: list[str]
    collectives: list[dict[str, Any]]
    predicted: dict[str, Any]
    pipeline: Optional[dict[str, Any]]
    stage_plan: Optional[str]
    def __init__(self, report: dict[str, Any], distribution: Any = ...) -> None: ...
    def to_dict(self) -> dict[str, Any]: ...
    def _repr_html_(self) -> Optional[str]: ...

def plan(model: Union[Model, str], mesh_or_devices: Union[DeviceMesh, int], batch: int,
         cluster: Optional[str] = ..., dtype: str = ...,
         memory_per_device: Union[int, float, str, None] = ..., *, seq: Optional[int] = ...,
         plan_time: Optional[float] = ..., deterministic: bool = ...,
         batch_dim_name: Optional[str] = ...,
         seed: int = ...) -> Plan: ...
