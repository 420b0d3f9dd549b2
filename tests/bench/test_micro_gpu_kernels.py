"""The GPU micro kernels of the device-peaks suite build here with no GPU: NVRTC compiles every
CUDA variant (copy unrolls, fma chains, the mma.sync GEMM tiles) for sm_80, sm_90 and sm_90a;
glslang compiles the cooperative-matrix GEMM and the fma/copy variants to valid SPIR-V for both
ABIs. The backends describe the H100 the way its probe does (sm_90; NVIDIA's Vulkan driver:
subgroups of 32, 48 KiB of shared memory, f16 16x16x16 cooperative matrices)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from halbench.compiler.backends import Unsupported
from halbench.compiler.backends.cuda import BACKEND as CUDA
from halbench.compiler.backends.vulkan import BACKEND as VULKAN
from halbench.compiler.codegen.micro_cuda import gemm_shared_bytes
from halbench.probe.info import DeviceInfo, Features, Identity, Limits, MatrixShape

#: what the CUDA probe reads as CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
OPTIN = {"sm_80": 166912, "sm_90": 232448, "sm_90a": 232448}


def _cuda_info(arch: str, optin: bool = True) -> DeviceInfo:
    attrs = {"max_shared_memory_per_block_bytes": 49152, "multiprocessor_count": 132}
    if optin and arch in OPTIN:
        attrs["max_shared_memory_per_block_optin_bytes"] = OPTIN[arch]
    return DeviceInfo("cuda", 0, Identity("NVIDIA H100 80GB HBM3", vendor="NVIDIA", api="CUDA", arch=arch),
                      attributes=attrs)


def _vulkan_info(coopmat: bool = True) -> DeviceInfo:
    rows = (MatrixShape(16, 16, 16, "f16", "f16", "f32", "f32"),
            MatrixShape(16, 16, 16, "f16", "f16", "f16", "f16")) if coopmat else ()
    return DeviceInfo("vulkan", 0, Identity("NVIDIA H100 80GB HBM3", vendor="NVIDIA", api="Vulkan"),
                      limits=Limits(max_workgroup_invocations=1024, max_shared_memory_bytes=49152,
                                    subgroup_size=32),
                      features=Features(flags={"cooperativeMatrix": coopmat, "shaderFloat16": True},
                                        cooperative_matrix=rows))


CUDA_VARIANTS = [("copy", {"UNROLL": u}) for u in (1, 2, 4, 8)]
CUDA_VARIANTS += [("fma_f32", {"CHAINS": c, "UNROLL": u}) for c in (16, 32, 64) for u in (1, 4)]
# (BM, BN, BK, STAGES): the tiles that fitted 48 KiB of static shared memory, then the deeper
# pipelines dynamic shared memory allows (up to 160 KiB here: A100's opt-in limit is 163 KiB)
SYNC_TILES = [(128, 128, 32, 3), (128, 256, 32, 2), (256, 128, 32, 2), (64, 128, 32, 4), (128, 64, 32, 4),
              (64, 64, 32, 6), (128, 128, 64, 4), (128, 128, 64, 5), (128, 256, 32, 4), (128, 256, 64, 3)]
CUDA_VARIANTS += [(k, {"BM": bm, "BN": bn, "BK": bk, "STAGES": s, "MMA": 1}) for k in ("gemm_f16", "gemm_bf16")
                  for bm, bn, bk, s in SYNC_TILES]
# wgmma (sm_90a, 227 KiB): (BM, BN, BK, STAGES, MMA)
WGMMA_TILES = [(128, 128, 32, 3, 2), (128, 128, 32, 3, 3), (64, 256, 32, 2, 2), (128, 256, 32, 2, 2),
               (64, 128, 32, 4, 3), (192, 128, 32, 2, 2), (256, 128, 32, 2, 2),
               (128, 256, 64, 3, 2), (128, 256, 64, 4, 3), (128, 128, 64, 4, 3), (128, 128, 64, 5, 3),
               (192, 128, 64, 4, 3), (256, 128, 64, 3, 2)]
WGMMA_VARIANTS = [("gemm_f16", {"BM": bm, "BN": bn, "BK": bk, "STAGES": s, "MMA": mma})
                  for bm, bn, bk, s, mma in WGMMA_TILES]
WGMMA_VARIANTS += [("gemm_bf16", {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "MMA": 3})]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
@pytest.mark.parametrize(("kernel", "options"), CUDA_VARIANTS)
def test_nvrtc_builds_every_cuda_variant(kernel, options, arch) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    mk = CUDA.micro_binary(kernel, "cuda-cubin-v1", _cuda_info(arch), options)
    assert mk.binary.data[:4] == b"\x7fELF"
    entry = mk.binary.entries[0]
    if kernel.startswith("gemm_"):
        bm, bn, bk = options["BM"], options["BN"], options["BK"]
        assert mk.tile == (bm, bn, bk) and mk.workgroup_size == 32 * (bm // 64) * (bn // 64)
        assert "mma.sync" in mk.note
        assert entry.dynamic_shared_bytes == gemm_shared_bytes(bm, bn, bk, options["STAGES"])
    else:
        assert entry.dynamic_shared_bytes == 0


@pytest.mark.parametrize("fmt", ["cuda-cubin-v1", "cuda-ptx-v1"])
@pytest.mark.parametrize(("kernel", "options"), WGMMA_VARIANTS)
def test_nvrtc_builds_the_wgmma_gemm_for_sm90a(kernel, options, fmt) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    mk = CUDA.micro_binary(kernel, fmt, _cuda_info("sm_90"), options)
    assert mk.binary.target == "sm_90a"  # wgmma is arch-specific: the build is for sm_90a
    assert mk.workgroup_size == 128 * (options["BM"] // 64) and "wgmma" in mk.note
    shared = mk.binary.entries[0].dynamic_shared_bytes
    assert shared == gemm_shared_bytes(options["BM"], options["BN"], options["BK"], options["STAGES"])
    assert shared <= OPTIN["sm_90"]
    if fmt == "cuda-ptx-v1":
        text = mk.binary.data.decode()
        assert ".target sm_90a" in text and f"wgmma.mma_async.sync.aligned.m64n{options['BN']}k16" in text


# warp-specialized wgmma (mma 4: one workgroup per tile; 5: one persistent workgroup per SM):
# (BM, BN, BK, STAGES, MMA)
WS_TILES = [(128, 256, 64, 4, 4), (128, 256, 32, 8, 5), (128, 256, 32, 9, 5), (256, 128, 64, 4, 4),
            (256, 128, 32, 9, 5), (128, 128, 64, 6, 4), (128, 128, 32, 3, 5)]


@pytest.mark.parametrize("kernel", ["gemm_f16", "gemm_bf16"])
@pytest.mark.parametrize(("bm", "bn", "bk", "stages", "mma"), WS_TILES)
def test_nvrtc_builds_the_warp_specialized_wgmma_gemm(kernel, bm, bn, bk, stages, mma) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    options = {"BM": bm, "BN": bn, "BK": bk, "STAGES": stages, "MMA": mma}
    mk = CUDA.micro_binary(kernel, "cuda-ptx-v1", _cuda_info("sm_90"), options)
    assert mk.binary.target == "sm_90a" and mk.workgroup_size == 384 and mk.tile == (bm, bn, bk)
    assert "warp-specialized" in mk.note
    shared = mk.binary.entries[0].dynamic_shared_bytes
    assert shared == gemm_shared_bytes(bm, bn, bk, stages) and shared + 1024 <= OPTIN["sm_90"]
    text = mk.binary.data.decode()
    assert ".target sm_90a" in text and f"wgmma.mma_async.sync.aligned.m64n{bn}k16" in text
    # one workgroup barrier (after the mbarriers' init); the pipeline runs on mbarriers alone
    assert "mbarrier.try_wait.parity" in text and text.count("bar.sync") == 1
    assert "cp.async.mbarrier.arrive.noinc" in text
    # mma 5 launches one workgroup per SM (the probe's multiprocessor count), 4 one per tile
    assert mk.max_workgroups == (132 if mma == 5 else None)
    cubin = CUDA.micro_binary(kernel, "cuda-cubin-v1", _cuda_info("sm_90"), options)
    assert cubin.binary.data[:4] == b"\x7fELF"


def test_cuda_gemm_refuses_what_it_cannot_build() -> None:
    with pytest.raises(Unsupported, match=r"warp-specialized wgmma kernel takes \(tile_m, tile_n\) in"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_90"), {"BM": 64, "BN": 256, "MMA": 4})
    with pytest.raises(Unsupported, match="3 to 9 stages"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_90"), {"BN": 256, "STAGES": 2, "MMA": 5})
    with pytest.raises(Unsupported, match="needs 240 KiB"):  # 128x256x64, 5 stages
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_90"), {"BN": 256, "BK": 64, "STAGES": 5, "MMA": 4})
    with pytest.raises(Unsupported, match="sm_90 only"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_80"), {"BN": 256, "MMA": 4})
    with pytest.raises(Unsupported, match="sm_90 only"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_80"), {"MMA": 3})
    # a device that reports no opt-in keeps to 48 KiB per workgroup
    with pytest.raises(Unsupported, match="needs 72 KiB of shared memory; cuda://0 has 48 KiB"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_90", optin=False),
                          {"BM": 128, "BN": 256, "STAGES": 3})
    # 128x256x64, 4 stages (192 KiB) fits the H100's 227 KiB but not the A100's 163 KiB
    deep = {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "MMA": 1}
    with pytest.raises(Unsupported, match="needs 192 KiB of shared memory; cuda://0 has 163 KiB"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_80"), deep)
    with pytest.raises(Unsupported, match="needs 240 KiB.*use fewer stages"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_90"), {**deep, "STAGES": 5})
    with pytest.raises(Unsupported, match="tile_k in"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_90"), {"BK": 16})
    with pytest.raises(Unsupported, match="sm_80 or newer"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_75"), {})


@pytest.mark.parametrize("fmt", ["vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1"])
@pytest.mark.parametrize(("kernel", "options"), [
    ("gemm_f16", {"BM": 128, "BN": 128, "BK": 32}), ("gemm_f16", {"BM": 128, "BN": 256, "BK": 16}),
    ("gemm_f16", {"BM": 64, "BN": 128, "BK": 32}), ("gemm_f16", {"BM": 256, "BN": 128, "BK": 16}),
    ("fma_f32", {"CHAINS": 16, "UNROLL": 8}), ("fma_f32", {"CHAINS": 32, "UNROLL": 1, "VECTOR": 4}),
    ("copy", {"UNROLL": 1}), ("copy", {"UNROLL": 8}),
])
def test_glslang_builds_the_vulkan_variants(kernel, options, fmt) -> None:
    mk = VULKAN.micro_binary(kernel, fmt, _vulkan_info(), options)
    words = mk.binary.data
    assert words[:4] == b"\x03\x02\x23\x07"  # SPIR-V magic (little-endian)
    if kernel == "gemm_f16":
        assert (6022).to_bytes(4, "little") in words  # OpCapability CooperativeMatrixKHR
        assert mk.tile == (options["BM"], options["BN"], options["BK"])
        assert mk.workgroup_size == 32 * (options["BM"] // 64) * (options["BN"] // 64)


def test_vulkan_gemm_says_why_it_is_skipped() -> None:
    with pytest.raises(Unsupported, match="no f16 -> f32 16x16x16 cooperative matrix"):
        VULKAN.micro_binary("gemm_f16", "vulkan-spirv-bda-v1", _vulkan_info(coopmat=False), {})
    with pytest.raises(Unsupported, match="shared"):
        VULKAN.micro_binary("gemm_f16", "vulkan-spirv-bda-v1", _vulkan_info(), {"BM": 128, "BN": 256, "BK": 32})


#: VK_NV_cooperative_matrix2's flexible dimensions as NVIDIA's driver 580 lists them on the H100
#: for f16 x f16 -> f32 at workgroup scope (granularity M, N, K; invocations), and its reserve
H100_FLEXIBLE = [(16, 16, 16, 32), (16, 16, 16, 64), (32, 16, 16, 128), (32, 32, 16, 256)]


def _vulkan_coop2_info(flexible=H100_FLEXIBLE) -> DeviceInfo:
    base = _vulkan_info()
    rows = [{"m_granularity": m, "n_granularity": n, "k_granularity": k, "a_type": "f16", "b_type": "f16",
             "c_type": "f32", "result_type": "f32", "saturating": False, "scope": "workgroup",
             "workgroup_invocations": wg} for m, n, k, wg in flexible]
    flags = {**base.features.flags, "cooperativeMatrixWorkgroupScope": True,
             "cooperativeMatrixFlexibleDimensions": True}
    return DeviceInfo("vulkan", 0, base.identity, limits=base.limits,
                      features=Features(flags=flags, cooperative_matrix=base.features.cooperative_matrix),
                      attributes={"cooperative_matrix_flexible_dimensions": rows,
                                  "cooperative_matrix_workgroup_scope_reserved_shared_memory": 8192})


@pytest.mark.parametrize("fmt", ["vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1"])
@pytest.mark.parametrize(("mma", "bm", "bn", "bk", "wg"), [
    (2, 128, 128, 32, 128), (2, 128, 256, 32, 256), (3, 128, 128, 64, 256), (3, 128, 128, 32, 128),
])
def test_glslang_builds_the_workgroup_scope_gemm(fmt, mma, bm, bn, bk, wg) -> None:
    opts = {"BM": bm, "BN": bn, "BK": bk, "MMA": mma, "WG": wg}
    mk = VULKAN.micro_binary("gemm_f16", fmt, _vulkan_coop2_info(), opts)
    words = mk.binary.data
    assert (6022).to_bytes(4, "little") in words  # OpCapability CooperativeMatrixKHR
    assert mk.tile == (bm, bn, bk) and mk.workgroup_size == wg
    assert "workgroup scope" in mk.note and ("shared memory" in mk.note) == (mma == 3)


def test_workgroup_scope_gemm_says_why_it_is_skipped() -> None:
    with pytest.raises(Unsupported, match="no workgroup-scope cooperative matrix.*VK_NV_cooperative_matrix2"):
        VULKAN.micro_binary("gemm_f16", "vulkan-spirv-bda-v1", _vulkan_info(), {"MMA": 2})
    # 256 invocations need M and N in multiples of 32; 48 of 16 only fits the smaller groups
    with pytest.raises(Unsupported, match="matches no workgroup-scope f16 configuration.*32x32x16 at 256"):
        VULKAN.micro_binary("gemm_f16", "vulkan-spirv-bda-v1", _vulkan_coop2_info(),
                            {"BM": 48, "BN": 48, "BK": 32, "MMA": 2, "WG": 256})
    # staged in shared memory: (256 + 256) rows x 144 bytes = 72 KiB > 48 - 8 KiB
    with pytest.raises(Unsupported, match="73728 bytes of shared memory, 40960 free"):
        VULKAN.micro_binary("gemm_f16", "vulkan-spirv-bda-v1", _vulkan_coop2_info(),
                            {"BM": 256, "BN": 256, "BK": 64, "MMA": 3, "WG": 256})
    with pytest.raises(Unsupported, match="picks its own workgroup size"):
        VULKAN.micro_binary("gemm_f16", "vulkan-spirv-bda-v1", _vulkan_info(), {"MMA": 1, "WG": 128})
    with pytest.raises(Unsupported, match="gemm mma 5"):
        VULKAN.micro_binary("gemm_f16", "vulkan-spirv-bda-v1", _vulkan_coop2_info(), {"MMA": 5})
    # tensor-addressed loads need the feature beside workgroup scope
    with pytest.raises(Unsupported, match="no cooperativeMatrixTensorAddressing.*use mma 2 or 3"):
        VULKAN.micro_binary("gemm_f16", "vulkan-spirv-bda-v1", _vulkan_coop2_info(), {"MMA": 4})


@pytest.mark.parametrize("fmt", ["vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1"])
def test_tensor_addressed_gemm_builds_or_names_the_glslang_it_needs(fmt) -> None:
    """mma 4 (coopMatLoadTensorNV) compiles where the glslang on PATH knows
    GL_NV_cooperative_matrix2 (15 or newer) and declares tensor addressing then; PyPI's 13.1.1
    does not, and the kernel is skipped with the glslang it needs."""
    info = _vulkan_coop2_info()
    info = replace(info, features=replace(info.features, flags={**info.features.flags,
                                                                 "cooperativeMatrixTensorAddressing": True}))
    opts = {"BM": 128, "BN": 128, "BK": 32, "MMA": 4, "WG": 256}
    try:
        mk = VULKAN.micro_binary("gemm_f16", fmt, info, opts)
    except Unsupported as e:
        assert "glslang 15 or newer" in str(e) and "PATH" in str(e)
        return
    words = mk.binary.data
    assert (5439).to_bytes(4, "little") in words  # OpCapability TensorAddressingNV
    assert mk.tile == (128, 128, 32) and mk.workgroup_size == 256 and "coopMatLoadTensorNV" in mk.note
