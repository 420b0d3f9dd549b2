"""Create a cuda HAL device: the shared GPU driver over CUDA's driver API."""

from __future__ import annotations

from typing import Any

from halbench.drivers._gpu.device import GpuDevice
from halbench.drivers._gpu.executable import register_arch_check
from halbench.drivers.cuda.api import CudaApi
from halbench.drivers.cuda.cubin import check_cubin
from halbench.probe.info import DeviceInfo

__all__ = ["CudaDevice", "create_device"]

register_arch_check("cuda-cubin-v1", check_cubin)


class CudaDevice(GpuDevice):
    """A CUDA device on its primary context (shared with any other library in the process)."""


def create_device(driver: Any, info: DeviceInfo) -> CudaDevice:
    return CudaDevice(info, info.uri, CudaApi(), info.ordinal, driver.formats)
