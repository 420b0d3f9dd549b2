"""The GPU micro kernels of the device-peaks suite build here with no GPU: NVRTC compiles every
CUDA variant (copy unrolls, fma chains, the mma.sync GEMM tiles) for sm_80, sm_90 and sm_90a;
glslang compiles the cooperative-matrix GEMM and the fma/copy variants to valid SPIR-V for both
ABIs. The backends describe the H100 the way its probe does (sm_90; NVIDIA's Vulkan driver:
subgroups of 32, 48 KiB of shared memory, f16 16x16x16 cooperative matrices)."""

from __future__ import annotations

import pytest

from halbench.compiler.backends import Unsupported
from halbench.compiler.backends.cuda import BACKEND as CUDA
from halbench.compiler.backends.vulkan import BACKEND as VULKAN
from halbench.compiler.codegen.micro_cuda import GEMM_TILES, WGMMA_TILES
from halbench.probe.info import DeviceInfo, Features, Identity, Limits, MatrixShape


def _cuda_info(arch: str) -> DeviceInfo:
    return DeviceInfo("cuda", 0, Identity("NVIDIA H100 80GB HBM3", vendor="NVIDIA", api="CUDA", arch=arch))


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
CUDA_VARIANTS += [(k, {"BM": bm, "BN": bn, "STAGES": s, "MMA": 1}) for k in ("gemm_f16", "gemm_bf16")
                  for (bm, bn), s in GEMM_TILES.items()]
WGMMA_VARIANTS = [(k, {"BM": bm, "BN": bn, "STAGES": s, "MMA": mma}) for k in ("gemm_f16", "gemm_bf16")
                  for (bm, bn), s in WGMMA_TILES.items() for mma in (2, 3) if s >= mma]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
@pytest.mark.parametrize(("kernel", "options"), CUDA_VARIANTS)
def test_nvrtc_builds_every_cuda_variant(kernel, options, arch) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    mk = CUDA.micro_binary(kernel, "cuda-cubin-v1", _cuda_info(arch), options)
    assert mk.binary.data[:4] == b"\x7fELF"
    if kernel.startswith("gemm_"):
        bm, bn = options["BM"], options["BN"]
        assert mk.tile == (bm, bn, 32) and mk.workgroup_size == 32 * (bm // 64) * (bn // 64)
        assert "mma.sync" in mk.note


@pytest.mark.parametrize("fmt", ["cuda-cubin-v1", "cuda-ptx-v1"])
@pytest.mark.parametrize(("kernel", "options"), WGMMA_VARIANTS)
def test_nvrtc_builds_the_wgmma_gemm_for_sm90a(kernel, options, fmt) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    mk = CUDA.micro_binary(kernel, fmt, _cuda_info("sm_90"), options)
    assert mk.binary.target == "sm_90a"  # wgmma is arch-specific: the build is for sm_90a
    assert mk.workgroup_size == 128 * (options["BM"] // 64) and "wgmma" in mk.note
    if fmt == "cuda-ptx-v1":
        text = mk.binary.data.decode()
        assert ".target sm_90a" in text and f"wgmma.mma_async.sync.aligned.m64n{options['BN']}k16" in text


def test_cuda_gemm_refuses_what_it_cannot_build() -> None:
    with pytest.raises(Unsupported, match="sm_90 only"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_80"), {"MMA": 3})
    with pytest.raises(Unsupported, match="48 KiB"):
        CUDA.micro_binary("gemm_f16", "cuda-cubin-v1", _cuda_info("sm_90"), {"BM": 128, "BN": 256, "STAGES": 3})
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
