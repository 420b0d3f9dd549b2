"""The HIP probe: the unavailable path here, and the mapping from a recorded MI300X properties object."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from halbench.errors import DriverUnavailable
from halbench.probe import hip

# hipGetDeviceProperties on an MI300X (ROCm 6.2), as hip-python returns it: str names, list dims.
MI300X = SimpleNamespace(
    name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-", major=9, minor=4,
    totalGlobalMem=205_822_885_888, sharedMemPerBlock=65536, sharedMemPerBlockOptin=65536, regsPerBlock=65536,
    warpSize=64, maxThreadsPerBlock=1024, maxThreadsDim=[1024, 1024, 1024],
    maxGridSize=[2147483647, 65536, 65536], clockRate=2_100_000, memoryClockRate=1_300_000, memoryBusWidth=8192,
    totalConstMem=2147483647, multiProcessorCount=304, l2CacheSize=4_194_304, maxThreadsPerMultiProcessor=2048,
    maxSharedMemoryPerMultiProcessor=65536, pciDomainID=0, pciBusID=0x0C, pciDeviceID=0, integrated=0,
    managedMemory=1, concurrentManagedAccess=1, unifiedAddressing=1, isLargeBar=1, ECCEnabled=1,
    kernelExecTimeoutEnabled=0, cooperativeLaunch=1, concurrentKernels=1, asyncEngineCount=1,
)


def test_unavailable_here_names_the_library() -> None:
    try:
        devices = hip.query_devices()
    except DriverUnavailable as e:
        assert e.driver == "hip" and "libamdhip64.so not found" in e.reason
    else:
        pytest.skip(f"HIP is available here ({len(devices)} devices)")


def test_mi300x_mapping() -> None:
    uuid = bytes.fromhex("0123456789abcdef0123456789abcdef")
    d = hip.device_info_from_props(MI300X, 0, driver_version=60_243_484, runtime_version=60_243_484, uuid=uuid)
    ident = d.identity
    assert d.uri == "hip://0" and ident.name == "AMD Instinct MI300X" and ident.vendor == "AMD"
    assert ident.arch == "gfx942" and ident.compute_capability == "9.4" and ident.api == "HIP"
    assert ident.driver_version == "6.2.43484" and ident.pci_bus_id == "0000:0c:00.0"
    assert ident.uuid == "GPU-01234567-89ab-cdef-0123-456789abcdef"
    assert d.limits.compute_units == 304 and d.limits.subgroup_size == 64
    assert d.limits.max_workgroup_size == (1024, 1024, 1024) and d.limits.max_shared_memory_bytes == 65536
    assert d.memory.total_bytes == 205_822_885_888
    assert d.attributes["gcn_arch_name"] == "gfx942:sramecc+:xnack-"
    assert d.attributes["clock_rate_khz"] == 2_100_000 and d.attributes["l2_cache_size_bytes"] == 4_194_304
    assert d.features.flags["cooperativeMatrix"] and d.features.flags["shaderBFloat16Type"]
    types = {s.a_type for s in d.features.cooperative_matrix}
    assert {"f16", "bf16", "i8", "f8e4m3fnuz"} <= types


def test_mapping_tolerates_a_sparse_properties_object() -> None:
    d = hip.device_info_from_props(SimpleNamespace(name=b"gfx1100 card\0\0", gcnArchName="gfx1100"), 1)
    assert d.identity.name == "gfx1100 card" and d.identity.arch == "gfx1100"
    assert d.limits.max_workgroup_size is None and d.memory.total_bytes is None
    assert {"f16", "bf16", "i8"} <= {s.a_type for s in d.features.cooperative_matrix}  # WMMA


def test_mapping_accepts_the_real_binding_type() -> None:
    hip_mod = pytest.importorskip("hip").hip
    d = hip.device_info_from_props(hip_mod.hipDeviceProp_t(), 0)  # zeroed: no crash, no arch
    assert d.identity.arch is None and d.features.cooperative_matrix == ()
