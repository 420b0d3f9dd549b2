"""Create a hip HAL device: the shared GPU driver over HIP. UNTESTED on hardware (no AMD GPU
where halbench is developed); the unavailable path is tested."""

from __future__ import annotations

from typing import Any

from halbench.drivers._gpu.device import GpuDevice
from halbench.drivers._gpu.executable import register_arch_check
from halbench.drivers.hip.api import HipApi
from halbench.drivers.hip.hsaco import check_hsaco
from halbench.probe.info import DeviceInfo

__all__ = ["HipDevice", "create_device"]

register_arch_check("hip-hsaco-v1", check_hsaco)


class HipDevice(GpuDevice):
    """A HIP device (hipSetDevice per calling thread)."""


def create_device(driver: Any, info: DeviceInfo) -> HipDevice:
    return HipDevice(info, info.uri, HipApi(), info.ordinal, driver.formats)
