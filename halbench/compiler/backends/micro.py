"""What the micro-benchmark kernels share across backends: their ABI and the result type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MICRO_ABI", "MicroKernel"]

#: kernel -> (bindings, uint32 constants, workgroup size): the micro ABI every backend follows
#: (``matrix_*`` and ``gemm_*`` kernels pick their own workgroup size; see MicroKernel).
MICRO_ABI: dict[str, tuple[int, int, int]] = {
    "copy": (2, 1, 256), "triad": (3, 2, 256), "fma_f32": (1, 1, 256), "fma_f16": (1, 1, 256),
    "dot_int8": (1, 1, 256), "matrix_f16": (2, 1, 0), "matrix_bf16": (2, 1, 0), "noop": (1, 0, 1),
    "gemm_f16": (3, 3, 0), "gemm_bf16": (3, 3, 0),
}


@dataclass(frozen=True)
class MicroKernel:
    """A built micro kernel. ``matrix`` = (m, n, k, subgroup size) of one matrix-unit operation,
    for the ``matrix_*`` kernels."""

    binary: Any  # halbench.hal.ExecutableBinary
    workgroup_size: int
    matrix: tuple[int, int, int, int] | None = None
    #: How the kernel does its work where that varies by device (native or emulated int8 dot).
    note: str = ""
    #: (BM, BN, BK) block tile of the ``gemm_*`` kernels: the host sizes the grid by it and
    #: refuses shapes that are not multiples of it.
    tile: tuple[int, int, int] | None = None
    #: the most workgroups worth launching (a persistent kernel whose workgroups stride over the
    #: tiles: one per SM); None launches one per tile
    max_workgroups: int | None = None
