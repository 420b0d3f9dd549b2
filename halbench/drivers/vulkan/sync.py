"""Timeline semaphores and submissions. Every host wait is vkWaitSemaphores with a timeout."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halbench.drivers.vulkan._vk import check, ffi, lib, vk
from halbench.hal import Profile, Semaphore, Submission

if TYPE_CHECKING:
    from halbench.drivers.vulkan.command_buffer import VulkanCommandBuffer
    from halbench.drivers.vulkan.device import VulkanDevice

__all__ = ["VulkanSemaphore", "VulkanSubmission", "create_timeline", "timeline_value", "wait_timeline"]

_VK_TIMEOUT = 2


def create_timeline(device: VulkanDevice, initial: int) -> Any:
    ti = ffi.new("VkSemaphoreTypeCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                                "semaphoreType": vk.VK_SEMAPHORE_TYPE_TIMELINE,
                                                "initialValue": initial})
    info = ffi.new("VkSemaphoreCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, "pNext": ti})
    out = ffi.new("VkSemaphore*")
    check(lib.vkCreateSemaphore(device.handle, info, ffi.NULL, out), "vkCreateSemaphore", device)
    return out[0]


def wait_timeline(device: VulkanDevice, sem: Any, value: int, timeout_s: float) -> bool:
    """True once ``sem`` reached ``value``; False after ``timeout_s``."""
    sems = ffi.new("VkSemaphore*", sem)
    vals = ffi.new("uint64_t*", value)
    info = ffi.new("VkSemaphoreWaitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                                            "semaphoreCount": 1, "pSemaphores": sems, "pValues": vals})
    r = device.fn.vkWaitSemaphores(device.handle, info, min(int(timeout_s * 1e9), (1 << 63) - 1))
    if r == _VK_TIMEOUT:
        return False
    check(r, "vkWaitSemaphores", device)
    return True


def timeline_value(device: VulkanDevice, sem: Any) -> int:
    out = ffi.new("uint64_t*")
    check(device.fn.vkGetSemaphoreCounterValue(device.handle, sem, out), "vkGetSemaphoreCounterValue", device)
    return int(out[0])


class VulkanSemaphore(Semaphore):
    def __init__(self, device: VulkanDevice, initial: int):
        super().__init__(device)
        self.handle = create_timeline(device, initial)

    def _value(self) -> int:
        return timeline_value(self.device, self.handle)

    def _signal(self, value: int) -> None:
        info = ffi.new("VkSemaphoreSignalInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO,
                                                  "semaphore": self.handle, "value": value})
        check(self.device.fn.vkSignalSemaphore(self.device.handle, info), "vkSignalSemaphore", self.device)

    def _wait(self, value: int, timeout_s: float) -> bool:
        return wait_timeline(self.device, self.handle, value, timeout_s)

    def destroy(self) -> None:
        if self.handle is not None:
            lib.vkDestroySemaphore(self.device.handle, self.handle, ffi.NULL)
            self.handle = None


class VulkanSubmission(Submission):
    """One queue submission; done when the device's internal timeline reaches ``value``."""

    command_buffer: VulkanCommandBuffer
    device: VulkanDevice

    def __init__(self, device: VulkanDevice, command_buffer: VulkanCommandBuffer):
        super().__init__(device, command_buffer)
        self.value = 0

    def _wait(self, timeout_s: float) -> bool:
        dev = self.device
        return dev.completed >= self.value or dev.wait_value(self.value, timeout_s)

    def _query_done(self) -> bool:
        return self.device.completed_value() >= self.value

    def _read_profile(self) -> Profile:
        cb = self.command_buffer
        if cb.last_submission is not self:
            from halbench.errors import UserError

            raise UserError("a later submission of this command buffer overwrote its timestamps; "
                            "read the profile before resubmitting")
        clock = self.device.clock
        if not cb.dispatch_times:
            return clock.profile(cb.read_ticks(), (), self.host_submit_ns, self.host_done_ns, "total")
        return clock.profile(cb.read_ticks(), cb.dispatch_entries, self.host_submit_ns, self.host_done_ns)
