"""What the driver itself reads from a VkPhysicalDevice, and the vulkan-1.3 baseline check.

The probe (halbench/probe/vulkan.py) owns the full DeviceInfo; the driver reads the few things
it must act on straight from the physical device, so it never depends on a probe field that may
be missing. :func:`baseline_missing` takes a DeviceInfo, so tests can mask one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from halbench.drivers.vulkan._vk import ffi, instance, vk, vk_errors
from halbench.probe.info import DeviceInfo, Features, Identity, Limits, QueueFamily, Timing
from halbench.probe.vulkan import NV_COOP2_MEMBERS, NV_COOP2_STYPE

__all__ = [
    "BASELINE_FEATURES",
    "OPTIONAL_FEATURES",
    "Physical",
    "baseline_missing",
    "driver_view",
    "effective_info",
    "physical_devices",
]

#: The vulkan-1.3 tier: these features, API >= 1.3 and a compute queue.
BASELINE_FEATURES = ("timelineSemaphore", "scalarBlockLayout", "synchronization2")

#: Features enabled when present, per feature struct (robustBufferAccess is left off: it costs).
OPTIONAL_FEATURES = {
    "VkPhysicalDeviceFeatures": ("shaderInt64", "shaderInt16", "shaderFloat64"),
    "VkPhysicalDeviceVulkan11Features": ("storageBuffer16BitAccess", "uniformAndStorageBuffer16BitAccess",
                                         "variablePointersStorageBuffer", "variablePointers"),
    "VkPhysicalDeviceVulkan12Features": ("bufferDeviceAddress", "storageBuffer8BitAccess",
                                         "uniformAndStorageBuffer8BitAccess", "shaderFloat16", "shaderInt8",
                                         "vulkanMemoryModel", "vulkanMemoryModelDeviceScope",
                                         "shaderSubgroupExtendedTypes", "timelineSemaphore",
                                         "scalarBlockLayout"),
    "VkPhysicalDeviceVulkan13Features": ("synchronization2", "subgroupSizeControl", "computeFullSubgroups",
                                         "maintenance4", "shaderIntegerDotProduct"),
    "VkPhysicalDeviceCooperativeMatrixFeaturesKHR": ("cooperativeMatrix",),
}

#: Device extensions enabled when present (calibrated timestamps: KHR preferred over EXT).
OPTIONAL_EXTENSIONS = ("VK_KHR_push_descriptor", "VK_KHR_calibrated_timestamps", "VK_EXT_calibrated_timestamps",
                       "VK_KHR_cooperative_matrix", "VK_NV_cooperative_matrix2")

#: Of VkPhysicalDeviceCooperativeMatrix2FeaturesNV (the probe's layout), halbench enables
#: cooperative matrices of workgroup scope and of flexible dimensions (the peaks suite's
#: ``gemm-f16 mma: 2 / 3``) and tensor addressing (``mma: 4``, coopMatLoadTensorNV).
NV_COOP2_ENABLED = (*NV_COOP2_MEMBERS[:2], "cooperativeMatrixTensorAddressing")


def nv_coop2_struct(values: dict[str, bool] | None = None, pnext: Any = None) -> Any:
    """A raw VkPhysicalDeviceCooperativeMatrix2FeaturesNV (VkBaseOutStructure header, then the
    VkBool32 members) with ``values`` set, chained to ``pnext``."""
    words = ffi.new("uint32_t[]", (ffi.sizeof("VkBaseOutStructure") + 4 * len(NV_COOP2_MEMBERS)) // 4)
    head = ffi.cast("VkBaseOutStructure*", words)
    head.sType = NV_COOP2_STYPE
    head.pNext = ffi.cast("VkBaseOutStructure*", pnext) if pnext is not None else ffi.NULL
    first = ffi.sizeof("VkBaseOutStructure") // 4
    for i, m in enumerate(NV_COOP2_MEMBERS):
        words[first + i] = int(bool((values or {}).get(m)))
    return words


def nv_coop2_read(words: Any) -> dict[str, bool]:
    first = ffi.sizeof("VkBaseOutStructure") // 4
    return {m: bool(words[first + i]) for i, m in enumerate(NV_COOP2_MEMBERS)}


@dataclass
class Physical:
    """One physical device as the driver sees it."""

    handle: Any
    ordinal: int
    name: str
    api_version: tuple[int, int, int]
    uuid: bytes
    vendor_id: int
    device_id: int
    driver_version: int
    pipeline_cache_uuid: bytes
    limits: Any  # VkPhysicalDeviceLimits (cffi struct)
    extensions: frozenset[str]
    flags: dict[str, bool]
    queue_families: list[tuple[int, int, int]]  # (flags, count, timestampValidBits)
    memory: Any  # VkPhysicalDeviceMemoryProperties
    max_allocation_size: int = 1 << 62
    device_type: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def api_text(self) -> str:
        return ".".join(str(v) for v in self.api_version)


def _features(pd: Any, extensions: frozenset[str]) -> dict[str, bool]:
    structs = {n: getattr(vk, n)() for n in OPTIONAL_FEATURES if n != "VkPhysicalDeviceFeatures"}
    if "VK_KHR_cooperative_matrix" not in extensions:
        structs.pop("VkPhysicalDeviceCooperativeMatrixFeaturesKHR")
    chain = None
    for s in structs.values():
        s.pNext = chain if chain is not None else ffi.NULL
        chain = ffi.addressof(s)
    nv2 = None
    if "VK_NV_cooperative_matrix2" in extensions:
        nv2 = nv_coop2_struct(pnext=chain)
        chain = ffi.cast("void*", nv2)
    f2 = vk.VkPhysicalDeviceFeatures2(pNext=chain)
    vk.vkGetPhysicalDeviceFeatures2(pd, f2)
    flags: dict[str, bool] = {}
    for n, names in OPTIONAL_FEATURES.items():
        s = f2.features if n == "VkPhysicalDeviceFeatures" else structs.get(n)
        for f in names:
            flags[f] = bool(s is not None and getattr(s, f))
    got = nv_coop2_read(nv2) if nv2 is not None else {}
    flags.update({m: got.get(m, False) for m in NV_COOP2_ENABLED})
    return flags


def _read(pd: Any, ordinal: int) -> Physical:
    m4 = vk.VkPhysicalDeviceMaintenance3Properties()
    idp = vk.VkPhysicalDeviceIDProperties(pNext=ffi.addressof(m4))
    p2 = vk.VkPhysicalDeviceProperties2(pNext=ffi.addressof(idp))
    vk.vkGetPhysicalDeviceProperties2(pd, p2)
    p = p2.properties
    exts = frozenset(e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pd, None))
    v = p.apiVersion
    queues = [(q.queueFlags, q.queueCount, q.timestampValidBits)
              for q in vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)]
    return Physical(
        handle=pd, ordinal=ordinal, name=ffi.string(p.deviceName).decode(),
        api_version=(v >> 22, (v >> 12) & 0x3FF, v & 0xFFF), uuid=bytes(ffi.buffer(idp.deviceUUID)),
        vendor_id=p.vendorID, device_id=p.deviceID, driver_version=p.driverVersion,
        pipeline_cache_uuid=bytes(ffi.buffer(p.pipelineCacheUUID)), limits=p.limits, extensions=exts,
        flags=_features(pd, exts), queue_families=queues, memory=vk.vkGetPhysicalDeviceMemoryProperties(pd),
        max_allocation_size=m4.maxMemoryAllocationSize or (1 << 62), device_type=p.deviceType,
        extra={"props2": p2, "id": idp, "m3": m4})  # keep the structs the limits point into alive


_cache: list[Physical] | None = None


def physical_devices() -> list[Physical]:
    """Every physical device, in vkEnumeratePhysicalDevices order (= the probe's ordinals)."""
    global _cache
    if _cache is None:
        with vk_errors("vkEnumeratePhysicalDevices"):
            _cache = [_read(pd, i) for i, pd in enumerate(vk.vkEnumeratePhysicalDevices(instance()))]
    return _cache


def _version_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(".")[:2])
    except ValueError:
        return (0,)


def baseline_missing(info: DeviceInfo) -> list[str]:
    """What ``info`` lacks of the vulkan-1.3 baseline, by name; empty when it meets it."""
    missing = []
    if _version_tuple(info.identity.api_version) < (1, 3):
        missing.append(f"Vulkan 1.3 (it has {info.identity.api_version or 'an unknown version'})")
    if not any("compute" in q.flags for q in info.queues):
        missing.append("a compute queue")
    missing += [f for f in BASELINE_FEATURES if not info.features.flags.get(f)]
    return missing


def _queue_flag_names(bits: int) -> tuple[str, ...]:
    names = {vk.VK_QUEUE_GRAPHICS_BIT: "graphics", vk.VK_QUEUE_COMPUTE_BIT: "compute",
             vk.VK_QUEUE_TRANSFER_BIT: "transfer", vk.VK_QUEUE_SPARSE_BINDING_BIT: "sparse-binding"}
    return tuple(n for b, n in names.items() if bits & b)


def driver_view(p: Physical) -> DeviceInfo:
    """What the driver itself read of a physical device (the features it enables); merged under the
    probe's record by :func:`effective_info`."""
    from halbench.uri import dashed_uuid

    lim = p.limits
    return DeviceInfo(
        driver="vulkan", ordinal=p.ordinal,
        identity=Identity(name=p.name, vendor_id=p.vendor_id, device_id=p.device_id, uuid=dashed_uuid(p.uuid),
                          api="Vulkan", api_version=p.api_text),
        limits=Limits(max_workgroup_count=tuple(lim.maxComputeWorkGroupCount),
                      max_workgroup_size=tuple(lim.maxComputeWorkGroupSize),
                      max_push_constants_bytes=lim.maxPushConstantsSize,
                      min_storage_buffer_offset_alignment=lim.minStorageBufferOffsetAlignment,
                      max_memory_allocation_count=lim.maxMemoryAllocationCount),
        features=Features(flags=dict(p.flags)),
        queues=tuple(QueueFamily(i, c, _queue_flag_names(f), bits)
                     for i, (f, c, bits) in enumerate(p.queue_families)),
        timing=Timing(timestamp_period_ns=lim.timestampPeriod),
        extensions=tuple(sorted(p.extensions)))


def effective_info(info: DeviceInfo, p: Physical) -> DeviceInfo:
    """``info`` with what it leaves out filled in from the physical device (info wins: tests mask it)."""
    fb = driver_view(p)
    return replace(
        info,
        identity=info.identity if info.identity.api_version else replace(info.identity, api_version=p.api_text),
        features=replace(info.features, flags={**fb.features.flags, **info.features.flags}),
        queues=info.queues or fb.queues)
