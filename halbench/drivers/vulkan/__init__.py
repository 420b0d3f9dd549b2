"""The vulkan HAL driver. Its GPU binding is imported lazily, inside the functions that need it."""

from __future__ import annotations

from halbench.errors import DriverUnavailable
from halbench.hal import Device, Driver
from halbench.probe.info import DeviceInfo

__all__ = ["VulkanDriver"]


class VulkanDriver(Driver):
    name = "vulkan"
    description = "Vulkan 1.3 compute through the Vulkan loader (SPIR-V, descriptor and BDA ABIs)"

    def query_available_devices(self) -> list[DeviceInfo]:
        try:
            from halbench.probe.vulkan import query_devices
        except ModuleNotFoundError as e:
            if e.name != "halbench.probe.vulkan":
                raise
            # The probe is not installed in this tree: describe the devices from the driver's own view.
            return [_fallback(p) for p in _physical()]
        return query_devices()

    def create_device(self, path: str = "") -> Device:
        from halbench.drivers.vulkan.device import create_device

        return create_device(self, self.select(path))

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


def _physical():
    try:
        from halbench.drivers.vulkan.physical import physical_devices
    except ImportError as e:
        raise DriverUnavailable("vulkan", f"cannot import the Vulkan binding: {e}") from e
    return physical_devices()


def _fallback(p) -> DeviceInfo:
    from halbench.drivers.vulkan.physical import fallback_info

    return fallback_info(p)
