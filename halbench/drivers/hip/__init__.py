"""The hip HAL driver. Its GPU binding is imported lazily, inside the functions that need it."""

from __future__ import annotations

from halbench.arch import gfx_runs_on
from halbench.hal import Driver
from halbench.probe.info import DeviceInfo

__all__ = ["HipDriver"]


class HipDriver(Driver):
    name = "hip"
    description = "AMD ROCm HIP through hip-python (code objects, HIP graphs)"
    aliases = ("rocm",)  # IREE's --device=rocm
    formats = ("hip-hsaco-v1",)
    probe_module = "halbench.probe.hip"
    device_module = "halbench.drivers.hip.device"

    def _check_target(self, fmt: str, target: str, info: DeviceInfo) -> str | None:
        """A code object runs only on its own gfx arch (halbench.arch.gfx_runs_on)."""
        arch = info.identity.arch
        if not arch or not target:
            return f"{fmt} needs a gfx arch on both sides (variant '{target}', device '{arch}')"
        return None if gfx_runs_on(target, arch) else f"code object for {target} does not run on {arch}"
