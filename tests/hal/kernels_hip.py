"""The five contract kernels in HIP C, compiled by hipRTC at test time. UNTESTED: no AMD GPU
and no libhiprtc.so where halbench is developed (the hip backend then skips as unavailable).

HIP's clang, unlike NVRTC, honours an asm label, so each kernel is declared with the symbol
name ``main`` directly; the bodies are the CUDA ones (tests/hal/kernels_cuda.py).
"""

from __future__ import annotations

import os
import re

from halbench.hal import ExecutableBinary
from tests.hal.kernels_cuda import ENTRIES, SOURCES

__all__ = ["build", "hip_source"]


def hip_source(kernel: str) -> str:
    body = SOURCES[kernel].replace('extern "C" ', "")
    decl = re.match(r"(__global__ void (?:__launch_bounds__\(\d+\) )?)hb_main(\([^)]*\))", body, re.S)
    assert decl, kernel
    prototype = f'extern "C" {decl.group(1)}hb_main{decl.group(2)} __asm__("main");\n'
    return "#include <hip/hip_runtime.h>\n" + prototype + 'extern "C" ' + body


def build(kernel: str, fmt: str, arch: str | None = None) -> ExecutableBinary:
    from halbench.compiler.backends.nvrtc import compile_hip

    arch = arch or os.environ.get("HALBENCH_HIP_ARCH") or _device_arch()
    data = compile_hip(hip_source(kernel), arch=arch, name=f"hal_{kernel}")
    return ExecutableBinary(fmt, data, (ENTRIES[kernel],), arch)


def _device_arch() -> str:
    try:
        from halbench.drivers import get_driver

        devices = get_driver("hip").query_available_devices()
        if devices and devices[0].identity.arch:
            return devices[0].identity.arch
    except Exception:
        pass
    return "gfx942"
