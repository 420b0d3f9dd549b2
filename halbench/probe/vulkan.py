"""Vulkan probe through the ``vulkan`` cffi package: one instance, every physical device.

Structures are allocated with the binding's own ``ffi`` and chained by hand through ``pNext``,
because the binding's convenience wrappers neither chain nor set ``sType`` on output arrays.
Extension entry points come through ``vkGetInstanceProcAddr``. The instance is destroyed once
the devices are read; results are cached per process (an instance costs milliseconds to
hundreds of milliseconds, and drivers call this on every listing).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from halbench.errors import DriverUnavailable
from halbench.probe.info import (
    DeviceInfo,
    Features,
    Identity,
    Limits,
    MatrixShape,
    Memory,
    MemoryHeap,
    MemoryType,
    ProbeCache,
    QueueFamily,
    Timing,
)
from halbench.probe.status import vk_check, vk_exception_name
from halbench.probe.vulkan_decode import (
    COMPONENT_TYPES,
    DEVICE_TYPES,
    HEAP_FLAGS,
    QUEUE_FLAGS,
    SCOPES,
    STAGES,
    SUBGROUP_OPS,
    TIME_DOMAINS,
    TYPE_FLAGS,
    VENDORS,
    bits,
    decode_api_version,
    decode_driver_version,
    evaluate_tier,
    opportunities,
    version_tuple,
)
from halbench.uri import dashed_uuid

__all__ = ["FEATURE_FLAGS", "clear_cache", "query_devices"]

DRIVER = "vulkan"

# (ctype, sType constant name or raw value, core version that promoted it, extension, bool
# members in declaration order). A struct is chained only when the device has that core
# version or the extension. Structs the binding lacks (VK_KHR_shader_bfloat16, newer than
# vulkan 1.3.275) use their raw sType and a header + VkBool32 layout of our own.
#: VkPhysicalDeviceCooperativeMatrix2FeaturesNV (VK_NV_cooperative_matrix2, newer than the
#: binding): its sType and VkBool32 members in order (the Vulkan driver enables from the same list)
NV_COOP2_STYPE = 1000593000
NV_COOP2_MEMBERS = ("cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions",
                    "cooperativeMatrixReductions", "cooperativeMatrixConversions",
                    "cooperativeMatrixPerElementOperations", "cooperativeMatrixTensorAddressing",
                    "cooperativeMatrixBlockLoads")

_FEATURE_STRUCTS: tuple[tuple[str, str | int, tuple[int, int] | None, str, tuple[str, ...]], ...] = (
    ("VkPhysicalDevice16BitStorageFeatures", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES",
     (1, 1), "VK_KHR_16bit_storage", ("storageBuffer16BitAccess",)),
    ("VkPhysicalDevice8BitStorageFeatures", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES",
     (1, 2), "VK_KHR_8bit_storage", ("storageBuffer8BitAccess",)),
    ("VkPhysicalDeviceShaderFloat16Int8Features", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES",
     (1, 2), "VK_KHR_shader_float16_int8", ("shaderFloat16", "shaderInt8")),
    ("VkPhysicalDeviceBufferDeviceAddressFeatures", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES",
     (1, 2), "VK_KHR_buffer_device_address", ("bufferDeviceAddress",)),
    ("VkPhysicalDeviceTimelineSemaphoreFeatures", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES",
     (1, 2), "VK_KHR_timeline_semaphore", ("timelineSemaphore",)),
    ("VkPhysicalDeviceScalarBlockLayoutFeatures", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SCALAR_BLOCK_LAYOUT_FEATURES",
     (1, 2), "VK_EXT_scalar_block_layout", ("scalarBlockLayout",)),
    ("VkPhysicalDeviceVulkanMemoryModelFeatures", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES",
     (1, 2), "VK_KHR_vulkan_memory_model", ("vulkanMemoryModel",)),
    ("VkPhysicalDeviceSynchronization2Features", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SYNCHRONIZATION_2_FEATURES",
     (1, 3), "VK_KHR_synchronization2", ("synchronization2",)),
    ("VkPhysicalDeviceShaderIntegerDotProductFeatures",
     "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES",
     (1, 3), "VK_KHR_shader_integer_dot_product", ("shaderIntegerDotProduct",)),
    ("VkPhysicalDeviceSubgroupSizeControlFeatures", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES",
     (1, 3), "VK_EXT_subgroup_size_control", ("subgroupSizeControl", "computeFullSubgroups")),
    ("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
     "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR",
     None, "VK_KHR_cooperative_matrix", ("cooperativeMatrix", "cooperativeMatrixRobustBufferAccess")),
    ("VkPhysicalDeviceCooperativeMatrix2FeaturesNV", NV_COOP2_STYPE, None, "VK_NV_cooperative_matrix2",
     NV_COOP2_MEMBERS),
    ("VkPhysicalDeviceShaderBfloat16FeaturesKHR", 1000141000,
     None, "VK_KHR_shader_bfloat16",
     ("shaderBFloat16Type", "shaderBFloat16DotProduct", "shaderBFloat16CooperativeMatrix")),
)
# Members of VkPhysicalDeviceFeatures worth reporting for compute.
_CORE_FEATURES = ("shaderInt16", "shaderInt64", "shaderFloat64", "sparseBinding", "sparseResidencyBuffer",
                  "robustBufferAccess")

#: Every flag a Vulkan dump carries (false when the device lacks the struct's extension).
FEATURE_FLAGS = tuple(dict.fromkeys(
    [m for *_, members in _FEATURE_STRUCTS for m in members] + list(_CORE_FEATURES)))

_cache = ProbeCache(lambda: _probe())  # late-bound: tests may swap _probe


def query_devices() -> list[DeviceInfo]:
    """Every Vulkan physical device, probed once per process.

    Raises :class:`DriverUnavailable` when the loader or an instance is missing.
    """
    return _cache.get()


def clear_cache() -> None:
    """Forget the cached probe (the next query creates a new instance)."""
    _cache.clear()


def _probe() -> list[DeviceInfo]:
    try:
        import vulkan as vk
    except OSError as e:  # the binding dlopens libvulkan at import time
        raise DriverUnavailable(DRIVER, f"libvulkan.so.1 not found ({e})") from e
    except ImportError as e:
        raise DriverUnavailable(DRIVER, f"the 'vulkan' Python package is not installed ({e})") from e
    ffi, lib = vk.ffi, vk.lib
    try:
        inst_exts = _names(ffi, lambda n, p: lib.vkEnumerateInstanceExtensionProperties(ffi.NULL, n, p),
                           "VkExtensionProperties[]", "extensionName")
        layers = _names(ffi, lib.vkEnumerateInstanceLayerProperties, "VkLayerProperties[]", "layerName")
        instance = _create_instance(vk, inst_exts)
    except vk.VkError as e:
        status = vk_exception_name(e)
        # The loader answers INCOMPATIBLE_DRIVER when it finds no ICD at all.
        hint = " (no Vulkan driver found: install mesa-vulkan-drivers or the GPU vendor's driver)" \
            if status == "VK_ERROR_INCOMPATIBLE_DRIVER" else ""
        raise DriverUnavailable(DRIVER, f"vkCreateInstance failed: {status}{hint}") from e
    try:
        try:
            physical = vk.vkEnumeratePhysicalDevices(instance)
        except vk.VkError as e:
            raise DriverUnavailable(DRIVER, f"vkEnumeratePhysicalDevices failed: {vk_exception_name(e)}") from e
        return [_probe_device(vk, instance, pd, i, inst_exts, layers) for i, pd in enumerate(physical)]
    finally:
        vk.vkDestroyInstance(instance, None)


def _names(ffi: Any, enumerate_fn: Callable[[Any, Any], int], ctype: str, field: str) -> tuple[str, ...]:
    """Run a two-call Vulkan enumeration and return one string member of each item."""
    count = ffi.new("uint32_t*")
    enumerate_fn(count, ffi.NULL)
    items = ffi.new(ctype, count[0])
    enumerate_fn(count, items)
    return tuple(ffi.string(getattr(items[i], field)).decode() for i in range(count[0]))


def _create_instance(vk: Any, inst_exts: tuple[str, ...]) -> Any:
    exts, flags = [], 0
    # MoltenVK and other portability drivers are only enumerated when asked for.
    if "VK_KHR_portability_enumeration" in inst_exts:
        exts.append("VK_KHR_portability_enumeration")
        flags |= vk.VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
    app = vk.VkApplicationInfo(pApplicationName="halbench-probe", applicationVersion=1,
                               pEngineName="halbench", engineVersion=1,
                               apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    info = vk.VkInstanceCreateInfo(pApplicationInfo=app, flags=flags,
                                   enabledExtensionCount=len(exts), ppEnabledExtensionNames=exts or None)
    return vk.vkCreateInstance(info, None)


class _Struct:
    """An output struct for a pNext chain: the binding's type, or a raw VkBool32 block."""

    def __init__(self, vk: Any, ctype: str, stype: str | int, members: tuple[str, ...] = ()):
        ffi = vk.ffi
        self._ffi, self.members = ffi, members
        st = stype if isinstance(stype, int) else getattr(vk, stype, None)
        try:
            self.owner = ffi.new(f"{ctype}*")
            self.raw = False
        except ffi.error:
            if st is None or not isinstance(stype, int):
                raise LookupError(f"the vulkan binding lacks {ctype}") from None
            # Features structs are a VkBaseOutStructure header then VkBool32 members.
            size = ffi.sizeof("VkBaseOutStructure") + 4 * len(members)
            self.owner = ffi.new("uint64_t[]", (size + 7) // 8)
            self.raw = True
        if st is None:
            raise LookupError(f"the vulkan binding lacks {stype}")
        self.ptr = ffi.cast("VkBaseOutStructure*", self.owner)
        self.ptr.sType = st

    def get(self, member: str) -> Any:
        if not self.raw:
            return getattr(self.owner, member)
        words = self._ffi.cast("uint32_t*", self.owner)
        return words[self._ffi.sizeof("VkBaseOutStructure") // 4 + self.members.index(member)]


def _chain(structs: list[_Struct]) -> None:
    for a, b in itertools.pairwise(structs):
        a.ptr.pNext = b.ptr


def _instance_fn(vk: Any, instance: Any, *names: str) -> Any:
    """The first of ``names`` the instance exports, cast to its PFN type, or None."""
    for name in names:
        fn = vk.lib.vkGetInstanceProcAddr(instance, name.encode())
        if fn != vk.ffi.NULL:
            return vk.ffi.cast(f"PFN_{name}", fn)
    return None


def _try(errors: dict[str, str], key: str, fn: Callable[[], Any], default: Any) -> Any:
    """Run one query; a failure is recorded under ``key`` and the rest of the probe goes on."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - broad on purpose: one failing query must not hide the whole device
        errors[key] = f"{vk_exception_name(e) if type(e).__name__.startswith('Vk') else type(e).__name__}: {e}"
        return default


def _probe_device(vk: Any, instance: Any, pd: Any, ordinal: int, inst_exts: tuple[str, ...],
                  layers: tuple[str, ...]) -> DeviceInfo:
    ffi, lib = vk.ffi, vk.lib
    errors: dict[str, str] = {}
    exts = _names(ffi, lambda n, p: lib.vkEnumerateDeviceExtensionProperties(pd, ffi.NULL, n, p),
                  "VkExtensionProperties[]", "extensionName")
    ext_set = set(exts)
    core = ffi.new("VkPhysicalDeviceProperties*")
    lib.vkGetPhysicalDeviceProperties(pd, core)
    api = version_tuple(decode_api_version(core.apiVersion))[:2]

    def wanted(version: tuple[int, int] | None, ext: str) -> bool:
        return (version is not None and api >= version) or ext in ext_set

    props = _try(errors, "properties2", lambda: _properties(vk, pd, wanted), {})
    flags = _try(errors, "features2", lambda: _features(vk, pd, wanted, errors), {})
    flags = {f: bool(flags.get(f, False)) for f in FEATURE_FLAGS}
    p, lim = core, core.limits

    vendor_id = p.vendorID
    driver_id = props.get("driver_id", "")
    api_version = decode_api_version(p.apiVersion)
    identity = Identity(
        name=ffi.string(p.deviceName).decode(),
        vendor=VENDORS.get(vendor_id, f"0x{vendor_id:04x}"),
        vendor_id=vendor_id, device_id=p.deviceID,
        device_type=DEVICE_TYPES.get(p.deviceType, "other"),
        uuid=props.get("device_uuid"), api="Vulkan", api_version=api_version,
        driver_name=props.get("driver_name", ""),
        driver_version=decode_driver_version(p.driverVersion, vendor_id, driver_id),
        driver_info=props.get("driver_info", ""), driver_uuid=props.get("driver_uuid"),
        conformance_version=props.get("conformance_version"), driver_id=driver_id,
    )
    limits = Limits(
        max_workgroup_size=tuple(lim.maxComputeWorkGroupSize),
        max_workgroup_invocations=lim.maxComputeWorkGroupInvocations,
        max_workgroup_count=tuple(lim.maxComputeWorkGroupCount),
        max_shared_memory_bytes=lim.maxComputeSharedMemorySize,
        max_push_constants_bytes=lim.maxPushConstantsSize,
        max_storage_buffer_range=lim.maxStorageBufferRange,
        min_storage_buffer_offset_alignment=lim.minStorageBufferOffsetAlignment,
        max_bound_descriptor_sets=lim.maxBoundDescriptorSets,
        max_memory_allocation_count=lim.maxMemoryAllocationCount,
        subgroup_size=props.get("subgroup_size"),
        min_subgroup_size=props.get("min_subgroup_size"), max_subgroup_size=props.get("max_subgroup_size"),
    )
    coop = ()
    if flags["cooperativeMatrix"]:
        coop = _try(errors, "cooperative_matrix_properties", lambda: _coop_matrix(vk, instance, pd), ())
    flexible: list[dict[str, Any]] = []
    if flags.get("cooperativeMatrixFlexibleDimensions"):
        flexible = _try(errors, "cooperative_matrix_flexible_dimensions",
                        lambda: _coop_flexible(vk, instance, pd), [])
    features = Features(flags=flags, cooperative_matrix=coop,
                        subgroup_operations=props.get("subgroup_operations", ()),
                        subgroup_stages=props.get("subgroup_stages", ()))
    queues = _try(errors, "queue_families", lambda: _queues(ffi, lib, pd), ())
    memory = _try(errors, "memory_properties", lambda: _memory(ffi, lib, pd), Memory())
    domains: tuple[str, ...] = ()
    if {"VK_KHR_calibrated_timestamps", "VK_EXT_calibrated_timestamps"} & ext_set:
        domains = _try(errors, "calibrateable_time_domains", lambda: _time_domains(vk, instance, pd), ())
    timing = Timing(timestamp_period_ns=float(lim.timestampPeriod), calibrated_time_domains=domains)
    sp = p.sparseProperties
    attributes = {
        "timestamp_compute_and_graphics": bool(lim.timestampComputeAndGraphics),
        "sparse_residency_standard_2d_block_shape": bool(sp.residencyStandard2DBlockShape),
        "sparse_residency_standard_3d_block_shape": bool(sp.residencyStandard3DBlockShape),
        "sparse_residency_aligned_mip_size": bool(sp.residencyAlignedMipSize),
        "sparse_residency_non_resident_strict": bool(sp.residencyNonResidentStrict),
        "cooperative_matrix_supported_stages": props.get("coop_stages", ()),
        "subgroup_size_control_required_stages": props.get("size_control_stages", ()),
        "max_compute_workgroup_subgroups": props.get("max_compute_workgroup_subgroups"),
    }
    if "VK_NV_cooperative_matrix2" in ext_set:
        attributes.update({"cooperative_matrix_flexible_dimensions": flexible,
                           **{k: v for k, v in props.items() if k.startswith("cooperative_matrix_workgroup")}})
    tier = evaluate_tier(api_version, queues, flags)
    return DeviceInfo(
        driver=DRIVER, ordinal=ordinal, identity=identity, limits=limits, features=features,
        memory=memory, queues=queues, timing=timing, extensions=exts, tiers=(tier,),
        opportunities=opportunities(exts, flags, inst_exts, layers), attributes=attributes, errors=errors,
    )


def _properties(vk: Any, pd: Any, wanted: Callable[[tuple[int, int] | None, str], bool]) -> dict[str, Any]:
    ffi = vk.ffi
    head = _Struct(vk, "VkPhysicalDeviceProperties2", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2")
    named: dict[str, _Struct] = {}
    for key, ctype, stype, version, ext in (
        ("driver", "VkPhysicalDeviceDriverProperties", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES",
         (1, 2), "VK_KHR_driver_properties"),
        ("id", "VkPhysicalDeviceIDProperties", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES", (1, 1), ""),
        ("subgroup", "VkPhysicalDeviceSubgroupProperties", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES",
         (1, 1), ""),
        ("size_control", "VkPhysicalDeviceSubgroupSizeControlProperties",
         "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES", (1, 3), "VK_EXT_subgroup_size_control"),
        ("coop", "VkPhysicalDeviceCooperativeMatrixPropertiesKHR",
         "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR", None, "VK_KHR_cooperative_matrix"),
    ):
        if wanted(version, ext):
            named[key] = _Struct(vk, ctype, stype)
    if wanted(None, "VK_NV_cooperative_matrix2"):  # raw: newer than the binding
        named["coop2"] = _Struct(vk, "VkPhysicalDeviceCooperativeMatrix2PropertiesNV", 1000593002,
                                  tuple(_COOP2_PROPERTIES))
    _chain([head, *named.values()])
    vk.lib.vkGetPhysicalDeviceProperties2(pd, vk.ffi.cast("VkPhysicalDeviceProperties2*", head.owner))
    out: dict[str, Any] = {}
    if d := named.get("driver"):
        o = d.owner
        ids = {getattr(vk, n): n[len("VK_DRIVER_ID_"):] for n in dir(vk)
               if n.startswith("VK_DRIVER_ID_") and not n.endswith("_KHR") and "__" not in n}
        cv = o.conformanceVersion
        out.update(driver_id=ids.get(o.driverID, str(o.driverID)), driver_name=ffi.string(o.driverName).decode(),
                   driver_info=ffi.string(o.driverInfo).decode(),
                   conformance_version=f"{cv.major}.{cv.minor}.{cv.subminor}.{cv.patch}")
    if i := named.get("id"):
        out["device_uuid"] = dashed_uuid(bytes(ffi.buffer(i.owner.deviceUUID)))
        out["driver_uuid"] = dashed_uuid(bytes(ffi.buffer(i.owner.driverUUID)))
    if s := named.get("subgroup"):
        o = s.owner
        out.update(subgroup_size=o.subgroupSize, subgroup_operations=bits(o.supportedOperations, SUBGROUP_OPS),
                   subgroup_stages=bits(o.supportedStages, STAGES))
    if c := named.get("size_control"):
        o = c.owner
        out.update(min_subgroup_size=o.minSubgroupSize, max_subgroup_size=o.maxSubgroupSize,
                   max_compute_workgroup_subgroups=o.maxComputeWorkgroupSubgroups,
                   size_control_stages=bits(o.requiredSubgroupSizeStages, STAGES))
    if c := named.get("coop"):
        out["coop_stages"] = bits(c.owner.cooperativeMatrixSupportedStages, STAGES)
    if c := named.get("coop2"):
        out.update({snake: int(c.get(m)) for m, snake in _COOP2_PROPERTIES.items()})
    return out


#: VkPhysicalDeviceCooperativeMatrix2PropertiesNV's uint32 members, in order, and their names here
_COOP2_PROPERTIES = {
    "cooperativeMatrixWorkgroupScopeMaxWorkgroupSize": "cooperative_matrix_workgroup_scope_max_workgroup_size",
    "cooperativeMatrixFlexibleDimensionsMaxDimension": "cooperative_matrix_workgroup_flexible_max_dimension",
    "cooperativeMatrixWorkgroupScopeReservedSharedMemory": "cooperative_matrix_workgroup_scope_reserved_shared_memory",
}


def _features(vk: Any, pd: Any, wanted: Callable[[tuple[int, int] | None, str], bool],
              errors: dict[str, str]) -> dict[str, bool]:
    head = _Struct(vk, "VkPhysicalDeviceFeatures2", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2")
    chained: list[_Struct] = []
    for ctype, stype, version, ext, members in _FEATURE_STRUCTS:
        if not wanted(version, ext):
            continue
        try:
            chained.append(_Struct(vk, ctype, stype, members))
        except LookupError as e:  # binding too old and no raw layout: report false, say why
            errors[f"features.{ext}"] = str(e)
    _chain([head, *chained])
    vk.lib.vkGetPhysicalDeviceFeatures2(pd, vk.ffi.cast("VkPhysicalDeviceFeatures2*", head.owner))
    flags = {m: bool(getattr(head.owner.features, m)) for m in _CORE_FEATURES}
    for s in chained:
        flags.update({m: bool(s.get(m)) for m in s.members})
    return flags


def _coop_matrix(vk: Any, instance: Any, pd: Any) -> tuple[MatrixShape, ...]:
    fn = _instance_fn(vk, instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
    if fn is None:
        raise LookupError("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR not exported")
    ffi = vk.ffi
    count = ffi.new("uint32_t*")
    _check(vk, fn(pd, count, ffi.NULL))
    rows = ffi.new("VkCooperativeMatrixPropertiesKHR[]", count[0])
    for i in range(count[0]):  # output structs need their sType, which the binding's wrapper omits
        rows[i].sType = vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
    _check(vk, fn(pd, count, rows))
    t = lambda v: COMPONENT_TYPES.get(v, str(v))
    return tuple(MatrixShape(r.MSize, r.NSize, r.KSize, t(r.AType), t(r.BType), t(r.CType), t(r.ResultType),
                             SCOPES.get(r.scope, str(r.scope)), bool(r.saturatingAccumulation))
                 for r in (rows[i] for i in range(count[0])))


#: VkCooperativeMatrixFlexibleDimensionsPropertiesNV (newer than the binding): the header, then
#: these uint32 members in order.
_FLEXIBLE_MEMBERS = ("m_granularity", "n_granularity", "k_granularity", "a_type", "b_type", "c_type",
                     "result_type", "saturating", "scope", "workgroup_invocations")


def _coop_flexible(vk: Any, instance: Any, pd: Any) -> list[dict[str, Any]]:
    """VK_NV_cooperative_matrix2's flexible-dimension configurations: the granularity of M, N and K,
    the component types, the scope and (workgroup scope) the invocations a workgroup must have."""
    ffi = vk.ffi
    fn = vk.lib.vkGetInstanceProcAddr(instance, b"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV")
    if fn == ffi.NULL:
        raise LookupError("vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV not exported")
    fn = ffi.cast("VkResult(*)(VkPhysicalDevice, uint32_t*, void*)", fn)
    count = ffi.new("uint32_t*")
    _check(vk, fn(pd, count, ffi.NULL))
    head = ffi.sizeof("VkBaseOutStructure") // 4
    size = head + len(_FLEXIBLE_MEMBERS)
    size += size % 2  # 8-byte aligned array elements
    n = min(int(count[0]), 256)
    count[0] = n
    words = ffi.new("uint32_t[]", max(1, n * size))
    for i in range(n):
        words[i * size] = 1000593001  # VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV
    _check(vk, fn(pd, count, ffi.cast("void*", words)))
    t = lambda v: COMPONENT_TYPES.get(v, str(v))
    rows = []
    for i in range(int(count[0])):
        r = dict(zip(_FLEXIBLE_MEMBERS, (int(words[i * size + head + j]) for j in range(len(_FLEXIBLE_MEMBERS)))))
        for key in ("a_type", "b_type", "c_type", "result_type"):
            r[key] = t(r[key])
        r["scope"] = SCOPES.get(r["scope"], str(r["scope"]))
        r["saturating"] = bool(r["saturating"])
        rows.append(r)
    return rows


def _time_domains(vk: Any, instance: Any, pd: Any) -> tuple[str, ...]:
    fn = _instance_fn(vk, instance, "vkGetPhysicalDeviceCalibrateableTimeDomainsKHR",
                      "vkGetPhysicalDeviceCalibrateableTimeDomainsEXT")
    if fn is None:
        raise LookupError("vkGetPhysicalDeviceCalibrateableTimeDomains{KHR,EXT} not exported")
    ffi = vk.ffi
    count = ffi.new("uint32_t*")
    _check(vk, fn(pd, count, ffi.NULL))
    out = ffi.new("VkTimeDomainKHR[]", count[0])
    _check(vk, fn(pd, count, out))
    return tuple(TIME_DOMAINS.get(out[i], str(out[i])) for i in range(count[0]))


def _check(vk: Any, result: int) -> None:
    vk_check(result, "a Vulkan property query", allow_status=True)


def _queues(ffi: Any, lib: Any, pd: Any) -> tuple[QueueFamily, ...]:
    count = ffi.new("uint32_t*")
    lib.vkGetPhysicalDeviceQueueFamilyProperties(pd, count, ffi.NULL)
    fams = ffi.new("VkQueueFamilyProperties[]", count[0])
    lib.vkGetPhysicalDeviceQueueFamilyProperties(pd, count, fams)
    return tuple(QueueFamily(i, f.queueCount, bits(f.queueFlags, QUEUE_FLAGS), f.timestampValidBits)
                 for i, f in enumerate(fams[j] for j in range(count[0])))


def _memory(ffi: Any, lib: Any, pd: Any) -> Memory:
    mp = ffi.new("VkPhysicalDeviceMemoryProperties*")
    lib.vkGetPhysicalDeviceMemoryProperties(pd, mp)
    heaps = tuple(MemoryHeap(mp.memoryHeaps[i].size, bits(mp.memoryHeaps[i].flags, HEAP_FLAGS))
                  for i in range(mp.memoryHeapCount))
    types = tuple(MemoryType(mp.memoryTypes[i].heapIndex, bits(mp.memoryTypes[i].propertyFlags, TYPE_FLAGS))
                  for i in range(mp.memoryTypeCount))
    local = sum(h.size_bytes for h in heaps if "device-local" in h.flags)
    return Memory(total_bytes=local or sum(h.size_bytes for h in heaps), heaps=heaps, types=types)
