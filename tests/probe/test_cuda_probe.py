"""The CUDA probe: the unavailable path here, and the attribute mapping with recorded H100 values."""

from __future__ import annotations

import pytest

from halbench.errors import DriverUnavailable
from halbench.probe import cuda

# Recorded from an H100 80GB HBM3 (SXM5), CUDA driver 12.8: cuDeviceGetAttribute values.
H100 = {
    "compute_capability_major": 9, "compute_capability_minor": 0,
    "max_block_dim_x": 1024, "max_block_dim_y": 1024, "max_block_dim_z": 64,
    "max_grid_dim_x": 2147483647, "max_grid_dim_y": 65535, "max_grid_dim_z": 65535,
    "max_threads_per_block": 1024, "max_registers_per_block": 65536,
    "max_shared_memory_per_block_bytes": 49152, "max_shared_memory_per_block_optin_bytes": 232448,
    "multiprocessor_count": 132, "max_threads_per_multiprocessor": 2048, "max_blocks_per_multiprocessor": 32,
    "max_registers_per_multiprocessor": 65536, "max_shared_memory_per_multiprocessor_bytes": 233472,
    "warp_size": 32, "unified_addressing": 1, "managed_memory": 1, "concurrent_managed_access": 1,
    "l2_cache_size_bytes": 52428800, "memory_clock_rate_khz": 2619000, "global_memory_bus_width_bits": 5120,
    "clock_rate_khz": 1980000, "kernel_exec_timeout": 0, "integrated": 0, "pci_device_id": 0,
}
UUID = bytes.fromhex("8c1f5e2a3b4d4e6f9a0b1c2d3e4f5a6b")


def test_unavailable_here_names_the_library() -> None:
    try:
        devices = cuda.query_devices()
    except DriverUnavailable as e:
        assert e.driver == "cuda" and "libcuda.so.1 not found" in e.reason
        with pytest.raises(DriverUnavailable):  # cached, and raised again each time
            cuda.query_devices()
    else:
        pytest.skip(f"CUDA is available here ({len(devices)} devices)")


def test_h100_mapping() -> None:
    d = cuda.device_info_from_attributes(0, "NVIDIA H100 80GB HBM3", UUID, "00000000:18:00.0",
                                         85_029_158_912, 12080, H100, driver_version="570.124.06")
    assert d.uri == "cuda://0" and d.identity.uuid == "GPU-8c1f5e2a-3b4d-4e6f-9a0b-1c2d3e4f5a6b"
    assert d.identity.arch == "sm_90" and d.identity.compute_capability == "9.0"
    assert d.identity.api_version == "12.8" and d.identity.driver_version == "570.124.06"
    assert d.limits.max_workgroup_size == (1024, 1024, 64) and d.limits.compute_units == 132
    assert d.limits.subgroup_size == 32 and d.memory.total_bytes == 85_029_158_912
    assert d.attributes["driver_max_cuda_version"] == "12.8"
    assert d.attributes["max_shared_memory_per_block_optin_bytes"] == 232448
    flags = d.features.flags
    assert flags["cooperativeMatrix"] and flags["shaderFloat16"] and flags["bufferDeviceAddress"]
    assert all(isinstance(v, bool) for v in flags.values())
    shapes = {(s.m, s.n, s.k, s.a_type, s.c_type, s.scope) for s in d.features.cooperative_matrix}
    assert (16, 8, 16, "f16", "f32", "subgroup") in shapes and (16, 8, 16, "bf16", "f32", "subgroup") in shapes
    assert (16, 8, 32, "f8e4m3", "f32", "subgroup") in shapes
    assert (64, 256, 16, "f16", "f32", "warpgroup") in shapes


def test_mma_table_by_capability() -> None:
    assert cuda.mma_shapes(6, 1) == ()
    turing = {s.a_type for s in cuda.mma_shapes(7, 5)}
    assert "f16" in turing and "bf16" not in turing
    ampere = {s.a_type for s in cuda.mma_shapes(8, 0)}
    assert {"bf16", "tf32"} <= ampere and "f8e4m3" not in ampere
    assert "f8e4m3" in {s.a_type for s in cuda.mma_shapes(8, 9)}
    assert not any(s.scope == "warpgroup" for s in cuda.mma_shapes(8, 9))


def test_every_attribute_exists_in_the_binding() -> None:
    driver = pytest.importorskip("cuda.bindings.driver")
    missing = [s for _, s in cuda.ATTRIBUTES if not hasattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{s}")]
    assert missing == []
