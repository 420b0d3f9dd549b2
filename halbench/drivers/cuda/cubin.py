"""What a cubin was built for, read from its ELF header (no cuobjdump needed)."""

from __future__ import annotations

import re
import struct

from halbench.errors import UserError

__all__ = ["cubin_arch", "cubin_runs_on", "check_cubin"]

_EM_CUDA = 190
_ELFOSABI_CUDA = 0x41


def cubin_arch(data: bytes) -> str | None:
    """``sm_90`` for a CUDA ELF, or None when ``data`` is not one.

    CUDA ELF ABI version 8 (CUDA 12.8+ tools) keeps the SM number in bits 8..15 of e_flags;
    earlier versions keep it in bits 0..7.
    """
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit ELF only
        return None
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != _EM_CUDA:
        return None
    (flags,) = struct.unpack_from("<I", data, 48)
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    return f"sm_{sm}" if sm else None


def _parse(arch: str) -> tuple[int, int, str]:
    m = re.fullmatch(r"sm_(\d+?)(\d)([af]?)", arch)
    if not m:
        raise UserError(f"'{arch}' is not a CUDA arch like sm_90")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def cubin_runs_on(cubin: str, device: str) -> bool:
    """SASS runs on its own major version at the same or a later minor (sm_80 on sm_86, not on
    sm_90); an arch-specific build (sm_90a) only on exactly that arch."""
    cmaj, cmin, csuf = _parse(cubin)
    dmaj, dmin, _ = _parse(device)
    if csuf == "a":
        return (cmaj, cmin) == (dmaj, dmin)
    return cmaj == dmaj and cmin <= dmin


def check_cubin(device, binary) -> None:
    """Refuse a cubin whose arch (its ``target`` or its ELF header) does not run on ``device``."""
    elf = cubin_arch(binary.data)
    if elf is None:
        raise UserError(f"cuda-cubin-v1 executable is not a CUDA ELF (target '{binary.target or '?'}'); "
                        f"for PTX use the cuda-ptx-v1 format")
    for arch, where in ((binary.target, "its target"), (elf, "its ELF header")):
        if arch and not cubin_runs_on(arch, device.arch):
            raise UserError(f"cubin built for {arch} ({where}) cannot run on {device.uri}, which is "
                            f"{device.arch}; rebuild for {device.arch} or ship PTX")
