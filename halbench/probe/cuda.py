"""CUDA probe through cuda-python's driver API (``cuda.bindings.driver``).

Reads what IREE's CUDA device dump prints (compute capability, launch / block /
multiprocessor limits, memory and sync flags, L2, SM count, clocks, warp size). The mapping
from raw attribute values to a DeviceInfo is a pure function, tested with recorded H100 values.
Results are cached per process.
"""

from __future__ import annotations

from typing import Any

from halbench.errors import DriverError, DriverUnavailable
from halbench.probe.info import (
    DeviceInfo,
    Features,
    Identity,
    MatrixShape,
    Memory,
    ProbeCache,
    gpu_limits,
)
from halbench.probe.status import cuda_check, cuda_status_name
from halbench.uri import dashed_uuid

__all__ = ["ATTRIBUTES", "clear_cache", "device_info_from_attributes", "mma_shapes", "query_devices"]

DRIVER = "cuda"

#: readable name -> CU_DEVICE_ATTRIBUTE_* suffix. Units are in the name (bytes, kHz, bits).
ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("compute_capability_major", "COMPUTE_CAPABILITY_MAJOR"),
    ("compute_capability_minor", "COMPUTE_CAPABILITY_MINOR"),
    # launch limits
    ("max_block_dim_x", "MAX_BLOCK_DIM_X"), ("max_block_dim_y", "MAX_BLOCK_DIM_Y"),
    ("max_block_dim_z", "MAX_BLOCK_DIM_Z"),
    ("max_grid_dim_x", "MAX_GRID_DIM_X"), ("max_grid_dim_y", "MAX_GRID_DIM_Y"), ("max_grid_dim_z", "MAX_GRID_DIM_Z"),
    # per block
    ("max_threads_per_block", "MAX_THREADS_PER_BLOCK"),
    ("max_registers_per_block", "MAX_REGISTERS_PER_BLOCK"),
    ("max_shared_memory_per_block_bytes", "MAX_SHARED_MEMORY_PER_BLOCK"),
    ("max_shared_memory_per_block_optin_bytes", "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
    ("reserved_shared_memory_per_block_bytes", "RESERVED_SHARED_MEMORY_PER_BLOCK"),
    ("total_constant_memory_bytes", "TOTAL_CONSTANT_MEMORY"),
    # per multiprocessor
    ("multiprocessor_count", "MULTIPROCESSOR_COUNT"),
    ("max_threads_per_multiprocessor", "MAX_THREADS_PER_MULTIPROCESSOR"),
    ("max_blocks_per_multiprocessor", "MAX_BLOCKS_PER_MULTIPROCESSOR"),
    ("max_registers_per_multiprocessor", "MAX_REGISTERS_PER_MULTIPROCESSOR"),
    ("max_shared_memory_per_multiprocessor_bytes", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
    ("warp_size", "WARP_SIZE"),
    # memory
    ("unified_addressing", "UNIFIED_ADDRESSING"),
    ("managed_memory", "MANAGED_MEMORY"),
    ("concurrent_managed_access", "CONCURRENT_MANAGED_ACCESS"),
    ("pageable_memory_access", "PAGEABLE_MEMORY_ACCESS"),
    ("pageable_memory_access_uses_host_page_tables", "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES"),
    ("direct_managed_mem_access_from_host", "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST"),
    ("can_map_host_memory", "CAN_MAP_HOST_MEMORY"),
    ("host_native_atomic_supported", "HOST_NATIVE_ATOMIC_SUPPORTED"),
    ("memory_pools_supported", "MEMORY_POOLS_SUPPORTED"),
    ("virtual_memory_management_supported", "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"),
    ("ecc_enabled", "ECC_ENABLED"),
    ("l2_cache_size_bytes", "L2_CACHE_SIZE"),
    ("max_persisting_l2_cache_size_bytes", "MAX_PERSISTING_L2_CACHE_SIZE"),
    ("memory_clock_rate_khz", "MEMORY_CLOCK_RATE"),
    ("global_memory_bus_width_bits", "GLOBAL_MEMORY_BUS_WIDTH"),
    # sync and execution
    ("concurrent_kernels", "CONCURRENT_KERNELS"),
    ("async_engine_count", "ASYNC_ENGINE_COUNT"),
    ("cooperative_launch", "COOPERATIVE_LAUNCH"),
    ("cluster_launch", "CLUSTER_LAUNCH"),
    ("compute_preemption_supported", "COMPUTE_PREEMPTION_SUPPORTED"),
    ("stream_priorities_supported", "STREAM_PRIORITIES_SUPPORTED"),
    ("timeline_semaphore_interop_supported", "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED"),
    ("kernel_exec_timeout", "KERNEL_EXEC_TIMEOUT"),
    ("clock_rate_khz", "CLOCK_RATE"),
    ("integrated", "INTEGRATED"),
    ("compute_mode", "COMPUTE_MODE"),
    ("tcc_driver", "TCC_DRIVER"),
    ("pci_domain_id", "PCI_DOMAIN_ID"), ("pci_bus_id", "PCI_BUS_ID"), ("pci_device_id", "PCI_DEVICE_ID"),
    ("multi_gpu_board", "MULTI_GPU_BOARD"),
    ("gpu_direct_rdma_supported", "GPU_DIRECT_RDMA_SUPPORTED"),
    ("tensor_map_access_supported", "TENSOR_MAP_ACCESS_SUPPORTED"),
)

_cache = ProbeCache(lambda: _probe())  # late-bound: tests may swap _probe


def query_devices() -> list[DeviceInfo]:
    """Every CUDA device, probed once per process; DriverUnavailable when libcuda is missing."""
    return _cache.get()


def clear_cache() -> None:
    _cache.clear()


def mma_shapes(major: int, minor: int) -> tuple[MatrixShape, ...]:
    """Tensor-core (warp-level ``mma.sync``; Hopper's warpgroup ``wgmma``) shapes by compute
    capability, from the PTX ISA's tables. CUDA has no query for these; this is the table."""
    cc = (major, minor)
    rows: list[tuple[int, int, int, str, str]] = []  # m, n, k, input type, accumulator type
    if cc >= (7, 0):
        rows += [(16, 16, 16, "f16", "f16"), (16, 16, 16, "f16", "f32")]  # wmma
    if cc >= (7, 2):
        rows += [(16, 16, 16, "i8", "i32"), (16, 16, 16, "u8", "i32")]
    if cc >= (7, 5):
        rows += [(16, 8, 8, "f16", "f32")]
    if cc >= (8, 0):
        rows += [(16, 8, 16, "f16", "f16"), (16, 8, 16, "f16", "f32"), (16, 8, 16, "bf16", "f32"),
                 (16, 8, 8, "tf32", "f32"), (16, 8, 32, "i8", "i32"), (16, 8, 32, "u8", "i32"),
                 (8, 8, 4, "f64", "f64")]
    if cc >= (8, 9):
        rows += [(16, 8, 32, "f8e4m3", "f32"), (16, 8, 32, "f8e5m2", "f32")]
    out = [MatrixShape(m, n, k, t, t, acc, acc) for m, n, k, t, acc in rows]
    if major == 9:  # wgmma: one warpgroup (4 warps), N up to 256 (sm_90a)
        out += [MatrixShape(64, 256, 16, t, t, "f32", "f32", scope="warpgroup") for t in ("f16", "bf16")]
        out += [MatrixShape(64, 256, 32, t, t, "f32", "f32", scope="warpgroup") for t in ("f8e4m3", "f8e5m2")]
        out += [MatrixShape(64, 256, 32, "i8", "i8", "i32", "i32", scope="warpgroup")]
    return tuple(out)


def _flags(major: int, minor: int) -> dict[str, bool]:
    """Vulkan-named equivalents where the concept carries over (docs/device-schema.md)."""
    cc = (major, minor)
    return {
        "bufferDeviceAddress": True,  # every CUDA buffer is a raw device pointer
        "storageBuffer8BitAccess": True,
        "storageBuffer16BitAccess": True,
        "shaderInt8": True,
        "shaderFloat16": cc >= (5, 3),  # native half arithmetic
        "shaderIntegerDotProduct": cc >= (6, 1),  # dp4a
        "shaderBFloat16Type": cc >= (8, 0),
        "shaderBFloat16DotProduct": False,
        "shaderBFloat16CooperativeMatrix": cc >= (8, 0),
        "cooperativeMatrix": cc >= (7, 0),  # tensor cores
        "subgroupSizeControl": False,  # the warp is always 32
        "shaderInt64": True,
        "shaderFloat64": True,
    }


def _version(v: int) -> str:
    """CUDA packs versions as 1000 * major + 10 * minor (13000 -> "13.0")."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def device_info_from_attributes(ordinal: int, name: str, uuid: bytes | None, pci_bus_id: str | None,
                                total_memory: int | None, driver_cuda_version: int, attrs: dict[str, int],
                                driver_version: str = "", errors: dict[str, str] | None = None) -> DeviceInfo:
    """Build a DeviceInfo from raw CUDA answers (``attrs`` keyed by :data:`ATTRIBUTES` names)."""
    major, minor = attrs.get("compute_capability_major", 0), attrs.get("compute_capability_minor", 0)
    identity = Identity(
        name=name, vendor="NVIDIA", vendor_id=0x10DE, device_id=attrs.get("pci_device_id"),
        device_type="integrated-gpu" if attrs.get("integrated") else "discrete-gpu",
        uuid=dashed_uuid(uuid) if uuid and any(uuid) else None, pci_bus_id=pci_bus_id,
        api="CUDA", api_version=_version(driver_cuda_version), driver_name="NVIDIA",
        driver_version=driver_version, arch=f"sm_{major}{minor}", compute_capability=f"{major}.{minor}",
    )
    limits = gpu_limits(attrs)
    attributes: dict[str, Any] = {"compute_capability": f"{major}.{minor}",
                                  "driver_max_cuda_version": _version(driver_cuda_version), **attrs}
    features = Features(flags=_flags(major, minor), cooperative_matrix=mma_shapes(major, minor))
    return DeviceInfo(driver=DRIVER, ordinal=ordinal, identity=identity, limits=limits, features=features,
                      memory=Memory(total_bytes=total_memory), attributes=attributes, errors=dict(errors or {}))


def _probe() -> list[DeviceInfo]:
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise DriverUnavailable(DRIVER, f"cuda-python is not installed ({e})") from e
    except Exception as e:  # older cuda-python dlopens libcuda at import
        raise DriverUnavailable(DRIVER, _load_reason(e)) from e
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # cuda-python >= 12.9 finds libcuda lazily, on the first call
        raise DriverUnavailable(DRIVER, _load_reason(e)) from e
    if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
        return []
    if err != driver.CUresult.CUDA_SUCCESS:
        raise DriverUnavailable(DRIVER, f"cuInit failed: {_status(driver, err)}")
    count = _check(driver, driver.cuDeviceGetCount(), "cuDeviceGetCount")
    cuda_version = _check(driver, driver.cuDriverGetVersion(), "cuDriverGetVersion")
    kernel_driver = _nvml_driver_version()
    return [_probe_device(driver, i, cuda_version, kernel_driver) for i in range(count)]


def _probe_device(driver: Any, ordinal: int, cuda_version: int, kernel_driver: str) -> DeviceInfo:
    dev = _check(driver, driver.cuDeviceGet(ordinal), "cuDeviceGet")
    errors: dict[str, str] = {}

    def get(what: str, result: tuple) -> Any:
        try:
            return _check(driver, result, what)
        except DriverError as e:
            errors[what] = str(e)
            return None

    name = get("cuDeviceGetName", driver.cuDeviceGetName(256, dev))
    uuid = get("cuDeviceGetUuid", driver.cuDeviceGetUuid(dev))
    pci = get("cuDeviceGetPCIBusId", driver.cuDeviceGetPCIBusId(64, dev))
    total = get("cuDeviceTotalMem", driver.cuDeviceTotalMem(dev))
    attrs: dict[str, int] = {}
    for key, suffix in ATTRIBUTES:
        enum = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{suffix}", None)
        if enum is None:  # an attribute this cuda-python predates
            continue
        value = get(f"attribute.{key}", driver.cuDeviceGetAttribute(enum, dev))
        if value is not None:
            attrs[key] = int(value)
    return device_info_from_attributes(
        ordinal, _text(name) or f"CUDA device {ordinal}", bytes(uuid.bytes) if uuid is not None else None,
        _text(pci) or None, int(total) if total is not None else None, cuda_version, attrs,
        driver_version=kernel_driver, errors=errors)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value).strip()


def _status(driver: Any, err: Any) -> str:
    return cuda_status_name(driver, err)


def _check(driver: Any, result: tuple, what: str) -> Any:
    return cuda_check(driver, result, what)


def _load_reason(e: BaseException) -> str:
    text = str(e)
    # cuda.pathfinder raises DynamicLibNotFoundError; older bindings a RuntimeError from dlopen.
    if "NotFound" in type(e).__name__ or any(s in text for s in ("not found", "cannot open", "dlopen")):
        return "libcuda.so.1 not found (is the NVIDIA driver installed?)"
    return f"cannot load the CUDA driver: {type(e).__name__}: {text}"


def _nvml_driver_version() -> str:
    """The kernel driver version ("575.57.08"): only NVML knows it; optional."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return _text(pynvml.nvmlSystemGetDriverVersion())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML missing or failing only costs this one field
        return ""
