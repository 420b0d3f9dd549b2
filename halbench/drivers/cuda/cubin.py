"""What a cubin was built for, read from its ELF header (no cuobjdump needed)."""

from __future__ import annotations

import struct

from halbench.arch import cubin_runs_on
from halbench.errors import UserError

__all__ = ["check_cubin", "cubin_arch"]

_EM_CUDA = 190


def cubin_arch(data: bytes) -> str | None:
    """``sm_90`` for a CUDA ELF, or None when ``data`` is not one.

    CUDA ELF ABI version 8 (CUDA 12.8+ tools) keeps the SM number in bits 8..15 of e_flags;
    earlier versions keep it in bits 0..7. The header does not say ``a``/``f``: the variant's
    target does.
    """
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit ELF only
        return None
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != _EM_CUDA:
        return None
    (flags,) = struct.unpack_from("<I", data, 48)
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    return f"sm_{sm}" if sm else None


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
