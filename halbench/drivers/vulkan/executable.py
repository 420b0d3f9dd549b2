"""Executables: SPIR-V -> one compute pipeline per entry point, through a persisted pipeline cache.

Pipeline layouts follow the two ABIs of DESIGN.md:

- ``vulkan-spirv-descriptors-v1``: set 0 holds ``bindings`` storage buffers (a push-descriptor
  set layout when the device pushes descriptors); push constants are the uint32 constants.
- ``vulkan-spirv-bda-v1``: no descriptor sets; push constants are the 64-bit address of the
  binding table followed by the uint32 constants at byte offset 8.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halbench import tools
from halbench.drivers.vulkan import _vk
from halbench.drivers.vulkan._vk import check, ffi, lib, vk
from halbench.errors import DriverError, UserError
from halbench.files import atomic_write
from halbench.hal import EntryPoint, Executable, ExecutableBinary

if TYPE_CHECKING:
    from halbench.drivers.vulkan.device import VulkanDevice

__all__ = ["BDA", "DESCRIPTORS", "Pipeline", "PipelineCache", "VulkanExecutable"]

BDA = "vulkan-spirv-bda-v1"
DESCRIPTORS = "vulkan-spirv-descriptors-v1"
_COMPUTE = vk.VK_SHADER_STAGE_COMPUTE_BIT


@dataclass
class Pipeline:
    entry: EntryPoint
    handle: Any
    layout: Any
    set_layout: Any  # None for the BDA ABI
    push_size: int  # bytes of push constants the layout declares
    cache_hit: bool


def cache_dir() -> Path:
    return tools.cache_dir() / "vulkan"


class PipelineCache:
    """A VkPipelineCache loaded from and saved (atomically) to the user's cache directory.

    The file name carries the device's pipelineCacheUUID and driver version, so a driver update
    starts a fresh cache instead of feeding the new driver old data.
    """

    def __init__(self, device: VulkanDevice):
        p = device.physical
        self.device = device
        self.path = cache_dir() / (f"{p.vendor_id:04x}-{p.device_id:04x}-{p.pipeline_cache_uuid.hex()}"
                                   f"-{p.driver_version:x}.bin")
        try:
            data = self.path.read_bytes()
        except OSError:
            data = b""
        self.loaded_bytes = len(data)
        self.dirty = False
        init = ffi.from_buffer(data) if data else ffi.NULL
        info = ffi.new("VkPipelineCacheCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
            "initialDataSize": len(data), "pInitialData": init})
        out = ffi.new("VkPipelineCache*")
        check(lib.vkCreatePipelineCache(device.handle, info, ffi.NULL, out), "vkCreatePipelineCache", device)
        self.handle = out[0]

    def save(self) -> None:
        if not self.dirty:
            return
        h = self.device.handle
        size = ffi.new("size_t*")
        check(lib.vkGetPipelineCacheData(h, self.handle, size, ffi.NULL), "vkGetPipelineCacheData", self.device)
        buf = ffi.new("char[]", size[0])
        check(lib.vkGetPipelineCacheData(h, self.handle, size, buf), "vkGetPipelineCacheData", self.device)
        try:
            # Write then rename: a crash or a second process never leaves a torn cache file.
            atomic_write(self.path, bytes(ffi.buffer(buf, size[0])), "pipeline cache")
            self.dirty = False
        except (OSError, UserError):
            pass  # a read-only home directory only costs compile time

    def destroy(self) -> None:
        try:
            self.save()
        finally:
            lib.vkDestroyPipelineCache(self.device.handle, self.handle, ffi.NULL)


class VulkanExecutable(Executable):
    def __init__(self, device: VulkanDevice, binary: ExecutableBinary):
        super().__init__(device, binary)
        if len(binary.data) % 4 or binary.data[:4] != b"\x03\x02\x23\x07":
            raise UserError(f"executable data is not SPIR-V (bad magic or size {len(binary.data)} B)")
        # A bundle is untrusted: a driver handed invalid SPIR-V may crash the process, so every
        # module passes spirv-val first (once per module and process).
        tools.validate_spirv(binary.data, name=f"executable {binary.entries[0].name} ({binary.target or 'SPIR-V'})")
        self.bda = binary.format == BDA
        self.key = hashlib.sha256(binary.data).hexdigest()[:16]
        self.module = None
        self.pipelines: dict[str, Pipeline] = {}
        h = device.handle
        code = ffi.from_buffer(binary.data)
        info = ffi.new("VkShaderModuleCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(binary.data),
            "pCode": ffi.cast("uint32_t*", code)})
        out = ffi.new("VkShaderModule*")
        check(lib.vkCreateShaderModule(h, info, ffi.NULL, out), "vkCreateShaderModule", device)
        self.module = out[0]
        try:
            for ep in binary.entries:
                self.pipelines[ep.name] = self._pipeline(ep)
        except BaseException:
            self._free()
            raise

    def _pipeline(self, ep: EntryPoint) -> Pipeline:
        dev = self.device
        h = dev.handle
        max_push = dev.physical.limits.maxPushConstantsSize
        push_size = 4 * ep.constants + (8 if self.bda else 0)
        if push_size > max_push:
            raise UserError(f"entry '{ep.name}' needs {push_size} B of push constants; {dev.uri} has {max_push}")
        set_layout = None
        if not self.bda:
            bindings = ffi.new("VkDescriptorSetLayoutBinding[]", [
                {"binding": i, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
                 "stageFlags": _COMPUTE} for i in range(ep.bindings)])
            sl_info = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                "flags": vk.VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR if dev.push_descriptors else 0,
                "bindingCount": ep.bindings, "pBindings": bindings})
            out = ffi.new("VkDescriptorSetLayout*")
            check(lib.vkCreateDescriptorSetLayout(h, sl_info, ffi.NULL, out), "vkCreateDescriptorSetLayout", dev)
            set_layout = out[0]
        rng = ffi.new("VkPushConstantRange*", {"stageFlags": _COMPUTE, "offset": 0, "size": push_size})
        sets = ffi.new("VkDescriptorSetLayout[]", [set_layout] if set_layout is not None else [])
        pl_info = ffi.new("VkPipelineLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
            "setLayoutCount": 1 if set_layout is not None else 0, "pSetLayouts": sets,
            "pushConstantRangeCount": 1 if push_size else 0, "pPushConstantRanges": rng})
        out = ffi.new("VkPipelineLayout*")
        check(lib.vkCreatePipelineLayout(h, pl_info, ffi.NULL, out), "vkCreatePipelineLayout", dev)
        layout = out[0]
        # Creation feedback tells whether the pipeline cache served this pipeline.
        fb = ffi.new("VkPipelineCreationFeedback*")
        fb_info = ffi.new("VkPipelineCreationFeedbackCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO, "pPipelineCreationFeedback": fb})
        name = ffi.new("char[]", ep.name.encode())
        cp_info = ffi.new("VkComputePipelineCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, "pNext": fb_info,
            "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, "stage": _COMPUTE,
                      "module": self.module, "pName": name},
            "layout": layout,
            "flags": vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR if dev.pipeline_statistics else 0})
        out = ffi.new("VkPipeline*")
        try:
            code = lib.vkCreateComputePipelines(h, dev.pipeline_cache.handle, 1, cp_info, ffi.NULL, out)
            if code == vk.VK_ERROR_UNKNOWN:
                # NVIDIA's driver answers so for a valid kernel it cannot fit (seen on the H100 for
                # workgroup-scope cooperative matrices of large tiles): say what to do instead
                raise DriverError("vulkan", "VK_ERROR_UNKNOWN",
                                  f"the driver of {dev.uri} could not build entry '{ep.name}' (vkCreateComputePipelines; "
                                  f"the SPIR-V passed validation): it may need more shared memory, registers or "
                                  f"matrix resources than one workgroup gets there; use a smaller tile or another "
                                  f"variant")
            check(code, f"vkCreateComputePipelines for entry '{ep.name}'", dev)
        except BaseException:
            lib.vkDestroyPipelineLayout(h, layout, ffi.NULL)
            if set_layout is not None:
                lib.vkDestroyDescriptorSetLayout(h, set_layout, ffi.NULL)
            raise
        dev.pipeline_cache.dirty = True
        hit = bool(fb.flags & vk.VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT)
        dev.stats["pipelines"] += 1
        dev.stats["pipeline_cache_hits"] += hit
        return Pipeline(ep, out[0], layout, set_layout, push_size, hit)

    def resources(self, name: str) -> dict[str, int | float | str]:
        """The driver's statistics of the entry's pipeline (VK_KHR_pipeline_executable_properties:
        NVIDIA reports registers, shared memory, spills...), keyed by the driver's own names in
        snake case. Needs a device opened with ``pipeline_statistics`` on."""
        self.entry(name)
        dev = self.device
        if not dev.pipeline_statistics:
            return {}
        get_props = _vk.device_fn(dev.handle, "vkGetPipelineExecutablePropertiesKHR")
        get_stats = _vk.device_fn(dev.handle, "vkGetPipelineExecutableStatisticsKHR")
        pinfo = ffi.new("VkPipelineInfoKHR*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR,
                                               "pipeline": self.pipelines[name].handle})
        n = ffi.new("uint32_t*")
        check(get_props(dev.handle, pinfo, n, ffi.NULL), "vkGetPipelineExecutablePropertiesKHR", dev)
        out: dict[str, int | float | str] = {}
        for i in range(min(int(n[0]), 8)):
            einfo = ffi.new("VkPipelineExecutableInfoKHR*", {
                "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                "pipeline": self.pipelines[name].handle, "executableIndex": i})
            m = ffi.new("uint32_t*")
            check(get_stats(dev.handle, einfo, m, ffi.NULL), "vkGetPipelineExecutableStatisticsKHR", dev)
            count = min(int(m[0]), 256)
            if not count:
                continue
            stats = ffi.new("VkPipelineExecutableStatisticKHR[]", count)
            for j in range(count):
                stats[j].sType = vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR
            m[0] = count
            check(get_stats(dev.handle, einfo, m, stats), "vkGetPipelineExecutableStatisticsKHR", dev)
            for j in range(int(m[0])):
                st = stats[j]
                key = re.sub(r"[^a-z0-9]+", "_", ffi.string(st.name).decode(errors="replace").lower()).strip("_")
                fmt = st.format
                if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
                    val: int | float = int(st.value.b32)
                elif fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
                    val = int(st.value.i64)
                elif fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
                    val = int(st.value.u64)
                else:
                    val = float(st.value.f64)
                if key:
                    out[key if i == 0 else f"{key}_{i}"] = val
        return out

    def _free(self) -> None:
        h = self.device.handle
        for p in self.pipelines.values():
            lib.vkDestroyPipeline(h, p.handle, ffi.NULL)
            lib.vkDestroyPipelineLayout(h, p.layout, ffi.NULL)
            if p.set_layout is not None:
                lib.vkDestroyDescriptorSetLayout(h, p.set_layout, ffi.NULL)
        self.pipelines.clear()
        if self.module is not None:
            lib.vkDestroyShaderModule(h, self.module, ffi.NULL)
            self.module = None
