"""The local backend: NumPy kernels (``local-v1``) for the local-sync and local-task drivers."""

from __future__ import annotations

from typing import Any

from halbench.compiler.backends import CompilerBackend, Unsupported
from halbench.compiler.backends.micro import MICRO_ABI, MicroKernel

_MICRO = frozenset({"copy", "triad", "fma_f32", "gemm_f16", "gemm_bf16", "noop"})


def _generate(d: Any, g: Any, target: Any, options: dict[str, str]) -> list[Any]:
    from halbench.compiler.codegen.local import local_variant

    return [local_variant(d, g)]


def _micro(kernel: str, fmt: str, info: Any, options: dict[str, int] | None = None) -> MicroKernel:
    """NumPy kernels: the fma chain count is honoured (it sets the work); loop unrolling, copy
    unrolling and GEMM tiles shape GPU code only and do not apply."""
    from halbench.hal import EntryPoint
    from halbench.kernels import load_builtin, local_binary

    if kernel not in _MICRO:
        raise Unsupported(f"{kernel} has no local implementation")
    opts = {k.upper(): int(v) for k, v in (options or {}).items()}
    if opts.get("VECTOR", 1) != 1:
        raise Unsupported("fma-f32 vector 4 is the old Vulkan kernel; the local one has scalar chains")
    load_builtin()
    nbind, nconst, wg = MICRO_ABI[kernel]
    attrs: dict[str, int] = {}
    tile = None
    if kernel == "fma_f32":
        attrs = {"chains": opts.get("CHAINS", 32)}
    if kernel.startswith("gemm_"):
        wg, tile = 1, (64, 64, 16)  # one NumPy matmul; shapes kept to the GPU kernels' granularity
    entry = EntryPoint("micro", nbind, nconst, (wg, 1, 1))
    return MicroKernel(local_binary({"micro": (f"micro.{kernel}", attrs, entry)}), wg, tile=tile)


BACKEND = CompilerBackend(
    name="local", description="NumPy kernels on the host (the correctness oracle)", aliases=("llvm-cpu",),
    drivers=("local-sync", "local-task"), formats=("local-v1",), generate=_generate,
    micro_binary=_micro, micro_kernels=_MICRO,
    variant_targets=lambda target: [("local-v1", "host")])
