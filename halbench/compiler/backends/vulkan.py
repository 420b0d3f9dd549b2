"""The Vulkan backend: GLSL -> SPIR-V (glslang) with the BDA and descriptor ABIs."""

from __future__ import annotations

from typing import Any

from halbench.compiler.backends import BackendOption, CompilerBackend, Unsupported
from halbench.compiler.backends.micro import MICRO_ABI, MicroKernel
from halbench.tools import SPIRV_VERSION

_ABI_FORMATS = {"bda": "vulkan-spirv-bda-v1", "descriptors": "vulkan-spirv-descriptors-v1"}
_MICRO = frozenset({"copy", "triad", "fma_f32", "fma_f16", "dot_int8", "matrix_f16", "noop"})


def _generate(d: Any, g: Any, target: Any, options: dict[str, str]) -> list[Any]:
    from halbench.compiler.codegen.glsl import generate_vulkan

    return generate_vulkan(d, g, target, options["vulkan-dispatch-abi"])


def _default_target() -> Any:
    from halbench.compiler.targets import GENERIC_VULKAN

    return GENERIC_VULKAN


def _micro(kernel: str, fmt: str, info: Any) -> MicroKernel:
    from halbench.compiler.backends.glslang import compile_glsl
    from halbench.compiler.codegen.micro_glsl import glsl_source
    from halbench.hal import EntryPoint, ExecutableBinary

    flags = info.features.flags
    if kernel not in _MICRO:
        raise Unsupported(f"{kernel} has no Vulkan kernel here (bf16 cooperative matrix is measured "
                          f"through CUDA)")
    if kernel == "fma_f16" and not flags.get("shaderFloat16"):
        raise Unsupported(f"{info.uri} has no shaderFloat16")
    nbind, nconst, wg = MICRO_ABI[kernel]
    defines: dict[str, int] = {}
    matrix = None
    if kernel == "dot_int8":
        # OpSDot where the device has integer dot products, else the emulation (micro_glsl._DOT4).
        defines = {"DOT_NATIVE": int(bool(flags.get("shaderIntegerDotProduct")))}
    if kernel == "matrix_f16":
        row = next((r for r in info.features.cooperative_matrix
                    if r.a_type in ("f16", "float16") and r.c_type in ("f32", "float32")
                    and r.scope == "subgroup"), None)
        if row is None or not flags.get("cooperativeMatrix"):
            raise Unsupported(f"{info.uri} has no f16 -> f32 cooperative matrix")
        sub = info.limits.subgroup_size or 32
        wg = sub * 4
        defines = {"MM": row.m, "NN": row.n, "KK": row.k, "WG": wg}
        matrix = (row.m, row.n, row.k, sub)
    abi = "bda" if fmt == "vulkan-spirv-bda-v1" else "descriptors"
    spirv = compile_glsl(glsl_source(kernel, abi, defines), defines, name=f"micro_{kernel}_{abi}")
    entry = EntryPoint("main", nbind, nconst, (wg, 1, 1))
    note = ""
    if kernel == "dot_int8":
        note = ("int8 dot products through OpSDot (SPV_KHR_integer_dot_product)" if defines["DOT_NATIVE"]
                else f"int8 dot products emulated (unpack and multiply): {info.name} has no "
                     f"shaderIntegerDotProduct")
    return MicroKernel(ExecutableBinary(fmt, spirv, (entry,), f"spirv{SPIRV_VERSION}"), wg, matrix, note)


def _variant_targets(target: Any) -> list[tuple[str, str]]:
    return [(f, f"spirv{SPIRV_VERSION}") for f in _ABI_FORMATS.values()]


BACKEND = CompilerBackend(
    name="vulkan", description=f"GLSL -> SPIR-V {SPIRV_VERSION} through glslang; BDA and descriptor ABIs",
    aliases=("vulkan-spirv",), target_aliases=("iree-vulkan-target",),
    drivers=("vulkan",), formats=tuple(_ABI_FORMATS.values()), generate=_generate,
    target_option="vulkan-target", default_target=_default_target,
    options=(BackendOption("vulkan-dispatch-abi", ("all", "bda", "descriptors"), "all",
                           "Vulkan executable ABI(s); 'all' emits BDA first, descriptors second.",
                           aliases=("iree-vulkan-dispatch-abi",)),),
    micro_binary=_micro, micro_kernels=_MICRO, variant_targets=_variant_targets)
