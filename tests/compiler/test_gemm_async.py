"""The scalar f32 GEMM's cp.async staging on CUDA sm_80+ (gemm.j2 ASYNC, kernels._async_ctx).

Without a GPU: the source stages through cp.async (4-byte copies, 16-byte ones where 4 neighbours
are contiguous and aligned) for sm_80 and sm_90 and NVRTC compiles it; every other target or
setting (sm_75, HIP, Vulkan, --precision rounding, a non-zero padding value) keeps the register
staging; the same problems run on lavapipe (the unchanged path) against the local oracle.
On a GPU (``--gpu``): the cp.async kernels against the NumPy oracle on fresh random inputs, with
outputs poisoned before each run and two runs bit-identical (a missing wait or barrier would
show as a moving result).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from halbench.compiler.codegen.cuda import cuda_source
from halbench.compiler.codegen.kernels import gemm_split, uses_extract
from halbench.compiler.codegen.tuning import GemmConfig, tuning_for
from halbench.compiler.codegen.variant import GpuVariant
from halbench.hal import EntryPoint
from tests.compiler import codegen_cases as cc
from tests.compiler.helpers import forced_gemm_tuning
from tests.compiler.test_codegen_vulkan import RTOL, rel_err, run_variant

CASES = {
    "conv3x3_pad_bias": lambda: cc.conv("nchw", 2, 32, 14, 14, 64, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
    "conv3x3_s2_odd": lambda: cc.conv("nchw", 1, 5, 13, 11, 7, (3, 3), 2, 1, (1, 0, 1, 1)),
    "conv_dil": lambda: cc.conv("nchw", 1, 3, 12, 12, 6, (3, 3), 1, 2, (2, 1, 2, 1)),
    "conv1x1_vec": lambda: cc.conv("nchw", 2, 16, 8, 8, 20, (1, 1), epilogue=True),
    "conv1x1_s2": lambda: cc.conv("nchw", 2, 16, 8, 8, 12, (1, 1), 2),
    "conv1x1_grouped_vec": lambda: cc.conv("ngchw", 2, 8, 4, 6, 12, (1, 1), groups=2),
    "conv_grouped_3x3": lambda: cc.conv("ngchw", 1, 3, 8, 8, 4, (3, 3), 1, 1, (1, 1, 1, 1), groups=2),
    "conv_nhwc_hwcf_vec": lambda: cc.conv("nhwc_hwcf", 2, 5, 8, 7, 8, (3, 3), 2, 1, (1, 1, 1, 1)),
    "conv_nhwc_fhwc": lambda: cc.conv("nhwc_fhwc", 1, 4, 9, 9, 7, (3, 3), 2, 1, (1, 1, 0, 0)),
    "conv_k_beyond_table": lambda: cc.conv("nchw", 1, 700, 4, 4, 8, (3, 3), 1, 1, (1, 1, 1, 1)),
    "conv_split_k": lambda: cc.conv("nchw", 1, 256, 7, 7, 64, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
    # 8x8 pixels (n in whole 4s): with runs of 4, SPLIT4's partials, the epilogue per element
    "conv_split_k4": lambda: cc.conv("nchw", 1, 256, 8, 8, 64, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
    "matmul_vec": lambda: cc.matmul(130, 96, 70, epilogue=True),
    "matmul_ta_vec": lambda: cc.matmul(20, 18, 37, ta=True, tb=True),
    "matmul_odd": lambda: cc.matmul(33, 47, 29),
    "matmul_split_k": lambda: cc.matmul(8, 384, 1536),
    # split along K with a bias + ReLU: with runs of 4 (64x64x16runs) gemm.j2 SPLIT4, the
    # partial sums 16 bytes at a time and the fix-up's epilogue through finish4
    "batch_matmul_split_k_bias": lambda: cc.matmul(6, 20, 1024, batch=2, epilogue=True),
    "batch_matmul": lambda: cc.matmul(17, 12, 16, batch=3),
    # K a multiple of 4 but not of BK (a last step partly zero-filled), ragged M and N, a bias:
    # gemm.j2 AK, and with runs of 4 (64x64x16runs) finish4
    "matmul_k4_bias": lambda: cc.matmul(130, 100, 68, epilogue=True),
    "batch_matmul_k4_bias": lambda: cc.matmul(40, 36, 20, batch=2, epilogue=True),
}
#: 16-byte copies: the operands whose 4 neighbours along the shared row are contiguous
VEC = {"conv1x1_vec", "conv1x1_grouped_vec", "conv_nhwc_hwcf_vec", "matmul_vec", "matmul_ta_vec", "matmul_split_k",
       "batch_matmul", "matmul_k4_bias", "batch_matmul_k4_bias", "batch_matmul_split_k_bias"}
#: gemm.j2 AK: A dense and contiguous along K (a matmul's A, an NCHW convolution's filter), K a
#: multiple of 4: 16-byte copies into a K-contiguous tile, read 4 steps at a time
AK = {"batch_matmul", "conv1x1_grouped_vec", "conv1x1_s2", "conv1x1_vec", "conv3x3_pad_bias", "conv_k_beyond_table",
      "conv_split_k", "conv_split_k4", "matmul_split_k", "matmul_k4_bias", "batch_matmul_k4_bias", "batch_matmul_split_k_bias"}
#: forced configurations (None: the rule's): ResNet's 128x128x8 tile, runs of 4 read as float4,
#: strided ownership, a partial last element round (BM * BK not a multiple of the threads)
CONFIGS = {None: None, "128x128x8": GemmConfig(128, 128, 8, 8, 8, 1, True),
           "64x64x16runs": GemmConfig(64, 64, 16, 8, 4, 1, True), "64x32x16": GemmConfig(64, 32, 16, 4, 2),
           "48x32x8": GemmConfig(48, 32, 8, 4, 4)}


def _tuning(arch: str, d, g, config: str | None):
    t = tuning_for(arch, "cuda")
    return t if CONFIGS[config] is None else forced_gemm_tuning(t, d, g, CONFIGS[config])


def _variant(d, g, arch: str, config: str | None = None) -> tuple[GpuVariant, str]:
    from halbench.compiler.backends.nvrtc import compile_cuda

    t = _tuning(arch, d, g, config)
    plan, src = cuda_source(d, g, tuning=t)
    if config is not None:
        assert plan.gemm["source"] == "tuned", plan.gemm
    cubin = compile_cuda(src, arch=arch, output="cubin", name="t", rename={"hb_main": "main"})
    entry = EntryPoint("main", len(d.inputs) + len(d.outputs) + plan.status + plan.scratch, 0,
                       plan.workgroup_size)
    return GpuVariant("cuda-cubin-v1", arch, cubin, entry, plan.workgroups, (), src, "cubin"), src


def _run(dev, d, g, variant: GpuVariant, inputs: list[np.ndarray], runs: int = 1) -> list[np.ndarray]:
    """``runs`` dispatches: outputs poisoned with NaN, the split-K scratch zeroed (its counters
    must be, and must be back at zero after each run)."""
    shapes = [(g.types[v].shape, np.float32) for v in d.outputs]
    extra = [((4,), np.uint32)] * uses_extract(d)  # a gather's bounds status slot
    sp = gemm_split(d, g)
    if sp is not None and variant.entry.bindings > len(d.inputs) + len(d.outputs) + len(extra):
        extra.append(((sp.nbytes // 4,), np.uint32))
    outs = run_variant(dev, variant, inputs, shapes + extra, poison=tuple(range(len(shapes))), runs=runs)
    return outs[:len(shapes)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_sm80_plus_stages_through_cp_async_and_compiles(case, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    g, d = CASES[case]()
    _, src = _variant(d, g, arch)
    assert "cp.async.commit_group" in src and "cp.async.wait_group" in src
    assert not re.search(r"\bp[ab]0\b", src)  # no staging registers
    assert ("hb_cp16(&" in src) == (case in VEC | AK), case
    assert ("float4 ga_0 = " in src) == (case in AK), case
    if case in AK:  # A's 16-byte copies land in the K-contiguous tile (row stride BK + 4)
        assert re.search(r"hb_cp16\(&As\[\w+ \* \d+ \+ mm \* \d+ \+ kk\]", src)
    if d.attrs["root"].kind == "conv2d" and case not in ("conv1x1_vec", "conv1x1_grouped_vec"):
        assert "hb_tap(hb_p" in src  # the im2col view: a tap per step, the pixel once per thread


@pytest.mark.parametrize("config", [c for c in CONFIGS if c])
@pytest.mark.parametrize("case", ["conv3x3_pad_bias", "conv1x1_vec", "matmul_vec", "conv_nhwc_hwcf_vec", "matmul_k4_bias"])
def test_forced_configs_compile_with_cp_async(case, config):
    pytest.importorskip("cuda.bindings.nvrtc")
    g, d = CASES[case]()
    _, src = _variant(d, g, "sm_90", config)
    assert "cp.async.wait_group" in src


@pytest.mark.parametrize("case", ["matmul_vec", "matmul_k4_bias", "batch_matmul_k4_bias", "conv1x1_vec"])
def test_runs_of_4_are_stored_16_bytes_at_a_time(case):
    """finish4 (kernels._finish4): with runs of 4 owned columns, a matmul whose N is a multiple of
    4 stores each run through the epilogue as one float4 (ragged tiles: the run is wholly inside
    or outside); an NCHW convolution (its n is a pixel, not the output's last axis) keeps element
    stores, as does a split-K GEMM with strided ownership (the rule's tile); with runs of 4 a
    split GEMM stores and sums its partial sums as float4 through L2 (gemm.j2 SPLIT4: st.cg /
    ld.cg) and its fix-up stores through finish4."""
    pytest.importorskip("cuda.bindings.nvrtc")
    g, d = CASES[case]()
    _, src = _variant(d, g, "sm_90", "64x64x16runs")
    vector = case != "conv1x1_vec"
    assert ("make_float4(" in src) == vector, case
    if vector:
        n = g.types[d.outputs[0]].shape[-1]
        assert f"if (m < {g.types[d.outputs[0]].shape[-2]} && n < {n}) {{" in src
        assert "fmaxf" in src or "max(" in src  # the bias + ReLU epilogue is in the vector path
    g, d = CASES["matmul_split_k"]()
    _, src = _variant(d, g, "sm_90")
    assert "hb_last" in src and "make_float4(" not in src
    for name in ("matmul_split_k", "batch_matmul_split_k_bias", "conv_split_k4"):
        g, d = CASES[name]()
        assert gemm_split(d, g) is not None, name
        _, src = _variant(d, g, "sm_90", "64x64x16runs")
        assert "hb_last" in src and "__stcg(reinterpret_cast<float4*>" in src, name
        assert "__ldcg(reinterpret_cast<const float4*>" in src, name
        # the fix-up's epilogue: 16-byte stores where the output runs along n, else per element
        assert ("make_float4(hb_s" in src) == (not name.startswith("conv")), name
    g, d = CASES["conv_split_k"]()  # 7x7 pixels: n not in whole 4s, the partials element by element
    _, src = _variant(d, g, "sm_90", "64x64x16runs")
    assert "hb_last" in src and "__stcg(" not in src


def test_ak_falls_back_where_shared_memory_or_k_do_not_allow():
    """K not a multiple of 4 (matmul_vec: 70) keeps A's 4-byte copies into the M-contiguous tile;
    so does a tile whose K-contiguous A would not fit the static shared memory with 3 stages."""
    g, d = CASES["matmul_vec"]()
    plan, _ = cuda_source(d, g, tuning=_tuning("sm_90", d, g, "64x64x16runs"))
    assert not plan.ctx["AK"]
    g, d = CASES["matmul_k4_bias"]()
    plan, src = cuda_source(d, g, tuning=_tuning("sm_90", d, g, "64x64x16runs"))
    assert plan.ctx["AK"] == 20 and "__shared__ __align__(16) float As[" + str(3 * 64 * 20) + "]" in src
    big = forced_gemm_tuning(tuning_for("sm_90", "cuda"), d, g, GemmConfig(256, 64, 16, 16, 4, 1, True))
    plan, _ = cuda_source(d, g, tuning=big)
    assert plan.ctx["ASYNC"] and not plan.ctx["AK"]


def test_im2col_taps_by_constant_table_where_it_fits():
    """3x3 NCHW: k -> tap from a __constant__ table (8 bytes per k, up to 48 KiB); a K beyond that
    and a 1x1 convolution decompose k in code."""
    pytest.importorskip("cuda.bindings.nvrtc")
    for (g, d), table in ((cc.conv("nchw", 1, 64, 6, 6, 8, (3, 3), 1, 1, (1, 1, 1, 1)), True),
                          (cc.conv("nchw", 1, 700, 4, 4, 8, (3, 3), 1, 1, (1, 1, 1, 1)), False),
                          (cc.conv("nchw", 1, 64, 6, 6, 8, (1, 1), 2), False)):
        _, src = _variant(d, g, "sm_90")
        k = g.types["w"].shape[1] * g.types["w"].shape[2] * g.types["w"].shape[3]
        assert (f"__constant__ int2 hb_ktab[{k}]" in src) == table, k
        assert "hb_tap(hb_p" in src


def test_three_stages_of_resnets_tile_fit_and_ring():
    g, d = CASES["conv3x3_pad_bias"]()
    plan, src = cuda_source(d, g, tuning=_tuning("sm_90", d, g, "128x128x8"))
    assert plan.ctx["ASYNC"] == 3
    # A, the filter, K-contiguous (AK): 128 rows of BK + 4; B: BK rows of 128 + 4
    assert "__shared__ __align__(16) float As[" + str(3 * 128 * 12) + "]" in src
    assert "__shared__ __align__(16) float Bs[" + str(3 * 8 * 132) + "]" in src
    assert "cp.async.wait_group 1;" in src and "if (++st == 3) st = 0;" in src


def test_register_staging_everywhere_else():
    """sm_75, HIP, Vulkan, --precision rounding and a non-zero padding value keep pa / pb registers."""
    from halbench.compiler.codegen.glsl import glsl_sources
    from halbench.compiler.codegen.hip import hip_source

    g, d = CASES["conv3x3_pad_bias"]()
    t75 = dataclasses.replace(tuning_for("sm_90", "cuda"), arch="sm_75", name="sm_75")
    for src in (cuda_source(d, g, tuning=t75)[1], hip_source(d, g, "gfx942")[1],
                glsl_sources(d, g, "h100")[1]["bda"]):
        assert "cp.async" not in src and re.search(r"\bpa0\b", src)
    root = d.attrs["root"]
    root.attrs["precision"] = "tf32"  # before sm_80 a tf32 conv rounds on the scalar GEMM (kernels._plan_gemm)
    src = cuda_source(d, g, tuning=t75)[1]
    assert "cp.async" not in src and "hb_round_tf32(pa0)" in src
    # from sm_80 the mma.sync matrix GEMM takes it (and stages through cp.async of its own)
    assert "mma.sync" in cuda_source(d, g, "sm_90")[1]
    root.attrs["precision"] = "fp32"
    root.attrs["pad_value"] = 0.5  # a zero-filling copy cannot write 0.5
    src = cuda_source(d, g, "sm_90")[1]
    assert "cp.async" not in src and "0.5f" in src


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_problems_on_lavapipe(vk, case):
    """The unchanged (register) path of the same problems, on lavapipe, against the oracle."""
    from halbench.compiler.codegen.glsl import generate_vulkan

    g, d = CASES[case]()
    inputs = cc.random_inputs(g, d, seed=3)
    ref = cc.reference(g, d, inputs)
    (variant,) = generate_vulkan(d, g, "llvmpipe", "descriptors")
    for o, r in zip(_run(vk, d, g, variant, inputs), ref):
        assert rel_err(o, r) <= RTOL, f"{case}: rel err {rel_err(o, r):.2e}"


@pytest.mark.parametrize("abi", ["descriptors", "bda"])
@pytest.mark.parametrize("case", ["matmul_k4_bias", "batch_matmul_k4_bias", "matmul_vec", "matmul_split_k",
                                  "batch_matmul_split_k_bias", "conv_split_k4"])
def test_vector_epilogue_on_lavapipe(vk, case, abi):
    """finish4 in GLSL (the outputs' vec4 views): runs of 4 owned columns (64x64x16runs, a tile
    ragged in M and N) stored as one vec4 each, on lavapipe against the oracle; split along K,
    the partial sums go through the scratch binding's coherent uvec4 view (SPLIT4), and two runs
    give the same bits (the counters are back at zero, the sum's order fixed)."""
    from halbench.compiler.codegen.glsl import generate_vulkan

    g, d = CASES[case]()
    t = forced_gemm_tuning(tuning_for("llvmpipe", "vulkan"), d, g, CONFIGS["64x64x16runs"])
    (variant,) = generate_vulkan(d, g, t, abi)
    # an NCHW convolution's output is not stored in runs (its n is a pixel), its partials are
    assert bool(re.search(r"V\d+\[\(.*\) / 4\] = vec4\(hb_s", variant.source)) == (not case.startswith("conv")), case
    split = "split" in case
    assert ("= floatBitsToUint(vec4(acc_" in variant.source) == split, case
    inputs = cc.random_inputs(g, d, seed=5)
    outs = _run(vk, d, g, variant, inputs)
    for o, r in zip(outs, cc.reference(g, d, inputs)):
        assert np.isfinite(o).all() and rel_err(o, r) <= RTOL, f"{case}: rel err {rel_err(o, r):.2e}"
    if split:
        again = _run(vk, d, g, variant, inputs, runs=2)
        assert all(np.array_equal(x, y) for x, y in zip(outs, again)), f"{case}: results move"


@pytest.fixture(scope="module")
def cu():
    import halbench

    with halbench.create_device("cuda://") as dev:
        yield dev


@pytest.mark.gpu
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_cp_async_kernels_match_numpy_on_cuda(cu, case, config):
    g, d = CASES[case]()
    arch = cu.info.identity.arch
    variant, src = _variant(d, g, arch, config)
    assert "cp.async.wait_group" in src
    rng = np.random.default_rng()
    for run in range(2):
        inputs = cc.random_inputs(g, d, seed=int(rng.integers(1 << 30)))
        ref = cc.reference(g, d, inputs)
        outs = _run(cu, d, g, variant, inputs)
        for o, r in zip(outs, ref):
            assert np.isfinite(o).all(), f"{case}/{config}: unwritten (NaN) outputs"
            assert rel_err(o, r) <= RTOL, f"{case}/{config}: rel err {rel_err(o, r):.2e}"
        again = _run(cu, d, g, variant, inputs)
        assert all(np.array_equal(x, y) for x, y in zip(outs, again)), f"{case}/{config}: results move"
