"""Matrix-unit GEMMs: f16 (and bf16 on CUDA) matmul, batch matmul and conv on cooperative
matrix (Vulkan) and WMMA (CUDA).

CI (no GPU): for targets with matrix units the kernels are generated for shapes that are and
are not multiples of the 16x16x16 fragment; the SPIR-V passes spirv-val and declares
CooperativeMatrixKHR, the CUDA C compiles to cubin for sm_80 / sm_90 with (w)mma in its PTX.
Targets without matrix units keep the scalar GEMM. On a GPU (``--gpu``) the kernels run on
vulkan:// and cuda:// against a NumPy f32 reference of the f16-rounded inputs (1e-2 relative,
the documented f16 bound; accumulation is f32, so expect ~1e-3), and ``-s`` prints the GFLOP/s
of a 2048^3 f16 matmul per API from profiled dispatch times.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from halbench.compiler.codegen.glsl import generate_vulkan, glsl_sources
from halbench.compiler.ir import Graph, TensorType
from tests.compiler import codegen_cases as cc

F16_RTOL = 1e-2

#: name -> (M, N, K, batch); batch 0 is a plain matmul
SHAPES = {
    "aligned_64": (64, 64, 64, 0),
    "odd_100x72x40": (100, 72, 40, 0),
    "tall_300x260x130": (300, 260, 130, 0),
    "row_1x77x64": (1, 77, 64, 0),
    "batch3_33x50x24": (33, 50, 24, 3),
}

VULKAN_TARGETS = ["h100", "rdna3"]
CUDA_TARGETS = ["sm_80", "sm_90", "a100", "h100"]
_OP_CAPABILITY, _COOPERATIVE_MATRIX_KHR = 17, 6022


def _as_dtype(g, names, dtype):
    for v in names:
        g.types[v] = TensorType(g.types[v].shape, dtype)
    return g


def matmul_case(name: str, dtype: str = "f16", epilogue: bool = False, ta: bool = False, tb: bool = False):
    m, n, k, batch = SHAPES[name]
    return cc.matmul(m, n, k, batch=batch, dtype=dtype, epilogue=epilogue, ta=ta, tb=tb)


def conv_case(dtype: str = "f16"):
    """A padded, strided NCHW conv with bias + ReLU: the implicit GEMM with f16 operands."""
    g, d = cc.conv("nchw", 2, 8, 13, 11, 24, (3, 3), 2, 1, (1, 1, 1, 1), epilogue=True)
    return _as_dtype(g, ["x", "w", "r"], dtype), d


def conv1x1_case(dtype: str = "f16"):
    """A 1x1 NCHW conv of two 8x8 images with bias + ReLU: its input read 8 f16 at a time, the
    runs crossing from one image to the next (kernels.py's b_run)."""
    g, d = cc.conv("nchw", 2, 64, 8, 8, 48, (1, 1), 1, 1, (0, 0, 0, 0), epilogue=True)
    return _as_dtype(g, ["x", "w", "r"], dtype), d


def capabilities(spirv: bytes) -> set[int]:
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv)
    caps, i = set(), 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if op == _OP_CAPABILITY:
            caps.add(words[i + 1])
        i += max(count, 1)
    return caps


# -- CI: generation and compilation ---------------------------------------------------------

@pytest.mark.parametrize("target", VULKAN_TARGETS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_vulkan_uses_cooperative_matrix(target, shape):
    g, d = matmul_case(shape)
    plan, _ = glsl_sources(d, g, target)
    assert plan.template == "gemm_mma.j2" and "mma" in plan.features
    variants = generate_vulkan(d, g, target, "all")  # compile_glsl runs spirv-val
    assert [v.format for v in variants] == ["vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1"]
    for v in variants:
        assert _COOPERATIVE_MATRIX_KHR in capabilities(v.payload), f"{target}/{shape}: no CooperativeMatrixKHR"
        assert "coopMatMulAdd" in v.source
        assert v.workgroups[2] == max(SHAPES[shape][3], 1)


def test_shallow_gemms_get_no_128x128_tile():
    """K of 256 or less: 64x64 tiles even where 128x128 would fill the machine (ResNet-50 b8's
    1x1 convolutions, H100 Vulkan f16 2.786 -> 2.468 ms); a deep GEMM keeps 128x128."""
    from halbench.compiler.codegen.tuning import MMA_SHALLOW_K

    for k, want in ((64, 64), (MMA_SHALLOW_K, 64), (MMA_SHALLOW_K + 32, 128), (2048, 128)):
        g, d = cc.matmul(2048, 2048, k, dtype="f16")
        plan, _ = glsl_sources(d, g, "h100", abis=("bda",))
        assert (plan.ctx["BM"], plan.ctx["BN"]) == (want, want), k


@pytest.mark.parametrize("case", ["epilogue", "transposed", "conv"])
def test_vulkan_epilogue_transposes_and_conv(case):
    g, d = {"epilogue": lambda: matmul_case("odd_100x72x40", epilogue=True),
            "transposed": lambda: matmul_case("batch3_33x50x24", ta=True, tb=True),
            "conv": conv_case}[case]()
    (v,) = generate_vulkan(d, g, "h100", "descriptors")
    assert _COOPERATIVE_MATRIX_KHR in capabilities(v.payload)


def test_rdna3_is_right_for_wave32_and_wave64():
    """RDNA runs wave32 or wave64 and the driver picks: each subgroup then owns two warp tiles."""
    g, d = matmul_case("tall_300x260x130")
    _, src = glsl_sources(d, g, "rdna3", abis=("descriptors",))
    assert "on1" in src["descriptors"] and "gl_NumSubgroups" in src["descriptors"]
    _, src = glsl_sources(d, g, "h100", abis=("descriptors",))
    assert "on1" not in src["descriptors"]


@pytest.mark.parametrize("target,api,dtype", [
    ("llvmpipe", "vulkan", "f16"), (None, "vulkan", "f16"), ("h100", "vulkan", "f32"),
    ("h100", "vulkan", "bf16"), ("sm_60", "cuda", "f16"), ("sm_75", "cuda", "bf16"),
    ("h100", "cuda", "f32"), ("gfx942", "hip", "f16"),
])
def test_scalar_gemm_without_matrix_units(target, api, dtype):
    """No matrix units for the type (or no WMMA in the shared C subset, HIP): the scalar GEMM."""
    from halbench.compiler.codegen.kernels import plan_dispatch
    from halbench.compiler.codegen.tuning import tuning_for

    g, d = matmul_case("odd_100x72x40", dtype=dtype)
    plan = plan_dispatch(d, g, tuning_for(target, api), _lang(api))
    assert plan.template == "gemm.j2"


def _lang(api: str):
    from halbench.compiler.codegen.cuda import CUDA
    from halbench.compiler.codegen.glsl import GLSL

    return GLSL() if api == "vulkan" else CUDA()


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("target", CUDA_TARGETS)
@pytest.mark.parametrize("shape", ["odd_100x72x40", "batch3_33x50x24", "tall_300x260x130"])
def test_cuda_compiles_to_mma(shape, target, dtype):
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import cuda_source, generate_cuda
    from halbench.drivers.cuda.cubin import cubin_arch

    g, d = matmul_case(shape, dtype=dtype)
    plan, _ = cuda_source(d, g, target)
    assert plan.template == "gemm_mma_sync.j2"  # sm_80+: mma.sync, ldmatrix, cp.async
    cubin, ptx = generate_cuda(d, g, target)
    arch = {"a100": "sm_80", "h100": "sm_90"}.get(target, target)
    assert cubin_arch(cubin.payload) == arch
    text = ptx.payload.decode()
    assert re.search(rf"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{dtype}\.{dtype}\.f32", text), \
        f"{shape}/{target}/{dtype}: no mma.sync in the PTX"
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in text
    if shape == "odd_100x72x40":  # K = 72: 8-element runs of A are whole and aligned, 16-byte cp.async
        assert "cp.async.cg.shared.global" in text


def test_cuda_before_sm_80_keeps_wmma():
    """sm_70 / sm_75 have f16 WMMA but not mma.sync m16n8k16 nor cp.async: the WMMA GEMM."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import cuda_source, generate_cuda

    g, d = matmul_case("odd_100x72x40", dtype="f16")
    plan, src = cuda_source(d, g, "sm_75")
    assert plan.template == "gemm_mma.j2" and "nvcuda::wmma" in src
    _, ptx = generate_cuda(d, g, "sm_75")
    assert "wmma.mma.sync" in ptx.payload.decode()


@pytest.mark.parametrize("case", ["epilogue", "transposed", "conv"])
def test_cuda_epilogue_transposes_and_conv(case):
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import generate_cuda

    g, d = {"epilogue": lambda: matmul_case("odd_100x72x40", epilogue=True),
            "transposed": lambda: matmul_case("batch3_33x50x24", ta=True, tb=True),
            "conv": conv_case}[case]()
    _, ptx = generate_cuda(d, g, "sm_90")
    assert re.search(r"\b(wmma\.mma|mma\.sync)\b", ptx.payload.decode())


# -- GPU: results and throughput ------------------------------------------------------------

def _bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _inputs(g, d, dtype: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(device inputs, their f32 values): f16 / bf16 rounding happens once, here."""
    dev, f32 = [], []
    rng = np.random.default_rng(1)
    for v in d.inputs:
        t = g.types[v]
        x = (rng.uniform(0.1, 1.1, t.shape) * rng.choice([-1.0, 1.0], t.shape)).astype(np.float32)
        if t.dtype == "f16":
            dev.append(x.astype(np.float16))
            f32.append(dev[-1].astype(np.float32))
        elif t.dtype == "bf16":
            dev.append(_bf16_bits(x))
            f32.append(_bf16_value(dev[-1]))
        else:
            dev.append(x)
            f32.append(x)
    return dev, f32


def _reference(g, d, f32_inputs: list[np.ndarray]) -> np.ndarray:
    """The f32 result of the dispatch on f16-rounded inputs (the oracle, on an f32 graph)."""
    g32 = Graph()
    g32.types = {v: TensorType(t.shape, "f32") for v, t in g.types.items()}
    return cc.reference(g32, d, f32_inputs)[0]


def _out_dtype(g, d):
    dt = g.types[d.outputs[0]].dtype
    return {"f16": np.float16, "bf16": np.uint16}.get(dt, np.float32), dt


def _check(dev, variant, g, d, dtype: str, label: str) -> float:
    from tests.compiler.test_codegen_vulkan import rel_err, run_variant

    dev_in, f32_in = _inputs(g, d, dtype)
    ref = _reference(g, d, f32_in)
    np_dt, dt = _out_dtype(g, d)
    (out,) = run_variant(dev, variant, dev_in, [(g.types[d.outputs[0]].shape, np_dt)])
    out = _bf16_value(out) if dt == "bf16" else out.astype(np.float32)
    err = rel_err(out, ref)
    assert np.isfinite(out).all() and err <= F16_RTOL, f"{label}: rel err {err:.2e}"
    return err


GPU_CASES = {
    **{s: (lambda s=s: matmul_case(s)) for s in SHAPES},
    "epilogue": lambda: matmul_case("odd_100x72x40", epilogue=True),
    "transposed": lambda: matmul_case("batch3_33x50x24", ta=True, tb=True),
    "conv": conv_case,
    "conv1x1": conv1x1_case,
}


@pytest.fixture(scope="module")
def vk_matrix():
    import halbench
    from halbench.compiler.codegen.tuning import mma_fragment, tuning_for
    from halbench.compiler.targets import target_from_device

    try:
        dev = halbench.create_device("vulkan://")
    except Exception as e:  # noqa: BLE001 - no Vulkan here: skip with the reason
        pytest.skip(f"no Vulkan device: {e}")
    with dev:
        target = target_from_device(dev.info, "vulkan")
        if mma_fragment(tuning_for(target, "vulkan"), "f16") is None:
            pytest.skip(f"no f16 cooperative matrix on {dev.info.name}")
        yield dev, target


@pytest.fixture(scope="module")
def cu_matrix():
    import halbench

    with halbench.create_device("cuda://") as dev:
        yield dev, dev.info.identity.arch


@pytest.mark.gpu
@pytest.mark.parametrize("abi", ["bda", "descriptors"])
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_runs_on_vulkan_cooperative_matrix(vk_matrix, case, abi):
    dev, target = vk_matrix
    g, d = GPU_CASES[case]()
    plan, _ = glsl_sources(d, g, target, abis=(abi,))
    assert plan.template == "gemm_mma.j2"
    (v,) = generate_vulkan(d, g, target, abi)
    _check(dev, v, g, d, "f16", f"vulkan/{case}/{abi}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_runs_on_cuda_wmma(cu_matrix, case, dtype):
    from halbench.compiler.codegen.cuda import generate_cuda

    dev, arch = cu_matrix
    g, d = GPU_CASES[case]()
    if dtype == "bf16":
        _as_dtype(g, [v for v in g.types if g.types[v].dtype == "f16"], "bf16")
    (v,) = generate_cuda(d, g, arch, formats=("cubin",))
    assert "mma.sync.aligned" in v.source or "nvcuda::wmma" in v.source  # sm_80+ / earlier
    _check(dev, v, g, d, dtype, f"cuda/{case}/{dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("api", ["vulkan", "cuda"])
def test_matmul_2048_throughput(request, api):
    """GFLOP/s of a 2048^3 f16 matmul from profiled dispatch times (median of 20); prints with -s."""
    from halbench.compiler.codegen.cuda import generate_cuda

    dev, target = request.getfixturevalue("vk_matrix" if api == "vulkan" else "cu_matrix")
    size, reps = 2048, 20
    g, d = cc.matmul(size, size, size, dtype="f16")
    v = generate_vulkan(d, g, target, "bda")[0] if api == "vulkan" else generate_cuda(d, g, target, formats=("cubin",))[0]
    assert v.source.count("coopMatMulAdd") + v.source.count("mma_sync") + v.source.count("mma.sync") > 0
    _check(dev, v, g, d, "f16", f"{api}/2048")
    dev_in, _ = _inputs(g, d, "f16")
    exe = dev.load_executable(v.binary())
    bufs = [dev.allocate(x.nbytes) for x in dev_in] + [dev.allocate(size * size * 2)]
    for b, x in zip(bufs, dev_in):
        b.write(x)
    cb = dev.command_buffer(profile=True)
    for _ in range(reps):
        cb.dispatch(exe, v.entry.name, v.workgroups, bufs)
    cb.end()
    dev.submit(cb).wait()  # warm-up: clocks, caches, pipeline
    sub = dev.submit(cb)
    sub.wait()
    times = sorted(t.duration_ns for t in sub.timings())
    median_ns = times[len(times) // 2]
    gflops = 2.0 * size ** 3 / median_ns
    print(f"\n{api}: f16 matmul {size}^3 on {dev.info.name}: {gflops:,.0f} GFLOP/s "
          f"(median {median_ns / 1e3:.1f} us of {reps} dispatches, workgroups {v.workgroups})")
    for b in bufs:
        b.free()
    assert gflops > 0
