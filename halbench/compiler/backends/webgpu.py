"""The WebGPU backend: the shared kernel plans rendered as WGSL (codegen/wgsl.py)."""

from __future__ import annotations

from typing import Any

from halbench.compiler.backends import CompilerBackend, Unsupported
from halbench.compiler.backends.micro import MICRO_ABI, MicroKernel

_MICRO = frozenset({"copy", "triad", "fma_f32", "fma_f16", "noop"})


def _generate(d: Any, g: Any, target: Any, options: dict[str, str]) -> list[Any]:
    from halbench.compiler.codegen.wgsl import generate_webgpu

    return generate_webgpu(d, g, target)


def _targets() -> tuple[Any, ...]:
    from halbench.compiler.targets import KIB, Target

    return (Target(
        name="webgpu-generic", kind="generic", vendor="generic", apis=("webgpu",), arch="wgsl",
        description="Any WebGPU adapter: the limits WebGPU guarantees (256 invocations, 16 KiB of "
                    "workgroup storage), no subgroup size assumed, f32 only",
        subgroup_sizes=(), max_workgroup_size=(256, 256, 64), max_workgroup_invocations=256,
        shared_memory_bytes=16 * KIB, fp16=False, aliases=("webgpu", "wgsl")),)


def _micro(kernel: str, fmt: str, info: Any, options: dict[str, int] | None = None) -> MicroKernel:
    from halbench.compiler.codegen.micro_wgsl import wgsl_source
    from halbench.hal import EntryPoint, ExecutableBinary

    if kernel not in _MICRO:
        raise Unsupported(f"{kernel} has no WGSL kernel (WGSL has no matrix units or integer dot products)")
    if kernel == "fma_f16" and not info.features.flags.get("shaderFloat16"):
        raise Unsupported(f"{info.uri} has no shader-f16")
    opts = {k.upper(): int(v) for k, v in (options or {}).items()}
    if kernel == "fma_f32" and (opts.get("CHAINS", 32), opts.get("VECTOR", 1)) not in ((32, 1), (32, 4)):
        raise Unsupported("the WGSL fma-f32 kernel has 32 chains (8 vec4) only")
    nbind, nconst, wg = MICRO_ABI[kernel]
    entry = EntryPoint("main", nbind, nconst, (wg, 1, 1))
    return MicroKernel(ExecutableBinary(fmt, wgsl_source(kernel).encode(), (entry,), "wgsl"), wg)


BACKEND = CompilerBackend(
    name="webgpu", description="WGSL for WebGPU (wgpu): the shared kernel plans, translated from the C subset",
    drivers=("webgpu",), formats=("webgpu-wgsl-v1",), generate=_generate,
    target_option="webgpu-target", default_target=lambda: _targets()[0], extra_targets=_targets,
    micro_binary=_micro, micro_kernels=_MICRO,
    variant_targets=lambda target: [("webgpu-wgsl-v1", target.arch)])
