"""HIP probe through hip-python (``from hip import hip``).

Reads ``hipGetDeviceProperties`` (a ``hipDeviceProp_t``) and maps it to a DeviceInfo with the
same attribute names the CUDA probe uses, so dumps compare across vendors. The mapping is a
pure function of the properties object: it is tested with recorded MI300X values, since no AMD
GPU is available to CI. Results are cached per process.
"""

from __future__ import annotations

from typing import Any

from halbench.errors import DriverUnavailable
from halbench.probe.info import (
    DeviceInfo,
    Features,
    Identity,
    MatrixShape,
    Memory,
    ProbeCache,
    gpu_limits,
)
from halbench.uri import dashed_uuid

__all__ = ["clear_cache", "device_info_from_props", "mma_shapes", "query_devices"]

DRIVER = "hip"

# readable name (shared with the CUDA probe) -> hipDeviceProp_t member. Units are in the name.
_PROPS: tuple[tuple[str, str], ...] = (
    ("max_threads_per_block", "maxThreadsPerBlock"),
    ("max_registers_per_block", "regsPerBlock"),
    ("max_shared_memory_per_block_bytes", "sharedMemPerBlock"),
    ("max_shared_memory_per_block_optin_bytes", "sharedMemPerBlockOptin"),
    ("total_constant_memory_bytes", "totalConstMem"),
    ("multiprocessor_count", "multiProcessorCount"),
    ("max_threads_per_multiprocessor", "maxThreadsPerMultiProcessor"),
    ("max_shared_memory_per_multiprocessor_bytes", "maxSharedMemoryPerMultiProcessor"),
    ("warp_size", "warpSize"),
    ("unified_addressing", "unifiedAddressing"),
    ("managed_memory", "managedMemory"),
    ("concurrent_managed_access", "concurrentManagedAccess"),
    ("pageable_memory_access", "pageableMemoryAccess"),
    ("can_map_host_memory", "canMapHostMemory"),
    ("host_native_atomic_supported", "hostNativeAtomicSupported"),
    ("memory_pools_supported", "memoryPoolsSupported"),
    ("ecc_enabled", "ECCEnabled"),
    ("l2_cache_size_bytes", "l2CacheSize"),
    ("memory_clock_rate_khz", "memoryClockRate"),
    ("global_memory_bus_width_bits", "memoryBusWidth"),
    ("concurrent_kernels", "concurrentKernels"),
    ("async_engine_count", "asyncEngineCount"),
    ("cooperative_launch", "cooperativeLaunch"),
    ("kernel_exec_timeout", "kernelExecTimeoutEnabled"),
    ("clock_rate_khz", "clockRate"),
    ("integrated", "integrated"),
    ("is_large_bar", "isLargeBar"),
    ("pci_domain_id", "pciDomainID"), ("pci_bus_id", "pciBusID"), ("pci_device_id", "pciDeviceID"),
)

_cache = ProbeCache(lambda: _probe())  # late-bound: tests may swap _probe


def query_devices() -> list[DeviceInfo]:
    """Every HIP device, probed once per process; DriverUnavailable when libamdhip64 is missing."""
    return _cache.get()


def clear_cache() -> None:
    _cache.clear()


def mma_shapes(arch: str) -> tuple[MatrixShape, ...]:
    """Matrix-core shapes by gfx arch (MFMA on CDNA, WMMA on RDNA3/4), one wavefront each,
    from AMD's ISA documents: HIP has no query for them."""
    rows: list[tuple[int, int, int, str, str]] = []
    if arch in ("gfx908", "gfx90a") or arch.startswith(("gfx94", "gfx95")):
        rows += [(32, 32, 8, "f16", "f32"), (16, 16, 16, "f16", "f32")]
        rows += [(32, 32, 8, "i8", "i32"), (16, 16, 16, "i8", "i32")] if arch in ("gfx908", "gfx90a") else \
            [(32, 32, 16, "i8", "i32"), (16, 16, 32, "i8", "i32")]
        if arch != "gfx908":
            rows += [(32, 32, 8, "bf16", "f32"), (16, 16, 16, "bf16", "f32"), (16, 16, 4, "f64", "f64")]
        if arch.startswith("gfx94"):  # the FNUZ float8 encodings
            rows += [(16, 16, 32, "f8e4m3fnuz", "f32"), (16, 16, 32, "f8e5m2fnuz", "f32")]
        if arch.startswith("gfx95"):
            rows += [(16, 16, 32, "f8e4m3", "f32"), (16, 16, 32, "f8e5m2", "f32")]
    elif arch.startswith(("gfx11", "gfx12")):
        rows += [(16, 16, 16, "f16", "f32"), (16, 16, 16, "f16", "f16"), (16, 16, 16, "bf16", "f32"),
                 (16, 16, 16, "i8", "i32")]
        if arch.startswith("gfx12"):
            rows += [(16, 16, 16, "f8e4m3", "f32"), (16, 16, 16, "f8e5m2", "f32")]
    return tuple(MatrixShape(m, n, k, t, t, acc, acc) for m, n, k, t, acc in rows)


def _flags(arch: str, coop: bool) -> dict[str, bool]:
    """Vulkan-named equivalents where the concept carries over (docs/device-schema.md)."""
    bf16 = arch == "gfx90a" or arch.startswith(("gfx94", "gfx95", "gfx11", "gfx12"))
    return {
        "bufferDeviceAddress": True,  # HIP buffers are raw device pointers
        "storageBuffer8BitAccess": True,
        "storageBuffer16BitAccess": True,
        "shaderInt8": True,
        "shaderFloat16": True,  # every GCN3+ / RDNA GPU that ROCm supports has packed f16
        "shaderIntegerDotProduct": arch not in ("gfx900",),  # v_dot4 since gfx906
        "shaderBFloat16Type": bf16,
        "shaderBFloat16DotProduct": False,
        "shaderBFloat16CooperativeMatrix": bf16 and coop,
        "cooperativeMatrix": coop,
        "subgroupSizeControl": arch.startswith(("gfx10", "gfx11", "gfx12")),  # wave32 / wave64
        "shaderInt64": True,
        "shaderFloat64": True,
    }


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value or "").strip()


def _hip_version(v: int | None) -> str:
    """HIP packs versions as major * 10^7 + minor * 10^5 + patch (60443484 -> "6.4.43484")."""
    if not v:
        return ""
    return f"{v // 10_000_000}.{(v // 100_000) % 100}.{v % 100_000}"


def device_info_from_props(props: Any, ordinal: int, driver_version: int | None = None,
                           runtime_version: int | None = None, uuid: bytes | None = None,
                           errors: dict[str, str] | None = None) -> DeviceInfo:
    """Build a DeviceInfo from a ``hipDeviceProp_t`` (or anything with its member names)."""
    full_arch = _text(getattr(props, "gcnArchName", ""))  # "gfx942:sramecc+:xnack-"
    arch = full_arch.split(":", 1)[0] or None
    major, minor = int(getattr(props, "major", 0)), int(getattr(props, "minor", 0))
    attrs: dict[str, Any] = {"gcn_arch_name": full_arch, "compute_capability": f"{major}.{minor}"}
    for key, member in _PROPS:
        value = getattr(props, member, None)
        if value is not None:
            attrs[key] = int(value)
    for prefix, member in (("max_block_dim", "maxThreadsDim"), ("max_grid_dim", "maxGridSize")):
        for axis, v in zip("xyz", getattr(props, member, None) or ()):
            attrs[f"{prefix}_{axis}"] = int(v)
    if runtime_version:
        attrs["hip_runtime_version"] = _hip_version(runtime_version)
    pci = None
    if "pci_bus_id" in attrs:
        pci = f"{attrs.get('pci_domain_id', 0):04x}:{attrs['pci_bus_id']:02x}:{attrs.get('pci_device_id', 0):02x}.0"
    identity = Identity(
        name=_text(getattr(props, "name", "")) or f"HIP device {ordinal}", vendor="AMD", vendor_id=0x1002,
        device_type="integrated-gpu" if attrs.get("integrated") else "discrete-gpu",
        uuid=dashed_uuid(uuid) if uuid and any(uuid) else None, pci_bus_id=pci, api="HIP",
        api_version=_hip_version(runtime_version or driver_version), driver_name="ROCm",
        driver_version=_hip_version(driver_version), arch=arch, compute_capability=f"{major}.{minor}",
    )
    limits = gpu_limits(attrs)
    shapes = mma_shapes(arch or "")
    total = getattr(props, "totalGlobalMem", None)
    return DeviceInfo(driver=DRIVER, ordinal=ordinal, identity=identity, limits=limits,
                      features=Features(flags=_flags(arch or "", bool(shapes)), cooperative_matrix=shapes),
                      memory=Memory(total_bytes=int(total) if total is not None else None),
                      attributes=attrs, errors=dict(errors or {}))


def _probe() -> list[DeviceInfo]:
    try:
        from hip import hip
    except ImportError as e:
        raise DriverUnavailable(DRIVER, f"hip-python is not installed ({e})") from e
    try:
        err, count = hip.hipGetDeviceCount()
    except RuntimeError as e:  # hip-python dlopens libamdhip64.so on the first call
        if "libamdhip64" in str(e):
            raise DriverUnavailable(DRIVER, "libamdhip64.so not found (is ROCm installed?)") from e
        raise DriverUnavailable(DRIVER, f"cannot load the HIP runtime: {e}") from e
    if err == hip.hipError_t.hipErrorNoDevice:
        return []
    if err != hip.hipError_t.hipSuccess:
        raise DriverUnavailable(DRIVER, f"hipGetDeviceCount failed: {_status(hip, err)}")
    errors: dict[str, str] = {}
    driver_version = _call(hip, errors, "hipDriverGetVersion", hip.hipDriverGetVersion)
    runtime_version = _call(hip, errors, "hipRuntimeGetVersion", hip.hipRuntimeGetVersion)
    out = []
    for i in range(count):
        dev_errors = dict(errors)
        props = _call(hip, dev_errors, "hipGetDeviceProperties", hip.hipGetDeviceProperties, i)
        uuid = _call(hip, dev_errors, "hipDeviceGetUuid", hip.hipDeviceGetUuid, i)
        raw = getattr(uuid, "bytes", None)
        if isinstance(raw, str):
            raw = raw.encode("latin-1")
        out.append(device_info_from_props(props if props is not None else object(), i, driver_version,
                                          runtime_version, bytes(raw)[:16] if raw else None, dev_errors))
    return out


def _status(hip: Any, err: Any) -> str:
    return getattr(err, "name", str(err))


def _call(hip: Any, errors: dict[str, str], what: str, fn: Any, *args: Any) -> Any:
    """One check for every HIP call: hip-python returns (hipError_t, value)."""
    err, value = fn(*args)
    if err != hip.hipError_t.hipSuccess:
        errors[what] = f"{_status(hip, err)}: {what} failed"
        return None
    return value
