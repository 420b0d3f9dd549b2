"""What a code generator returns for one dispatch: one executable variant per format."""

from __future__ import annotations

from dataclasses import dataclass

from halbench.hal import EntryPoint, ExecutableBinary

__all__ = ["GpuVariant"]


@dataclass(frozen=True)
class GpuVariant:
    """One executable variant of a dispatch: what a bundle ``Variant`` needs, plus the source.
    ``ext`` names the bundle member's file extension (``spv``, ``cubin``, ``wgsl``)."""

    format: str
    target: str
    payload: bytes
    entry: EntryPoint
    workgroups: tuple[int, int, int]
    constants: tuple[int, ...] = ()
    source: str = ""
    ext: str = "bin"
    #: Device features the payload needs (Vulkan feature names: ``cooperativeMatrix``).
    requires: tuple[str, ...] = ()
    #: a scalar f32 GEMM's problem, configuration and its source (kernels.Plan.gemm)
    gemm: dict | None = None
    #: a matrix-unit GEMM's kernel and tiles (kernels.Plan.matrix)
    matrix: dict | None = None

    def binary(self) -> ExecutableBinary:
        return ExecutableBinary(self.format, self.payload, (self.entry,), self.target)
