"""The cuda HAL driver. Its GPU binding is imported lazily, inside the functions that need it."""

from __future__ import annotations

from halbench.hal import Device, Driver
from halbench.probe.info import DeviceInfo

__all__ = ["CudaDriver"]


class CudaDriver(Driver):
    name = "cuda"

    def query_available_devices(self) -> list[DeviceInfo]:
        from halbench.probe.cuda import query_devices

        return query_devices()

    def create_device(self, path: str = "") -> Device:
        from halbench.drivers.cuda.device import create_device

        return create_device(self, self.select(path))
