"""The webgpu HAL driver: WebGPU through wgpu-py (wgpu-native), running WGSL executables.

It is the first API added as one plug-in unit: this folder is its driver half,
``halbench/compiler/backends/webgpu.py`` with ``compiler/codegen/wgsl.py`` its compiler half.
wgpu is imported lazily, so listing drivers loads no GPU binding. The executable ABI is in
``docs/webgpu.md``.
"""

from __future__ import annotations

from halbench.hal import Driver

__all__ = ["FORMAT", "WebGpuDriver"]

FORMAT = "webgpu-wgsl-v1"


class WebGpuDriver(Driver):
    name = "webgpu"
    description = "WebGPU through wgpu-py / wgpu-native (WGSL; Vulkan, Metal or D3D12 underneath)"
    formats = (FORMAT,)
    probe_module = "halbench.probe.webgpu"
    device_module = "halbench.drivers.webgpu.device"
