"""Host <-> device copies for memory the host cannot map, through a staging buffer.

Buffer.write/read are immediate host operations in the HAL: they must not queue behind work
that waits on a semaphore nobody has signalled yet. So staging copies go to a second queue
when the device has one (it waits on the main timeline only at the value already reached, which
makes the finished work's writes visible); on a device with a single queue they go to the
main queue, after everything submitted before (there, a read while gated work is pending
times out after DEFAULT_TIMEOUT_S instead of returning at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halbench.drivers.vulkan._vk import check, ffi, lib, vk
from halbench.drivers.vulkan.command_buffer import VulkanCommandBuffer
from halbench.drivers.vulkan.sync import create_timeline, timeline_value, wait_timeline
from halbench.errors import WaitTimeout
from halbench.hal import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from halbench.drivers.vulkan.device import VulkanDevice
    from halbench.drivers.vulkan.memory import VulkanBuffer

__all__ = ["STAGING_BYTES", "Stager"]

#: Size of the staging buffer; larger transfers go in chunks of this size.
STAGING_BYTES = 16 << 20


class Stager:
    def __init__(self, device: VulkanDevice, queue: Any):
        self.device = device
        self.queue = queue  # None: use the main queue
        self.timeline = create_timeline(device, 0) if queue is not None else None
        self.value = 0
        self.buffer: VulkanBuffer | None = None

    def _staging(self) -> VulkanBuffer:
        from halbench.drivers.vulkan.memory import VulkanBuffer

        if self.buffer is None:
            self.buffer = VulkanBuffer(self.device, STAGING_BYTES, self.device.staging_pool)
        return self.buffer

    def write(self, buf: VulkanBuffer, data: memoryview, offset: int) -> None:
        st = self._staging()
        for start in range(0, data.nbytes, STAGING_BYTES):
            n = min(STAGING_BYTES, data.nbytes - start)
            ffi.memmove(st.block.ptr + st.offset, data[start:start + n], n)
            self._copy(st, buf, 0, offset + start, n)

    def read(self, buf: VulkanBuffer, out: memoryview, offset: int) -> None:
        st = self._staging()
        for start in range(0, out.nbytes, STAGING_BYTES):
            n = min(STAGING_BYTES, out.nbytes - start)
            self._copy(buf, st, offset + start, 0, n)
            ffi.memmove(out[start:start + n], st.block.ptr + st.offset, n)

    def _copy(self, src: VulkanBuffer, dst: VulkanBuffer, src_off: int, dst_off: int, n: int) -> None:
        dev = self.device
        cb = VulkanCommandBuffer(dev, profile=False)
        cb._copy(src, dst, src_off, dst_off, n)
        cb.ended = True
        cb._end()
        dev._command_buffers.add(cb)  # if the wait below fails, close() frees it once the device is idle
        if self.queue is None:
            dev._submit(cb, (), ()).wait(DEFAULT_TIMEOUT_S)
        else:
            self._submit_side(cb)
        cb.release()

    def _submit_side(self, cb: VulkanCommandBuffer) -> None:
        dev = self.device
        stage = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
        st = vk.VK_STRUCTURE_TYPE_SEMAPHORE_SUBMIT_INFO
        with dev._lock:
            self.value += 1
            done = timeline_value(dev, dev.timeline)
            wait = ffi.new("VkSemaphoreSubmitInfo*", {"sType": st, "semaphore": dev.timeline, "value": done,
                                                      "stageMask": stage})
            signal = ffi.new("VkSemaphoreSubmitInfo*", {"sType": st, "semaphore": self.timeline,
                                                        "value": self.value, "stageMask": stage})
            info = ffi.new("VkSubmitInfo2*", {
                "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO_2, "waitSemaphoreInfoCount": 1,
                "pWaitSemaphoreInfos": wait, "commandBufferInfoCount": 1, "pCommandBufferInfos": cb.submit_info,
                "signalSemaphoreInfoCount": 1, "pSignalSemaphoreInfos": signal})
            r = dev.fn.vkQueueSubmit2(self.queue, 1, info, ffi.NULL)
            if r:
                self.value -= 1
                check(r, "vkQueueSubmit2 (staging queue)", dev)
            # The next main-queue submission waits for this copy: its result is then visible there.
            dev.pending_wait = (self.timeline, self.value)
        if not wait_timeline(dev, self.timeline, self.value, DEFAULT_TIMEOUT_S):
            raise WaitTimeout(f"{dev.uri}: a staging copy did not finish within {DEFAULT_TIMEOUT_S} s")

    def destroy(self) -> None:
        if self.buffer is not None:
            self.buffer._free()
            self.buffer = None
        if self.timeline is not None:
            lib.vkDestroySemaphore(self.device.handle, self.timeline, ffi.NULL)
            self.timeline = None
