"""The hip HAL driver. Its GPU binding is imported lazily, inside the functions that need it."""

from __future__ import annotations

from halbench.hal import Device, Driver
from halbench.probe.info import DeviceInfo

__all__ = ["HipDriver"]


class HipDriver(Driver):
    name = "hip"
    description = "AMD ROCm HIP through hip-python (code objects, HIP graphs)"

    def query_available_devices(self) -> list[DeviceInfo]:
        try:
            from halbench.probe.hip import query_devices
        except ModuleNotFoundError as e:
            if e.name != "halbench.probe.hip":
                raise
            from halbench.drivers.hip.query import query_devices  # until the probe lands
        return query_devices()

    def create_device(self, path: str = "") -> Device:
        from halbench.drivers.hip.device import create_device

        return create_device(self, self.select(path))
