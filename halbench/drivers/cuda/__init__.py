"""The cuda HAL driver. Its GPU binding is imported lazily, inside the functions that need it.

The device (``device.py``) is the shared GPU driver of ``halbench/drivers/_gpu`` over CUDA's
driver API (``api.py``): primary context, cuMemAlloc with pinned staging, cubin/PTX modules,
command buffers as CUDA graphs, semaphores as stream wait/write-value words.
"""

from __future__ import annotations

from halbench.hal import Device, Driver
from halbench.probe.info import DeviceInfo

__all__ = ["CudaDriver"]


class CudaDriver(Driver):
    name = "cuda"
    description = "NVIDIA CUDA through cuda-python's driver API (cubin / PTX, CUDA graphs)"

    def query_available_devices(self) -> list[DeviceInfo]:
        try:
            from halbench.probe.cuda import query_devices
        except ModuleNotFoundError as e:
            if e.name != "halbench.probe.cuda":
                raise
            from halbench.drivers.cuda.query import query_devices  # until the probe lands
        return query_devices()

    def create_device(self, path: str = "") -> Device:
        from halbench.drivers.cuda.device import create_device

        return create_device(self, self.select(path))
