"""Pure Vulkan decoding and judgement: enum names, versions, the ``vulkan-1.3`` tier, opportunities.

Nothing here touches the Vulkan API, so tests can feed it masked or invented data (a device
below the baseline) without a driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from halbench.probe.info import DeviceInfo, Tier

__all__ = [
    "COMPONENT_TYPES",
    "DEVICE_TYPES",
    "HEAP_FLAGS",
    "QUEUE_FLAGS",
    "SCOPES",
    "STAGES",
    "SUBGROUP_OPS",
    "TIER_FEATURES",
    "TIER_VULKAN_1_3",
    "TIME_DOMAINS",
    "TYPE_FLAGS",
    "VENDORS",
    "bits",
    "decode_api_version",
    "decode_driver_version",
    "evaluate_device_tier",
    "evaluate_tier",
    "opportunities",
    "version_tuple",
]

TIER_VULKAN_1_3 = "vulkan-1.3"
#: Features the vulkan-1.3 tier requires besides API >= 1.3 and a compute queue (IREE's baseline).
TIER_FEATURES = ("timelineSemaphore", "scalarBlockLayout", "synchronization2")

_VENDOR_NVIDIA = 0x10DE

VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x13B5: "ARM", 0x5143: "Qualcomm",
           0x1010: "ImgTec", 0x106B: "Apple", 0x1AE0: "Google", 0x10005: "Mesa", 0x14E4: "Broadcom"}
DEVICE_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}
QUEUE_FLAGS = {0x1: "graphics", 0x2: "compute", 0x4: "transfer", 0x8: "sparse-binding", 0x10: "protected",
               0x20: "video-decode", 0x40: "video-encode", 0x100: "optical-flow"}
HEAP_FLAGS = {0x1: "device-local", 0x2: "multi-instance"}
TYPE_FLAGS = {0x1: "device-local", 0x2: "host-visible", 0x4: "host-coherent", 0x8: "host-cached",
              0x10: "lazily-allocated", 0x20: "protected", 0x40: "device-coherent-amd",
              0x80: "device-uncached-amd", 0x100: "rdma-capable-nv"}
SUBGROUP_OPS = {0x1: "basic", 0x2: "vote", 0x4: "arithmetic", 0x8: "ballot", 0x10: "shuffle",
                0x20: "shuffle-relative", 0x40: "clustered", 0x80: "quad", 0x100: "partitioned-nv",
                0x200: "rotate", 0x400: "rotate-clustered"}
STAGES = {0x1: "vertex", 0x2: "tessellation-control", 0x4: "tessellation-evaluation", 0x8: "geometry",
          0x10: "fragment", 0x20: "compute", 0x40: "task", 0x80: "mesh", 0x100: "raygen",
          0x200: "any-hit", 0x400: "closest-hit", 0x800: "miss", 0x1000: "intersection", 0x2000: "callable"}
# VkComponentTypeKHR, plus bfloat16 (VK_KHR_shader_bfloat16) and float8 (VK_EXT_shader_float8).
COMPONENT_TYPES = {0: "f16", 1: "f32", 2: "f64", 3: "i8", 4: "i16", 5: "i32", 6: "i64", 7: "u8", 8: "u16",
                   9: "u32", 10: "u64", 1000141000: "bf16", 1000491000: "i8-packed", 1000491001: "u8-packed",
                   1000491002: "f8e4m3", 1000491003: "f8e5m2"}
SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue-family"}
TIME_DOMAINS = {0: "device", 1: "clock-monotonic", 2: "clock-monotonic-raw", 3: "query-performance-counter"}


def bits(value: int, names: dict[int, str]) -> tuple[str, ...]:
    """Names of the set bits; unknown bits stay visible as hex."""
    out = [n for bit, n in names.items() if value & bit]
    rest = value & ~sum(names)
    return tuple(out + ([f"0x{rest:x}"] if rest else []))


def decode_api_version(v: int) -> str:
    """``VK_API_VERSION_*`` packing: variant(3) major(7) minor(10) patch(12)."""
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def decode_driver_version(v: int, vendor_id: int | None, driver_id: str = "") -> str:
    """driverVersion is vendor-defined: NVIDIA packs 10.8.8.6 bits, Intel's Windows driver
    18.14 bits; everyone else (Mesa, AMD, ...) uses the VK_MAKE_API_VERSION layout."""
    if vendor_id == _VENDOR_NVIDIA:
        return f"{(v >> 22) & 0x3FF}.{(v >> 14) & 0xFF}.{(v >> 6) & 0xFF}.{v & 0x3F}"
    if driver_id == "INTEL_PROPRIETARY_WINDOWS":
        return f"{v >> 14}.{v & 0x3FFF}"
    return f"{(v >> 22) & 0x3FF}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def version_tuple(text: str) -> tuple[int, ...]:
    """``"1.3.230"`` -> ``(1, 3, 230)``; junk parts count as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in text.split(".")) if text else (0,)


def _queue_flags(q: Any) -> Iterable[str]:
    return q["flags"] if isinstance(q, Mapping) else q.flags


def evaluate_tier(api_version: str, queues: Iterable[Any], flags: Mapping[str, bool]) -> Tier:
    """The ``vulkan-1.3`` tier from plain data: queue families are QueueFamily objects or dicts
    with ``flags``; ``flags`` maps Vulkan feature names to bools. Lists everything missing."""
    missing: list[str] = []
    if version_tuple(api_version)[:2] < (1, 3):
        missing.append(f"apiVersion>=1.3 (device has {api_version or 'unknown'})")
    if not any("compute" in _queue_flags(q) for q in queues):
        missing.append("compute queue")
    missing.extend(f for f in TIER_FEATURES if not flags.get(f))
    return Tier(TIER_VULKAN_1_3, not missing, tuple(missing))


def evaluate_device_tier(info: DeviceInfo) -> Tier:
    """:func:`evaluate_tier` over a probed (or edited) DeviceInfo."""
    return evaluate_tier(info.identity.api_version, info.queues, info.features.flags)


def opportunities(extensions: Iterable[str], flags: Mapping[str, bool],
                  instance_extensions: Iterable[str] = (), layers: Iterable[str] = ()) -> tuple[str, ...]:
    """Optional capabilities beyond the baseline that halbench can use when present."""
    ext, inst, lay = set(extensions), set(instance_extensions), set(layers)
    checks = (
        ("push_descriptor", "VK_KHR_push_descriptor" in ext),
        ("calibrated_timestamps", bool({"VK_KHR_calibrated_timestamps", "VK_EXT_calibrated_timestamps"} & ext)),
        ("external_memory_fd", "VK_KHR_external_memory_fd" in ext),
        ("external_memory_host", "VK_EXT_external_memory_host" in ext),
        ("cooperative_matrix", bool(flags.get("cooperativeMatrix"))),
        ("bfloat16", bool(flags.get("shaderBFloat16Type"))),
        ("sparse", bool(flags.get("sparseBinding"))),
        ("debug_utils", "VK_EXT_debug_utils" in inst),
        ("validation", "VK_LAYER_KHRONOS_validation" in lay),
    )
    return tuple(name for name, ok in checks if ok)
