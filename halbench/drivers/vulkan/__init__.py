"""The vulkan HAL driver. Its GPU binding is imported lazily, inside the functions that need it."""

from __future__ import annotations

from halbench.errors import DriverUnavailable
from halbench.hal import Driver
from halbench.probe.info import DeviceInfo

__all__ = ["VulkanDriver"]


class VulkanDriver(Driver):
    name = "vulkan"
    description = "Vulkan 1.3 compute through the Vulkan loader (SPIR-V, descriptor and BDA ABIs)"

    formats = ("vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1")
    probe_module = "halbench.probe.vulkan"
    device_module = "halbench.drivers.vulkan.device"

    def _check_target(self, fmt: str, target: str, info: DeviceInfo) -> str | None:
        """The BDA ABI needs bufferDeviceAddress; SPIR-V itself runs on every conformant device."""
        if fmt == "vulkan-spirv-bda-v1" and not info.features.flags.get("bufferDeviceAddress", True):
            return f"{info.uri} has no bufferDeviceAddress"
        return None

    def _default_device(self, devices: list[DeviceInfo]) -> DeviceInfo:
        """The first device that meets the vulkan-1.3 baseline; none: say what each lacks."""
        from halbench.drivers.vulkan.device import _match
        from halbench.drivers.vulkan.physical import baseline_missing, effective_info

        reasons = []
        for d in devices:
            missing = baseline_missing(effective_info(d, _match(d)))
            if not missing:
                return d
            reasons.append(f"{d.uri} ({d.name}) lacks {', '.join(missing)}")
        raise DriverUnavailable(self.name, "no device meets the vulkan-1.3 baseline: " + "; ".join(reasons))

