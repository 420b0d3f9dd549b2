"""The cuda HAL driver. Its GPU binding is imported lazily, inside the functions that need it.

The device (``device.py``) is the shared GPU driver of ``halbench/drivers/_gpu`` over CUDA's
driver API (``api.py``): primary context, cuMemAlloc with pinned staging, cubin/PTX modules,
command buffers as CUDA graphs, semaphores as stream wait/write-value words.
"""

from __future__ import annotations

from halbench.arch import cubin_runs_on, is_sm, ptx_runs_on
from halbench.hal import Driver
from halbench.probe.info import DeviceInfo

__all__ = ["CudaDriver"]


class CudaDriver(Driver):
    name = "cuda"
    description = "NVIDIA CUDA through cuda-python's driver API (cubin / PTX, CUDA graphs)"
    formats = ("cuda-cubin-v1", "cuda-ptx-v1")
    probe_module = "halbench.probe.cuda"
    device_module = "halbench.drivers.cuda.device"

    def _check_target(self, fmt: str, target: str, info: DeviceInfo) -> str | None:
        """A cubin runs on its own arch family (halbench.arch.cubin_runs_on), PTX on any arch
        at least as new (ptx_runs_on)."""
        arch = info.identity.arch
        if not arch or not is_sm(arch):
            return f"{info.uri} reports no CUDA arch"
        if not target or not is_sm(target):
            return f"{fmt} variant names no CUDA arch ('{target}')"
        runs = cubin_runs_on if fmt == "cuda-cubin-v1" else ptx_runs_on
        return None if runs(target, arch) else f"{fmt} for {target} does not run on {arch}"
