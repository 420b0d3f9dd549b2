"""The CUDA backend: CUDA C -> cubin for the target's arch and PTX (NVRTC)."""

from __future__ import annotations

from typing import Any

from halbench.compiler.backends import BackendOption, CompilerBackend, Unsupported
from halbench.compiler.backends.micro import MICRO_ABI, MicroKernel

_MICRO = frozenset({"copy", "triad", "fma_f32", "fma_f16", "dot_int8", "matrix_f16", "matrix_bf16", "noop"})


def _generate(d: Any, g: Any, target: Any, options: dict[str, str]) -> list[Any]:
    from halbench.compiler.codegen.cuda import generate_cuda

    which = options.get("cuda-formats", "all")
    return generate_cuda(d, g, target, formats=("cubin", "ptx") if which == "all" else (which,))


def _default_target() -> Any:
    from halbench.compiler.targets import by_arch

    return by_arch("sm_60")  # sm_60 PTX is JIT-compiled by the driver for any later GPU


def micro_c(kernel: str, fmt: str, info: Any, kernels: frozenset[str], build) -> MicroKernel:
    """The C micro kernels (codegen/micro_cuda.py), built by ``build(kernel, arch, name)``:
    NVRTC for CUDA, hipRTC with HIP's header for HIP."""
    from halbench.hal import EntryPoint, ExecutableBinary

    if kernel not in kernels:
        raise Unsupported(f"{kernel} has no {fmt} kernel")
    nbind, nconst, wg = MICRO_ABI[kernel]
    matrix = None
    if kernel.startswith("matrix_"):
        wg, matrix = 128, (16, 16, 16, 32)  # WMMA 16x16x16, 4 warps of 32
    arch = info.identity.arch
    if not arch:
        raise Unsupported(f"{info.uri} reports no arch to compile the micro kernels for")
    data = build(kernel, arch, f"micro_{kernel}")
    entry = EntryPoint("micro", nbind, nconst, (wg, 1, 1))
    return MicroKernel(ExecutableBinary(fmt, data, (entry,), arch), wg, matrix)


def _micro(kernel: str, fmt: str, info: Any) -> MicroKernel:
    from halbench.compiler.backends.nvrtc import compile_cuda
    from halbench.compiler.codegen.micro_cuda import cuda_source

    output = "cubin" if fmt == "cuda-cubin-v1" else "ptx"
    return micro_c(kernel, fmt, info, _MICRO, lambda k, arch, name: compile_cuda(
        cuda_source(k), arch=arch, output=output, name=name))


BACKEND = CompilerBackend(
    name="cuda", description="CUDA C -> cubin + PTX through NVRTC (WMMA on tensor cores)",
    drivers=("cuda",), formats=("cuda-cubin-v1", "cuda-ptx-v1"), generate=_generate,
    target_option="cuda-target", target_aliases=("iree-cuda-target", "iree-hal-cuda-llvm-target-arch"),
    default_target=_default_target,
    options=(BackendOption("cuda-formats", ("all", "cubin", "ptx"), "all",
                           "CUDA executable formats: 'all' emits the cubin for the target's arch, then "
                           "PTX for later GPUs; halbench tune times cubins alone."),),
    micro_binary=_micro, micro_kernels=_MICRO,
    variant_targets=lambda target: [("cuda-cubin-v1", target.arch), ("cuda-ptx-v1", target.arch)])
