"""The Vulkan probe against a real driver (lavapipe in CI), and its pure tier logic."""

from __future__ import annotations

import dataclasses
import re

from halbench.probe import vulkan
from halbench.probe.info import DeviceInfo, QueueFamily
from halbench.probe.vulkan_decode import (
    TIER_VULKAN_1_3,
    decode_api_version,
    decode_driver_version,
    evaluate_device_tier,
    evaluate_tier,
    opportunities,
)

IREE_FLAGS = ("bufferDeviceAddress", "timelineSemaphore", "scalarBlockLayout", "synchronization2",
              "storageBuffer8BitAccess", "storageBuffer16BitAccess", "shaderInt8", "shaderFloat16",
              "shaderBFloat16Type", "shaderBFloat16DotProduct", "shaderBFloat16CooperativeMatrix",
              "shaderIntegerDotProduct", "subgroupSizeControl", "cooperativeMatrix")
DASHED = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_identity(lavapipe: DeviceInfo) -> None:
    ident = lavapipe.identity
    assert lavapipe.driver == "vulkan" and lavapipe.uri == f"vulkan://{lavapipe.ordinal}"
    assert ident.name.startswith("llvmpipe")
    assert ident.api == "Vulkan" and ident.api_version.startswith("1.3.")
    assert ident.vendor == "Mesa" and ident.vendor_id == 0x10005 and ident.device_type == "cpu"
    assert ident.driver_name == "llvmpipe" and ident.driver_info.startswith("Mesa")
    assert DASHED.match(ident.uuid) and DASHED.match(ident.driver_uuid)
    assert re.match(r"^\d+\.\d+\.\d+\.\d+$", ident.conformance_version)
    assert re.match(r"^\d+\.\d+\.\d+$", ident.driver_version)


def test_limits_subgroups_queues_memory_timing(lavapipe: DeviceInfo) -> None:
    lim = lavapipe.limits
    assert len(lim.max_workgroup_size) == 3 and lim.max_workgroup_invocations >= 128
    assert lim.max_shared_memory_bytes >= 16384 and lim.subgroup_size >= 1
    assert lim.min_subgroup_size <= lim.subgroup_size <= lim.max_subgroup_size
    assert "basic" in lavapipe.features.subgroup_operations and "compute" in lavapipe.features.subgroup_stages
    assert any("compute" in q.flags and q.timestamp_valid_bits > 0 for q in lavapipe.queues)
    assert lavapipe.memory.heaps and lavapipe.memory.types and lavapipe.memory.total_bytes > 0
    assert lavapipe.timing.timestamp_period_ns > 0
    assert {"device", "clock-monotonic"} <= set(lavapipe.timing.calibrated_time_domains)
    assert "VK_KHR_push_descriptor" in lavapipe.extensions
    assert lavapipe.errors == {}


def test_flags_are_complete_booleans(lavapipe: DeviceInfo) -> None:
    flags = lavapipe.features.flags
    assert set(IREE_FLAGS) <= flags.keys()
    assert all(isinstance(v, bool) for v in flags.values())
    # lavapipe (Mesa 22.3) has these; no cooperative matrix and no bfloat16.
    for f in ("bufferDeviceAddress", "timelineSemaphore", "scalarBlockLayout", "synchronization2"):
        assert flags[f], f
    if not flags["cooperativeMatrix"]:
        assert lavapipe.features.cooperative_matrix == ()


def test_tier_and_opportunities(lavapipe: DeviceInfo) -> None:
    tier = lavapipe.tier(TIER_VULKAN_1_3)
    assert tier is not None and tier.supported and tier.missing == ()
    assert evaluate_device_tier(lavapipe) == tier
    assert {"push_descriptor", "calibrated_timestamps", "external_memory_fd"} <= set(lavapipe.opportunities)


def test_below_baseline_by_masking(lavapipe: DeviceInfo) -> None:
    masked_flags = {**lavapipe.features.flags, "timelineSemaphore": False, "synchronization2": False}
    masked = dataclasses.replace(lavapipe, features=dataclasses.replace(lavapipe.features, flags=masked_flags))
    tier = evaluate_device_tier(masked)
    assert not tier.supported and tier.missing == ("timelineSemaphore", "synchronization2")

    old = dataclasses.replace(masked, identity=dataclasses.replace(masked.identity, api_version="1.2.198"),
                              queues=(QueueFamily(0, 1, ("graphics", "transfer"), 64),))
    tier = evaluate_device_tier(old)
    assert tier.missing[:2] == ("apiVersion>=1.3 (device has 1.2.198)", "compute queue")


def test_evaluate_tier_accepts_plain_dicts() -> None:
    queues = [{"flags": ["compute"]}]
    full = dict.fromkeys(("timelineSemaphore", "scalarBlockLayout", "synchronization2"), True)
    assert evaluate_tier("1.3.0", queues, full).supported
    assert evaluate_tier("1.4.303", queues, full).supported
    assert evaluate_tier("1.3.0", queues, {}).missing == ("timelineSemaphore", "scalarBlockLayout", "synchronization2")


def test_version_decoding() -> None:
    assert decode_api_version((1 << 22) | (3 << 12) | 230) == "1.3.230"
    # NVIDIA packs 10.8.8.6 bits: 575.57.8.0
    assert decode_driver_version((575 << 22) | (57 << 14) | (8 << 6), 0x10DE) == "575.57.8.0"
    assert decode_driver_version((23 << 22) | (2 << 12) | 1, 0x1002) == "23.2.1"  # Mesa / AMD layout
    assert decode_driver_version((101 << 14) | 5333, 0x8086, "INTEL_PROPRIETARY_WINDOWS") == "101.5333"


def test_opportunities_pure() -> None:
    got = opportunities(["VK_KHR_push_descriptor", "VK_KHR_calibrated_timestamps", "VK_EXT_external_memory_host"],
                        {"cooperativeMatrix": True, "shaderBFloat16Type": True, "sparseBinding": False},
                        ["VK_EXT_debug_utils"], ["VK_LAYER_KHRONOS_validation"])
    assert got == ("push_descriptor", "calibrated_timestamps", "external_memory_host", "cooperative_matrix",
                   "bfloat16", "debug_utils", "validation")


def test_probe_is_cached(vulkan_devices: list[DeviceInfo]) -> None:
    first = vulkan.query_devices()
    assert first == vulkan_devices
    assert all(a is b for a, b in zip(first, vulkan.query_devices()))  # no second instance


def test_to_dict_is_json_ready(lavapipe: DeviceInfo) -> None:
    import json

    d = json.loads(json.dumps(lavapipe.to_dict()))
    assert d["uri"] == lavapipe.uri and d["tiers"][0] == {"name": "vulkan-1.3", "supported": True, "missing": []}


def test_no_icd_is_unavailable_with_reason() -> None:
    import os
    import subprocess
    import sys

    code = ("from halbench.errors import DriverUnavailable\nfrom halbench.probe import vulkan\n"
            "try:\n    print(len(vulkan.query_devices()))\nexcept DriverUnavailable as e:\n    print(e.reason)")
    env = {**os.environ, "VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    assert line == "0" or line.startswith("vkCreateInstance failed: VK_ERROR_")


def test_missing_loader_is_unavailable(monkeypatch) -> None:
    import importlib.abc
    import sys

    class NoLoader(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "vulkan":  # what the binding raises when libvulkan.so.1 cannot be dlopened
                raise OSError("Cannot find Vulkan SDK version")
            return None

    monkeypatch.delitem(sys.modules, "vulkan", raising=False)
    monkeypatch.setattr(sys, "meta_path", [NoLoader(), *sys.meta_path])
    try:
        vulkan._probe()
    except vulkan.DriverUnavailable as e:
        assert e.driver == "vulkan" and e.reason.startswith("libvulkan.so.1 not found")
    else:
        raise AssertionError("expected DriverUnavailable")


def test_raw_struct_for_types_the_binding_lacks() -> None:
    import pytest

    vk = pytest.importorskip("vulkan")
    members = ("shaderBFloat16Type", "shaderBFloat16DotProduct", "shaderBFloat16CooperativeMatrix")
    s = vulkan._Struct(vk, "VkPhysicalDeviceNotInThisBindingKHR", 1000141000, members)
    assert s.raw and s.ptr.sType == 1000141000 and [s.get(m) for m in members] == [0, 0, 0]
    vk.ffi.cast("uint32_t*", s.owner)[vk.ffi.sizeof("VkBaseOutStructure") // 4 + 1] = 1  # as a driver would
    assert [s.get(m) for m in members] == [0, 1, 0]
    with pytest.raises(LookupError):  # no raw layout known: the probe reports it under errors
        vulkan._Struct(vk, "VkPhysicalDeviceNotInThisBindingKHR", "VK_STRUCTURE_TYPE_NOT_THERE", members)
