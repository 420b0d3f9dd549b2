"""The HIP backend: the CUDA-C kernels with a HIP header -> code object (hipRTC)."""

from __future__ import annotations

from typing import Any

from halbench.compiler.backends import CompilerBackend
from halbench.compiler.backends.cuda import micro_c
from halbench.compiler.backends.micro import MicroKernel

# No WMMA on HIP (rocWMMA is not used): the matrix micro kernels are CUDA-only.
_MICRO = frozenset({"copy", "triad", "fma_f32", "fma_f16", "dot_int8", "noop"})


def _generate(d: Any, g: Any, target: Any, options: dict[str, str]) -> list[Any]:
    from halbench.compiler.codegen.hip import generate_hip

    return generate_hip(d, g, target)


def _default_target() -> Any:
    """gfx908 (CDNA1, MI100), the default of IREE's ROCm guide: code objects are built for one
    arch, and there is no portable one."""
    from halbench.compiler.targets import by_arch

    return by_arch("gfx908")


def _micro(kernel: str, fmt: str, info: Any, options: dict[str, int] | None = None) -> MicroKernel:
    from halbench.compiler.backends.nvrtc import compile_hip
    from halbench.compiler.codegen.hip import HIP_HEADER
    from halbench.compiler.codegen.micro_cuda import hip_source

    return micro_c(kernel, fmt, info, _MICRO, lambda k, arch, name, defines: compile_hip(
        hip_source(k, HIP_HEADER, defines), arch=arch, name=name), options)


BACKEND = CompilerBackend(
    name="hip", description="HIP C -> AMD code object through hipRTC (source-tested only here)",
    drivers=("hip",), formats=("hip-hsaco-v1",), generate=_generate,
    aliases=("rocm",), target_option="hip-target",
    target_aliases=("rocm-target", "iree-rocm-target", "iree-rocm-target-chip", "iree-hip-target"),
    default_target=_default_target,
    micro_binary=_micro, micro_kernels=_MICRO,
    variant_targets=lambda target: [("hip-hsaco-v1", target.arch)])
