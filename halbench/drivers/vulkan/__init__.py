"""The vulkan HAL driver. Its GPU binding is imported lazily, inside the functions that need it."""

from __future__ import annotations

from halbench.hal import Device, Driver
from halbench.probe.info import DeviceInfo

__all__ = ["VulkanDriver"]


class VulkanDriver(Driver):
    name = "vulkan"

    def query_available_devices(self) -> list[DeviceInfo]:
        from halbench.probe.vulkan import query_devices

        return query_devices()

    def create_device(self, path: str = "") -> Device:
        from halbench.drivers.vulkan.device import create_device

        return create_device(self, self.select(path))
