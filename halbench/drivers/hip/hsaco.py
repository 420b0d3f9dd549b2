"""What an AMD code object was built for, read from its ELF header."""

from __future__ import annotations

import struct

from halbench.arch import gfx_runs_on
from halbench.errors import UserError

__all__ = ["check_hsaco", "hsaco_arch"]

_EM_AMDGPU = 224
# EF_AMDGPU_MACH values (LLVM's AMDGPUUsage) of the archs halbench's targets name.
_MACH = {0x2F: "gfx906", 0x30: "gfx908", 0x3F: "gfx90a", 0x4C: "gfx942", 0x4F: "gfx950",
         0x36: "gfx1030", 0x41: "gfx1100", 0x42: "gfx1101", 0x43: "gfx1102", 0x48: "gfx1200",
         0x4E: "gfx1201"}


def hsaco_arch(data: bytes) -> str | None:
    """``gfx942`` for an AMDGPU ELF of a known arch, else None."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return None
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != _EM_AMDGPU:
        return None
    (flags,) = struct.unpack_from("<I", data, 48)
    return _MACH.get(flags & 0xFF)


def check_hsaco(device, binary) -> None:
    """Code objects run only on the exact gfx arch they were built for."""
    elf = hsaco_arch(binary.data)
    for arch, where in ((binary.target.split(":")[0], "its target"), (elf, "its ELF header")):
        if arch and not gfx_runs_on(arch, device.arch):
            raise UserError(f"code object built for {arch} ({where}) cannot run on {device.uri}, "
                            f"which is {device.arch}")
