"""DeviceInfo: what a device is and what it can do, as one frozen dataclass tree.

The text dump and the JSON dump are two renderers of ``DeviceInfo.to_dict()``, so they cannot
disagree. The same tree is stored in every results file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from halbench.errors import DriverUnavailable

__all__ = [
    "SCHEMA_VERSION",
    "DeviceInfo",
    "Features",
    "Identity",
    "Limits",
    "MatrixShape",
    "Memory",
    "MemoryHeap",
    "MemoryType",
    "ProbeCache",
    "QueueFamily",
    "Tier",
    "Timing",
    "gpu_limits",
]

#: Version of the dump-devices JSON schema (docs/device-schema.md).
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Identity:
    name: str
    vendor: str = ""  # "NVIDIA", "AMD", "Mesa", "GenuineIntel", ...
    vendor_id: int | None = None
    device_id: int | None = None
    device_type: str = ""  # discrete-gpu | integrated-gpu | virtual-gpu | cpu | other
    uuid: str | None = None  # dashed GPU-xxxxxxxx-... form; None when the API has none
    pci_bus_id: str | None = None
    api: str = ""  # "Vulkan", "CUDA", "HIP", "host"
    api_version: str = ""  # "1.3.230", "13.0", ...
    driver_name: str = ""
    driver_version: str = ""
    driver_info: str = ""
    driver_uuid: str | None = None
    conformance_version: str | None = None
    arch: str | None = None  # "sm_90", "gfx942", "x86_64"
    driver_id: str = ""  # Vulkan VkDriverId without its prefix: "MESA_LLVMPIPE", "NVIDIA_PROPRIETARY"
    compute_capability: str | None = None  # CUDA "9.0", HIP "9.4"


@dataclass(frozen=True)
class Limits:
    max_workgroup_size: tuple[int, int, int] | None = None
    max_workgroup_invocations: int | None = None
    max_workgroup_count: tuple[int, int, int] | None = None
    max_shared_memory_bytes: int | None = None
    max_push_constants_bytes: int | None = None
    max_storage_buffer_range: int | None = None
    min_storage_buffer_offset_alignment: int | None = None
    max_bound_descriptor_sets: int | None = None
    max_memory_allocation_count: int | None = None
    subgroup_size: int | None = None
    min_subgroup_size: int | None = None
    max_subgroup_size: int | None = None
    compute_units: int | None = None  # SMs, CUs, cores


@dataclass(frozen=True)
class MatrixShape:
    """One cooperative-matrix / MMA configuration."""

    m: int
    n: int
    k: int
    a_type: str
    b_type: str
    c_type: str
    result_type: str
    scope: str = "subgroup"
    saturating: bool = False


@dataclass(frozen=True)
class Features:
    #: Feature flags under their Vulkan names (bufferDeviceAddress, shaderFloat16, ...).
    flags: dict[str, bool] = field(default_factory=dict)
    cooperative_matrix: tuple[MatrixShape, ...] = ()
    subgroup_operations: tuple[str, ...] = ()
    subgroup_stages: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryHeap:
    size_bytes: int
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryType:
    heap_index: int
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Memory:
    total_bytes: int | None = None
    heaps: tuple[MemoryHeap, ...] = ()
    types: tuple[MemoryType, ...] = ()


@dataclass(frozen=True)
class QueueFamily:
    index: int
    count: int
    flags: tuple[str, ...]
    timestamp_valid_bits: int = 0


@dataclass(frozen=True)
class Timing:
    timestamp_period_ns: float | None = None
    calibrated_time_domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tier:
    name: str
    supported: bool
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceInfo:
    """Everything halbench knows about one device, read-only."""

    driver: str
    ordinal: int
    identity: Identity
    limits: Limits = Limits()
    features: Features = Features()
    memory: Memory = Memory()
    queues: tuple[QueueFamily, ...] = ()
    timing: Timing = Timing()
    extensions: tuple[str, ...] = ()
    tiers: tuple[Tier, ...] = ()
    #: Optional capabilities the device offers beyond its baseline (push_descriptor, ...).
    opportunities: tuple[str, ...] = ()
    #: Driver-specific attributes in the API's own naming (CUDA device attributes, ...).
    attributes: dict[str, Any] = field(default_factory=dict)
    #: Queries that failed: query name -> error message. The rest of the dump still prints.
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return f"{self.driver}://{self.ordinal}"

    @property
    def name(self) -> str:
        return self.identity.name

    def tier(self, name: str) -> Tier | None:
        return next((t for t in self.tiers if t.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["uri"] = self.uri
        return _jsonable(d)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


class ProbeCache:
    """A probe's result, taken once per process: the device list, or why the API is missing
    (a missing library is not retried on every listing)."""

    def __init__(self, probe: Callable[[], list[DeviceInfo]]):
        self._probe = probe
        self._lock = threading.Lock()
        self._value: list[DeviceInfo] | DriverUnavailable | None = None

    def get(self) -> list[DeviceInfo]:
        with self._lock:
            if self._value is None:
                try:
                    self._value = self._probe()
                except DriverUnavailable as e:
                    self._value = e
            value = self._value
        if isinstance(value, DriverUnavailable):
            raise DriverUnavailable(value.driver, value.reason)
        return list(value)

    def clear(self) -> None:
        with self._lock:
            self._value = None


def gpu_limits(attrs: dict[str, Any]) -> Limits:
    """Limits from CUDA-style device attributes (the CUDA and HIP probes name them alike)."""
    def dims(prefix: str) -> tuple[int, int, int] | None:
        keys = [f"{prefix}_{a}" for a in "xyz"]
        return tuple(attrs[k] for k in keys) if all(k in attrs for k in keys) else None  # type: ignore[return-value]

    warp = attrs.get("warp_size")
    return Limits(
        max_workgroup_size=dims("max_block_dim"), max_workgroup_invocations=attrs.get("max_threads_per_block"),
        max_workgroup_count=dims("max_grid_dim"),
        max_shared_memory_bytes=attrs.get("max_shared_memory_per_block_bytes"),
        subgroup_size=warp, min_subgroup_size=warp, max_subgroup_size=warp,
        compute_units=attrs.get("multiprocessor_count"),
    )
