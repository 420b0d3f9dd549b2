"""The CUDA backend: CUDA C -> cubin for the target's arch and PTX (NVRTC)."""

from __future__ import annotations

from typing import Any

from halbench.compiler.backends import BackendOption, CompilerBackend, Unsupported
from halbench.compiler.backends.micro import MICRO_ABI, MicroKernel

_MICRO = frozenset({"copy", "triad", "fma_f32", "fma_f16", "dot_int8", "matrix_f16", "matrix_bf16", "gemm_f16",
                    "gemm_bf16", "noop"})


def _generate(d: Any, g: Any, target: Any, options: dict[str, str]) -> list[Any]:
    from halbench.compiler.codegen.cuda import generate_cuda

    which = options.get("cuda-formats", "all")
    return generate_cuda(d, g, target, formats=("cubin", "ptx") if which == "all" else (which,))


def _default_target() -> Any:
    from halbench.compiler.targets import by_arch

    return by_arch("sm_60")  # sm_60 PTX is JIT-compiled by the driver for any later GPU


def micro_c(kernel: str, fmt: str, info: Any, kernels: frozenset[str], build,
            options: dict[str, int] | None = None) -> MicroKernel:
    """The C micro kernels (codegen/micro_cuda.py), built by ``build(kernel, arch, name, defines)``:
    NVRTC for CUDA, hipRTC with HIP's header for HIP. ``options`` are the kernel-shaping
    parameters (codegen/micro_cuda.OPTIONS, upper-case names)."""
    from halbench.compiler.codegen.micro_cuda import OPTIONS
    from halbench.hal import EntryPoint, ExecutableBinary

    if kernel not in kernels:
        raise Unsupported(f"{kernel} has no {fmt} kernel")
    opts = {k.upper(): int(v) for k, v in (options or {}).items()}
    if opts.pop("VECTOR", 1) != 1:
        raise Unsupported("fma-f32 vector 4 is the old Vulkan kernel (vec4 chains); the C kernel has scalar chains")
    defines = {**OPTIONS.get(kernel, {}), **opts}
    unknown = sorted(set(defines) - set(OPTIONS.get(kernel, {})) - {"MMA"})
    if unknown:
        raise Unsupported(f"the C {kernel} kernel takes no option {', '.join(unknown).lower()}")
    nbind, nconst, wg = MICRO_ABI[kernel]
    matrix = tile = None
    note = ""
    shared = 0
    if kernel.startswith("matrix_"):
        wg, matrix = 128, (16, 16, 16, 32)  # WMMA 16x16x16, 4 warps of 32
    arch = info.identity.arch
    if not arch:
        raise Unsupported(f"{info.uri} reports no arch to compile the micro kernels for")
    persistent = None
    if kernel.startswith("gemm_"):
        persistent = defines.get("MMA") == 5
        wg, tile, note, arch, shared = _gemm_variant(defines, arch, info)
        sms = getattr(getattr(info, "limits", None), "compute_units", None) or (
            (getattr(info, "attributes", None) or {}).get("multiprocessor_count"))
        persistent = int(sms) if persistent and sms else None
        if persistent:
            note += f"; persistent: {persistent} workgroups stride over the tiles"
    data = build(kernel, arch, f"micro_{kernel}", defines)
    entry = EntryPoint("micro", nbind, nconst, (wg, 1, 1), shared)
    return MicroKernel(ExecutableBinary(fmt, data, (entry,), arch), wg, matrix, note, tile, persistent)


#: what ``mma: 0`` (the default) picks on sm_90: wgmma with no group in flight, checked on an H100
#: (scripts/gpu_peaks.py: 438 TFLOP/s at the default 128x128x32 3-stage tile against mma.sync's 364
#: and 313 with one group in flight, whose 3 stages leave one tile of prefetch).
GEMM_AUTO_SM90 = 2


def shared_memory_limit(info: Any) -> int:
    """Shared memory one workgroup may use on ``info``'s device with the kernel opted in (the
    probe's CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), else without, else 48 KiB."""
    attrs = getattr(info, "attributes", None) or {}
    for key in ("max_shared_memory_per_block_optin_bytes", "max_shared_memory_per_block_bytes"):
        if attrs.get(key):
            return int(attrs[key])
    return int(getattr(getattr(info, "limits", None), "max_shared_memory_bytes", None) or 48 * 1024)


def _gemm_variant(defines: dict[str, int], arch: str, info: Any) -> tuple[int, tuple[int, int, int], str, str, int]:
    """Workgroup size, tile, note, arch and dynamic shared memory bytes of the GEMM that
    ``defines`` ask for (they are updated in place: MMA -> WGMMA and INFLIGHT). mma 1: mma.sync
    (sm_80+); 2: wgmma waiting for each k tile; 3: wgmma keeping one group in flight; 4: the
    warp-specialized wgmma kernel (a cp.async producer warpgroup, two consumer warpgroups,
    mbarriers); 5: the same with one persistent workgroup per SM striding over the tiles (sm_90,
    built for sm_90a). The stages' tiles must fit the device's shared memory per workgroup."""
    from halbench.compiler.codegen.micro_cuda import (
        GEMM_MAX_STAGES,
        GEMM_TILE_K,
        GEMM_TILES,
        WGMMA_TILES,
        WGMMA_WS_TILES,
        gemm_shared_bytes,
    )

    uri = info.uri
    if not arch.startswith("sm_") or int(arch[3:].rstrip("a")) < 80:
        raise Unsupported(f"{uri} ({arch}) has no mma.sync.m16n8k16 (needs sm_80 or newer)")
    sm90 = arch.rstrip("a") == "sm_90"
    mma = defines.pop("MMA", 0) or (GEMM_AUTO_SM90 if sm90 else 1)
    bm, bn, bk, stages = defines["BM"], defines["BN"], defines["BK"], defines["STAGES"]
    if mma not in (1, 2, 3, 4, 5):
        raise Unsupported(f"gemm mma {mma}: use 1 (mma.sync), 2 or 3 (wgmma), 4 or 5 (warp-specialized wgmma)")
    if mma > 1 and not sm90:
        raise Unsupported(f"{uri} ({arch}) has no wgmma (sm_90 only); use mma 1")
    ws = mma >= 4
    inflight = 1 if ws else max(mma - 2, 0)
    tiles = GEMM_TILES if mma == 1 else WGMMA_WS_TILES if ws else WGMMA_TILES
    name = "mma.sync" if mma == 1 else "warp-specialized wgmma" if ws else "wgmma"
    low = 3 if ws else 2 + inflight
    if (bm, bn) not in tiles or bk not in GEMM_TILE_K or not low <= stages <= GEMM_MAX_STAGES:
        raise Unsupported(f"gemm tile {bm}x{bn}x{bk} with {stages} stages: the {name} kernel takes (tile_m, "
                          f"tile_n) in {list(tiles)}, tile_k in {list(GEMM_TILE_K)} and {low} to "
                          f"{GEMM_MAX_STAGES} stages")
    shared = gemm_shared_bytes(bm, bn, bk, stages)
    limit = shared_memory_limit(info)
    # the warp-specialized kernel also keeps its mbarriers in static shared memory (1 KiB with the
    # dynamic tiles' alignment)
    if shared + (1024 if ws else 0) > limit:
        raise Unsupported(f"gemm tile {bm}x{bn}x{bk} with {stages} stages needs {shared // 1024} KiB of shared "
                          f"memory; {uri} has {limit // 1024} KiB per workgroup: use fewer stages or a smaller tile")
    if mma == 1:
        defines.update(WGMMA=0, INFLIGHT=0)
        return (32 * (bm // 64) * (bn // 64), (bm, bn, bk),
                (f"mma.sync m16n8k16 + ldmatrix, {bm}x{bn}x{bk} tiles, {stages}-stage cp.async pipeline "
                 f"({shared // 1024} KiB shared)"), arch, shared)
    if ws:
        defines.update(WGMMA=2, INFLIGHT=1)
        return (384, (bm, bn, bk),
                (f"warp-specialized wgmma m64n{bn}k16: a cp.async producer warpgroup and 2 consumer "
                 f"warpgroups on mbarriers, {bm}x{bn}x{bk} tiles, {stages} stages ({shared // 1024} KiB "
                 f"shared), 1 wgmma group in flight"), "sm_90a", shared)
    defines.update(WGMMA=1, INFLIGHT=inflight)
    return (128 * (bm // 64), (bm, bn, bk),
            (f"wgmma m64n{bn}k16 from swizzled shared memory, {bm}x{bn}x{bk} tiles, {stages}-stage cp.async "
             f"pipeline ({shared // 1024} KiB shared), {inflight} wgmma group(s) in flight"), "sm_90a", shared)


def _micro(kernel: str, fmt: str, info: Any, options: dict[str, int] | None = None) -> MicroKernel:
    from halbench.compiler.backends.nvrtc import compile_cuda
    from halbench.compiler.codegen.micro_cuda import cuda_source

    output = "cubin" if fmt == "cuda-cubin-v1" else "ptx"
    return micro_c(kernel, fmt, info, _MICRO, lambda k, arch, name, defines: compile_cuda(
        cuda_source(k, defines), arch=arch, output=output, name=name), options)


BACKEND = CompilerBackend(
    name="cuda", description="CUDA C -> cubin + PTX through NVRTC (WMMA and mma.sync on tensor cores)",
    drivers=("cuda",), formats=("cuda-cubin-v1", "cuda-ptx-v1"), generate=_generate,
    target_option="cuda-target", target_aliases=("iree-cuda-target", "iree-hal-cuda-llvm-target-arch"),
    default_target=_default_target,
    options=(BackendOption("cuda-formats", ("all", "cubin", "ptx"), "all",
                           "CUDA executable formats: 'all' emits the cubin for the target's arch, then "
                           "PTX for later GPUs; halbench tune times cubins alone."),),
    micro_binary=_micro, micro_kernels=_MICRO,
    variant_targets=lambda target: [("cuda-cubin-v1", target.arch), ("cuda-ptx-v1", target.arch)])
