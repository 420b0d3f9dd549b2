"""The Vulkan logical device: creation from a probed DeviceInfo, memory pools, submit.

Options (keyword arguments of :func:`create_device`, defaults from the environment) exist so
that CI on lavapipe can walk every path a GPU might take:

- ``push_descriptors`` (HALBENCH_VULKAN_PUSH_DESCRIPTORS=0 turns it off): use
  vkCmdPushDescriptorSetKHR when the device has VK_KHR_push_descriptor, else descriptor sets.
- ``direct_host_access`` (HALBENCH_VULKAN_STAGING=1 turns it off): map host-visible
  device-local memory and copy into it directly, else go through a staging buffer.
- ``calibrate`` (HALBENCH_VULKAN_CALIBRATE=0 turns it off): use calibrated timestamps.
- ``pipeline_statistics`` (HALBENCH_VULKAN_PIPELINE_STATISTICS=1 turns it on; off by default):
  where the device has VK_KHR_pipeline_executable_properties, pipelines are created with their
  statistics captured, which ``Executable.resources`` reads (registers, shared memory, spills).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from halbench.drivers.vulkan import _vk
from halbench.drivers.vulkan._vk import BUFFER_USAGE_SHADER_DEVICE_ADDRESS, check, device_fn, ffi, lib, vk
from halbench.drivers.vulkan.command_buffer import VulkanCommandBuffer
from halbench.drivers.vulkan.executable import BDA, DESCRIPTORS, PipelineCache, VulkanExecutable
from halbench.drivers.vulkan.memory import DL, HC, HCACHED, HV, MemoryPool, VulkanBuffer
from halbench.drivers.vulkan.physical import (
    NV_COOP2_ENABLED,
    OPTIONAL_EXTENSIONS,
    OPTIONAL_FEATURES,
    Physical,
    baseline_missing,
    effective_info,
    nv_coop2_struct,
    physical_devices,
)
from halbench.drivers.vulkan.sync import (
    VulkanSemaphore,
    VulkanSubmission,
    create_timeline,
    timeline_value,
    wait_timeline,
)
from halbench.drivers.vulkan.timing import Clock
from halbench.drivers.vulkan.transfer import Stager
from halbench.errors import DriverError, DriverUnavailable, OutOfDeviceMemory, UserError
from halbench.hal import DEFAULT_TIMEOUT_S, Device, ExecutableBinary, Semaphore

if TYPE_CHECKING:
    from halbench.hal import Driver
    from halbench.probe.info import DeviceInfo

__all__ = ["VulkanDevice", "create_device", "pick_queue_family"]

_FNS = ("vkQueueSubmit2", "vkWaitSemaphores", "vkGetSemaphoreCounterValue", "vkSignalSemaphore",
        "vkCmdBindPipeline", "vkCmdPushConstants", "vkCmdDispatch", "vkCmdPipelineBarrier2", "vkCmdCopyBuffer",
        "vkCmdFillBuffer", "vkCmdWriteTimestamp2", "vkCmdResetQueryPool", "vkCmdBindDescriptorSets",
        "vkGetQueryPoolResults")


def _env_flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    return default if v is None or v == "" else v not in ("0", "false", "no", "off")


def pick_queue_family(families: list[tuple[int, int, int]]) -> int | None:
    """A compute family, compute-only first (no graphics work competes), with timestamps first."""
    compute = [i for i, (flags, count, _) in enumerate(families) if flags & vk.VK_QUEUE_COMPUTE_BIT and count]
    if not compute:
        return None
    return min(compute, key=lambda i: (bool(families[i][0] & vk.VK_QUEUE_GRAPHICS_BIT), families[i][2] == 0, i))


def _match(info: DeviceInfo) -> Physical:
    from halbench.uri import normalize_uuid

    devices = physical_devices()
    want = normalize_uuid(info.identity.uuid) if info.identity.uuid else None
    for p in devices:
        if want and p.uuid.hex() == want:
            return p
    if 0 <= info.ordinal < len(devices):
        return devices[info.ordinal]
    raise DriverUnavailable("vulkan", f"no Vulkan physical device matches {info.uri} ({info.name})")


def create_device(driver: Driver, info: DeviceInfo, **options: Any) -> VulkanDevice:
    """Create the logical device for ``info``; a device below the vulkan-1.3 baseline is refused."""
    p = _match(info)
    eff = effective_info(info, p)
    missing = baseline_missing(eff)
    if missing:
        raise UserError(f"{info.uri} ({info.name}) is below halbench's vulkan-1.3 baseline: it lacks "
                        f"{', '.join(missing)}")
    opts = {"push_descriptors": _env_flag("HALBENCH_VULKAN_PUSH_DESCRIPTORS", True),
            "direct_host_access": not _env_flag("HALBENCH_VULKAN_STAGING", False),
            "calibrate": _env_flag("HALBENCH_VULKAN_CALIBRATE", True),
            "pipeline_statistics": _env_flag("HALBENCH_VULKAN_PIPELINE_STATISTICS", False)}
    opts.update(options)
    return VulkanDevice(eff, p, opts)


#: How long a host wait polls the timeline before it blocks in vkWaitSemaphores.
_SPIN_NS = 200_000

class VulkanDevice(Device):
    transfer_alignment = 4  # vkCmdFillBuffer needs 4-byte offsets and sizes

    def __init__(self, info: DeviceInfo, physical: Physical, options: dict[str, Any]):
        super().__init__(info, info.uri)
        self.physical, self.options = physical, options
        self.handle: Any = None
        self._closing = False
        self.stats = {"pipelines": 0, "pipeline_cache_hits": 0}
        self._command_buffers: set[VulkanCommandBuffer] = set()
        self._executables: list[VulkanExecutable] = []
        self._semaphores: list[VulkanSemaphore] = []
        self._create(info, physical, options)
        # what the device has but this logical device left out (an extension newer than the
        # validation layer, or the user's mask) reads as absent, so variant selection and the
        # micro kernels refuse it by name instead of failing in vkCreateComputePipelines
        off = {n for n in ("cooperativeMatrix", *NV_COOP2_ENABLED)
               if info.features.flags.get(n) and n not in self.enabled_features}
        if off:
            self.info = replace(info, features=replace(info.features, flags={
                **info.features.flags, **dict.fromkeys(off, False)}))

    # -- creation ---------------------------------------------------------------------
    def _create(self, info: DeviceInfo, p: Physical, options: dict[str, Any]) -> None:
        family = pick_queue_family(p.queue_families)
        assert family is not None  # the baseline check saw a compute queue
        self.queue_family = family
        wanted = info.features.flags
        enabled = {n: p.flags.get(n, False) and wanted.get(n, True) for names in OPTIONAL_FEATURES.values()
                   for n in names}
        exts = [e for e in OPTIONAL_EXTENSIONS if e in p.extensions]
        self.unvalidated_extensions = _vk.unvalidated_extensions(exts)
        exts = [e for e in exts if e not in self.unvalidated_extensions]
        if "VK_KHR_calibrated_timestamps" in exts and "VK_EXT_calibrated_timestamps" in exts:
            exts.remove("VK_EXT_calibrated_timestamps")
        if not options["push_descriptors"] and "VK_KHR_push_descriptor" in exts:
            exts.remove("VK_KHR_push_descriptor")
        if "VK_KHR_cooperative_matrix" not in exts:
            enabled["cooperativeMatrix"] = False
        nv2 = {n: bool(enabled["cooperativeMatrix"] and p.flags.get(n) and wanted.get(n, True))
               for n in NV_COOP2_ENABLED}
        if "VK_NV_cooperative_matrix2" in exts and not any(nv2.values()):
            exts.remove("VK_NV_cooperative_matrix2")
        if "VK_NV_cooperative_matrix2" in exts:
            enabled.update(nv2)
        self.pipeline_statistics = bool(options.get("pipeline_statistics")) and \
            "VK_KHR_pipeline_executable_properties" in p.extensions
        if self.pipeline_statistics:
            exts.append("VK_KHR_pipeline_executable_properties")
        self.extensions = frozenset(exts)
        self.enabled_features = {n for n, on in enabled.items() if on}
        self.bda = "bufferDeviceAddress" in self.enabled_features
        self.push_descriptors = "VK_KHR_push_descriptor" in self.extensions

        structs = []
        for name, names in OPTIONAL_FEATURES.items():
            if name in ("VkPhysicalDeviceFeatures",) or (name.endswith("KHR") and not enabled["cooperativeMatrix"]):
                continue
            s = getattr(vk, name)(**{n: 1 for n in names if enabled[n]}) if any(enabled[n] for n in names) \
                else getattr(vk, name)()
            structs.append(s)
        if self.pipeline_statistics:
            structs.append(vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR(pipelineExecutableInfo=1))
        chain = ffi.NULL
        for s in structs:
            s.pNext = chain
            chain = ffi.addressof(s)
        if "VK_NV_cooperative_matrix2" in exts:
            self._nv_coop2 = nv_coop2_struct(nv2, chain)  # raw: the binding predates it
            chain = ffi.cast("void*", self._nv_coop2)
        core = vk.VkPhysicalDeviceFeatures(**{n: 1 for n in OPTIONAL_FEATURES["VkPhysicalDeviceFeatures"]
                                              if enabled[n]})
        f2 = vk.VkPhysicalDeviceFeatures2(pNext=chain, features=core)
        # A second queue of the family, where there is one, carries staging copies (transfer.py).
        self.queue_count = min(2, p.queue_families[family][1])
        prio = ffi.new("float[]", [1.0, 0.5][:self.queue_count])
        qinfo = ffi.new("VkDeviceQueueCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                                     "queueFamilyIndex": family, "queueCount": self.queue_count,
                                                     "pQueuePriorities": prio})
        ext_names = [ffi.new("char[]", e.encode()) for e in exts]
        ext_arr = ffi.new("char*[]", ext_names)
        dinfo = ffi.new("VkDeviceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "pNext": ffi.addressof(f2),
            "queueCreateInfoCount": 1, "pQueueCreateInfos": qinfo,
            "enabledExtensionCount": len(exts), "ppEnabledExtensionNames": ext_arr})
        out = ffi.new("VkDevice*")
        check(lib.vkCreateDevice(p.handle, dinfo, ffi.NULL, out), f"vkCreateDevice for {self.uri}", self)
        self.handle = h = out[0]
        _vk.live_devices += 1
        try:
            self._setup(h, p)
        except BaseException:
            self.close()
            raise

    def _setup(self, h: Any, p: Physical) -> None:
        q = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(h, self.queue_family, 0, q)
        self.queue = q[0]
        self.fn = SimpleNamespace(**{n: device_fn(h, n) for n in _FNS})
        if self.push_descriptors:
            self.fn.vkCmdPushDescriptorSetKHR = device_fn(h, "vkCmdPushDescriptorSetKHR")
        lim = p.limits
        self.binding_alignment = max(4, int(lim.minStorageBufferOffsetAlignment))
        self.max_workgroup_count = tuple(int(v) for v in lim.maxComputeWorkGroupCount)
        self.formats = (BDA, DESCRIPTORS) if self.bda else (DESCRIPTORS,)

        pinfo = ffi.new("VkCommandPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                                     "queueFamilyIndex": self.queue_family})
        out = ffi.new("VkCommandPool*")
        check(lib.vkCreateCommandPool(h, pinfo, ffi.NULL, out), "vkCreateCommandPool", self)
        self.command_pool = out[0]
        self.timeline = create_timeline(self, 0)
        self.submitted = self.completed = 0
        self.full_barrier = self._dependency(vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT,
                                             vk.VK_ACCESS_2_MEMORY_WRITE_BIT,
                                             vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT,
                                             vk.VK_ACCESS_2_MEMORY_READ_BIT | vk.VK_ACCESS_2_MEMORY_WRITE_BIT)
        # Between dispatches only: compute-to-compute on storage buffers, which lets the driver
        # skip the stages and caches a copy would need (HALBENCH_VULKAN_NARROW_BARRIERS=0: full).
        self.compute_barrier = (self._dependency(vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT,
                                                 vk.VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT,
                                                 vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT,
                                                 vk.VK_ACCESS_2_SHADER_STORAGE_READ_BIT
                                                 | vk.VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT)
                                if _env_flag("HALBENCH_VULKAN_NARROW_BARRIERS", True) else self.full_barrier)
        self.host_barrier = self._dependency(vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT,
                                             vk.VK_ACCESS_2_MEMORY_WRITE_BIT,
                                             vk.VK_PIPELINE_STAGE_2_HOST_BIT, vk.VK_ACCESS_2_HOST_READ_BIT)
        # The common submit (no user semaphores) reuses one set of structs: only values change.
        self._signal_info = ffi.new("VkSemaphoreSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_SUBMIT_INFO, "semaphore": self.timeline,
            "stageMask": vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT})
        self._submit_info = ffi.new("VkSubmitInfo2*", {
            "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO_2, "commandBufferInfoCount": 1,
            "signalSemaphoreInfoCount": 1, "pSignalSemaphoreInfos": self._signal_info})

        main_heap = self._main_heap(p)
        storage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                   | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        sda = BUFFER_USAGE_SHADER_DEVICE_ADDRESS if self.bda else 0
        direct = bool(self.options["direct_host_access"])
        prefs = [(DL | HV | HC | HCACHED, main_heap), (DL | HV | HC, main_heap)] if direct else []
        self.device_pool = MemoryPool(self, "device", storage | sda,
                                      prefs + [(DL, main_heap), (DL, -1), (0, -1)], mapped=direct)
        self.table_pool = MemoryPool(self, "binding-table", vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | sda,
                                     [(DL | HV | HC, -1), (HV | HC, -1)], mapped=True, block_size=4 << 20)
        self.staging_pool = MemoryPool(self, "staging", vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                                       | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                       [(HV | HC | HCACHED, -1), (HV | HC, -1)], mapped=True)
        self.pipeline_cache = PipelineCache(self)
        side = None
        if self.queue_count > 1:
            lib.vkGetDeviceQueue(h, self.queue_family, 1, q)
            side = q[0]
        self.stager = Stager(self, side)
        self.pending_wait: tuple[Any, int] | None = None
        bits = p.queue_families[self.queue_family][2]
        self.clock = Clock(self, bits) if bits else None

    def _main_heap(self, p: Physical) -> int:
        mem = p.memory
        heaps = [i for i in range(mem.memoryHeapCount) if mem.memoryHeaps[i].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT]
        return max(heaps or [0], key=lambda i: mem.memoryHeaps[i].size)

    def _dependency(self, src_stage: int, src_access: int, dst_stage: int, dst_access: int) -> Any:
        mb = ffi.new("VkMemoryBarrier2*", {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER_2,
                                           "srcStageMask": src_stage, "srcAccessMask": src_access,
                                           "dstStageMask": dst_stage, "dstAccessMask": dst_access})
        dep = ffi.new("VkDependencyInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DEPENDENCY_INFO,
                                            "memoryBarrierCount": 1, "pMemoryBarriers": mb})
        self._keep_barriers = getattr(self, "_keep_barriers", []) + [mb]
        return dep

    def check_allocation_size(self, nbytes: int) -> None:
        """Refuse what can never fit with OutOfDeviceMemory, before the driver is asked."""
        mem = self.physical.memory
        heap = max(mem.memoryHeaps[i].size for i in range(mem.memoryHeapCount))
        limit = min(heap, self.physical.max_allocation_size)
        if nbytes > limit:
            raise OutOfDeviceMemory("vulkan", "VK_ERROR_OUT_OF_DEVICE_MEMORY",
                                    f"allocating {nbytes / 2**30:.1f} GiB on {self.uri}: more than the largest "
                                    f"heap or maxMemoryAllocationSize ({limit / 2**30:.1f} GiB)")

    # -- HAL hooks ----------------------------------------------------------------------
    def _allocate(self, nbytes: int, usage: str) -> VulkanBuffer:
        return VulkanBuffer(self, nbytes, self.device_pool)

    def _load_executable(self, binary: ExecutableBinary) -> VulkanExecutable:
        exe = VulkanExecutable(self, binary)
        self._executables.append(exe)
        return exe

    def _command_buffer(self, profile: bool) -> VulkanCommandBuffer:
        if profile and self.clock is None:
            raise UserError(f"{self.uri}'s compute queue has no timestamps (timestampValidBits = 0)")
        cb = VulkanCommandBuffer(self, profile)
        self._command_buffers.add(cb)
        return cb

    def _semaphore(self, initial: int) -> Semaphore:
        s = VulkanSemaphore(self, initial)
        self._semaphores.append(s)
        return s

    def _submit(self, cb: VulkanCommandBuffer, wait: tuple, signal: tuple) -> VulkanSubmission:  # type: ignore[override]
        if cb.profile and cb.last_submission is not None and cb.last_submission._profile is None:
            # One query pool per command buffer: finish and read the previous run before reusing it.
            prev = cb.last_submission
            prev.wait(DEFAULT_TIMEOUT_S)
            prev.profile()
        sub = VulkanSubmission(self, cb)  # stamps host_submit_ns before the queue sees it
        with self._lock:
            self.submitted += 1
            sub.value = v = self.submitted
            if self.pending_wait is not None:
                wait = wait + ((SimpleNamespace(handle=self.pending_wait[0]), self.pending_wait[1]),)
                self.pending_wait = None
            if not wait and not signal:
                self._signal_info.value = v
                self._submit_info.pCommandBufferInfos = cb.submit_info
                r = self.fn.vkQueueSubmit2(self.queue, 1, self._submit_info, ffi.NULL)
            else:
                r = self._submit_with(cb, v, wait, signal)
            if r:
                self.submitted -= 1
                check(r, "vkQueueSubmit2", self)
        if cb.profile:
            cb.last_submission = sub
        return sub

    def _submit_with(self, cb: VulkanCommandBuffer, v: int, wait: tuple, signal: tuple) -> int:
        stage = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
        sem_type = vk.VK_STRUCTURE_TYPE_SEMAPHORE_SUBMIT_INFO
        waits = ffi.new("VkSemaphoreSubmitInfo[]", [
            {"sType": sem_type, "semaphore": s.handle, "value": val, "stageMask": stage} for s, val in wait])
        signals = ffi.new("VkSemaphoreSubmitInfo[]", [
            {"sType": sem_type, "semaphore": s.handle, "value": val, "stageMask": stage} for s, val in signal]
            + [{"sType": sem_type, "semaphore": self.timeline, "value": v, "stageMask": stage}])
        info = ffi.new("VkSubmitInfo2*", {
            "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO_2, "waitSemaphoreInfoCount": len(wait),
            "pWaitSemaphoreInfos": waits, "commandBufferInfoCount": 1, "pCommandBufferInfos": cb.submit_info,
            "signalSemaphoreInfoCount": len(signal) + 1, "pSignalSemaphoreInfos": signals})
        return self.fn.vkQueueSubmit2(self.queue, 1, info, ffi.NULL)

    # -- host synchronization ---------------------------------------------------------------
    def completed_value(self) -> int:
        self.completed = max(self.completed, timeline_value(self, self.timeline))
        return self.completed

    def wait_value(self, value: int, timeout_s: float) -> bool:
        # Short work finishes within microseconds, but a blocking vkWaitSemaphores costs tens of
        # them to wake up (seen on an H100: ~45 us for an empty submission against 6.5 us on
        # CUDA, which polls). Poll the counter briefly first, then block for the rest.
        spin_end = time.perf_counter_ns() + min(_SPIN_NS, int(timeout_s * 1e9))
        while time.perf_counter_ns() < spin_end:
            if self.completed_value() >= value:
                return True
        if not wait_timeline(self, self.timeline, value, timeout_s):
            return False
        self.completed = max(self.completed, value)
        return True

    # -- teardown -----------------------------------------------------------------------
    def close(self) -> None:
        # Wait (bounded) for the device before the base class frees buffers that a submission
        # still running (one that timed out) may use: freeing them under it crashes lavapipe.
        self._idle = self._wait_idle()
        if not self._idle:
            # Destroying objects the device still uses is undefined: leak them instead.
            for b in list(self._buffers):
                b._released = True
            self._buffers.clear()
        super().close()

    def _wait_idle(self) -> bool:
        if self.closed or self.handle is None or self.lost or getattr(self, "timeline", None) is None:
            return True
        try:
            return self.wait_value(self.submitted, 10.0)
        except DriverError:  # a device lost now still gets its objects destroyed
            return True

    def _close(self) -> None:
        if self.handle is None:
            return
        if not getattr(self, "_idle", True):
            return  # still busy: leak (see close)
        for cb in list(self._command_buffers):
            cb.release()
        for exe in self._executables:
            if not exe._released:
                exe._released = True
                exe._free()
        for s in self._semaphores:
            s.destroy()
        if hasattr(self, "stager"):
            self.stager.destroy()
        for pool in ("device_pool", "table_pool", "staging_pool"):
            if hasattr(self, pool):
                getattr(self, pool).destroy()
        h = self.handle
        if hasattr(self, "pipeline_cache"):
            self.pipeline_cache.destroy()
        if getattr(self, "timeline", None) is not None:
            lib.vkDestroySemaphore(h, self.timeline, ffi.NULL)
        if hasattr(self, "command_pool"):
            lib.vkDestroyCommandPool(h, self.command_pool, ffi.NULL)
        lib.vkDestroyDevice(h, ffi.NULL)
        self.handle = None
        _vk.live_devices -= 1
