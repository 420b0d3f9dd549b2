"""The wgmma GEMM (gemm_wgmma.j2) of sm_90a targets: Hopper's warpgroup MMA reading both operands
from 64-byte-swizzled shared memory, for tf32 and f16 / bf16 convolutions.

The plan is off by default (tuning.WGMMA_CONVS: measured slower than mma.sync on the H100); the
tests switch it on. CI (no GPU): it is chosen for an sm_90a target and not for sm_80 / sm_90 /
Vulkan; its tile rule; every cp.async guarded; NVRTC compiles it for sm_90a. On a GPU (``--gpu``):
forced tiles (one and two warpgroups, 2-4 stages, 0-1 groups in flight, split-K) on odd shapes against NumPy
(tf32: inputs truncated to tf32 as the tensor cores read them; f16: the rounding oracle).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from halbench.compiler.codegen import kernels
from halbench.compiler.codegen.tuning import WgmmaTiles, tuning_for, wgmma_ok, wgmma_tiles
from halbench.compiler.codegen.wgmma import wgmma_asm
from tests.compiler import codegen_cases as cc


@pytest.fixture(autouse=True)
def _wgmma_on(monkeypatch):
    """The plan computes convolutions and matmuls but is off by default (tuning.WGMMA_CONVS: it
    measured slower than mma.sync on the H100); these tests switch it on."""
    monkeypatch.setattr(kernels, "WGMMA_CONVS", True)


def _prec(case, precision: str):
    g, d = case
    d.attrs["root"].attrs["precision"] = precision
    return g, d


CASES = {"conv3x3": lambda: cc.conv("nchw", 2, 40, 13, 11, 48, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
         "conv3x3_s2": lambda: cc.conv("nchw", 2, 32, 15, 15, 72, (3, 3), 2, 1, (1, 1, 1, 1)),
         "conv1x1": lambda: cc.conv("nchw", 2, 64, 8, 8, 136, (1, 1), 1, 1, (0, 0, 0, 0), epilogue=True),
         "conv1x1_s2": lambda: cc.conv("nchw", 3, 30, 9, 9, 20, (1, 1), 2, 1, (0, 0, 0, 0)),
         "conv7x7_stem": lambda: cc.conv("nchw", 1, 3, 20, 20, 64, (7, 7), 2, 1, (3, 3, 3, 3)),
         "matmul": lambda: cc.matmul(200, 136, 520, epilogue=True),
         "matmul_tb": lambda: cc.matmul(130, 72, 96, tb=True),
         "matmul_odd": lambda: cc.matmul(70, 50, 37, ta=True)}


def _plan(case: str, precision: str, target: str):
    from halbench.compiler.codegen.cuda import cuda_source

    g, d = _prec(CASES[case](), precision)
    return cuda_source(d, g, target)


# -- CI ------------------------------------------------------------------------------------

def test_off_by_default_sm90a_keeps_mma_sync(monkeypatch):
    monkeypatch.setattr(kernels, "WGMMA_CONVS", False)
    for precision in ("tf32", "f16"):
        assert _plan("conv3x3", precision, "sm_90a")[0].template == "gemm_mma_sync.j2"


@pytest.mark.parametrize("precision", ["tf32", "f16", "bf16"])
def test_sm90a_convolutions_take_wgmma_and_other_targets_do_not(precision):
    assert wgmma_ok(tuning_for("sm_90a", "cuda"), precision)
    for target in ("sm_80", "sm_90", "h100"):  # sm_90 PTX has no wgmma; h100 is an sm_90 product
        assert not wgmma_ok(tuning_for(target, "cuda"), precision)
        assert _plan("conv3x3", precision, target)[0].template == "gemm_mma_sync.j2"
    plan, src = _plan("conv3x3", precision, "sm_90a")
    assert plan.template == "gemm_wgmma.j2" and "wgmma.mma_async.sync.aligned.m64n" in src
    assert plan.dynamic_shared == plan.ctx["STAGES"] * (plan.ctx["BM"] + plan.ctx["BN"]) * 128
    assert plan.workgroup_size[0] == 128 * plan.ctx["NWG"]
    # matmuls keep mma.sync until measured (tuning.WGMMA_MATMULS)
    assert _plan("matmul", precision, "sm_90a")[0].template == "gemm_mma_sync.j2"


def test_vulkan_and_fp32_keep_their_gemms():
    assert not wgmma_ok(tuning_for("h100", "vulkan"), "f16")
    g, d = CASES["conv3x3"]()  # no --precision: f32 operands stay on the scalar GEMM
    from halbench.compiler.codegen.cuda import cuda_source

    assert cuda_source(d, g, "sm_90a")[0].template != "gemm_wgmma.j2"


def test_operand_staging_modes():
    """tf32: weights by 16-byte copies, the zero-padded im2col by 4-byte zero-filling copies; f16
    from f32 tensors: converted in registers (float4 weights, element-wise im2col)."""
    tf = _plan("conv3x3", "tf32", "sm_90a")[0].ctx["OPS"]
    assert (tf["a"]["mode"], tf["b"]["mode"]) == ("cp16", "cp4")
    f16 = _plan("conv3x3", "f16", "sm_90a")[0].ctx["OPS"]
    assert (f16["a"]["mode"], f16["b"]["mode"]) == ("reg", "reg") and f16["a"]["v4"] and not f16["b"]["v4"]
    stem = _plan("conv7x7_stem", "tf32", "sm_90a")[0].ctx["OPS"]  # K = 147: no 16-byte runs
    assert stem["a"]["mode"] == "reg" and stem["a"]["map"] == "rows"


def test_tile_rule_on_the_h100():
    """ResNet-50 b8's convolutions (M = filters, N = 8 images' pixels): large tiles where they make
    a wave, 64x64 split along K for the deep 7x7 stage."""
    t = dataclasses.replace(tuning_for("sm_90a", "cuda"), compute_units=132)
    big = wgmma_tiles(t, 256, 8 * 56 * 56, 64 * 9, 1, 1)
    assert (big.bm, big.bn, big.stages, big.inflight) == (128, 128, 4, 1)
    assert big.shared_bytes() <= t.dynamic_shared_bytes
    deep = wgmma_tiles(t, 512, 8 * 7 * 7, 512 * 9, 1, 4)
    assert (deep.bm, deep.bn) == (64, 64) and deep.split >= 2
    assert wgmma_tiles(t, 512, 8 * 7 * 7, 512 * 9, 1, 1).split == 1  # no scratch reserved: unsplit


def test_wgmma_asm_types():
    assert "m64n128k8.f32.tf32.tf32" in wgmma_asm(128, "tf32") and "p, 1, 1;" in wgmma_asm(128, "tf32")
    assert "m64n64k16.f32.f16.f16" in wgmma_asm(64, "f16") and "p, 1, 1, 0, 0;" in wgmma_asm(64, "f16")
    assert wgmma_asm(64, "f16").count('"+f"') == 32


def test_every_cp_async_copies_in_range_or_zero_fills_from_the_base():
    copy = re.compile(r'cp\.async\.c[ag]\.shared\.global \[%0\], \[%1\], (4|16), %2;\\n" :: "r"\(.*?\), '
                      r'"l"\(\((.+?)\) \? \(const void\*\)\((.+?)\) : \(const void\*\)\((B\d+)\)\), '
                      r'"r"\(\((.+?)\) \? (\d+) : 0\)\);')
    seen = 0
    for case in ("conv3x3", "conv1x1", "conv3x3_s2"):
        src = _plan(case, "tf32", "sm_90a")[1]
        for ln in src.splitlines():
            if "cp.async.ca.shared" in ln or "cp.async.cg.shared" in ln:
                m = copy.search(ln)
                assert m, ln
                size, cond, addr, base, cond2, size2 = m.groups()
                assert cond == cond2 and size == size2 and addr.lstrip("(").startswith(base), ln
                seen += 1
    assert seen >= 6


@pytest.mark.parametrize("precision", ["tf32", "f16", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles_for_sm90a(monkeypatch, case, precision):
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import generate_cuda

    monkeypatch.setattr(kernels, "WGMMA_MATMULS", True)
    g, d = _prec(CASES[case](), precision)
    (v,) = generate_cuda(d, g, "sm_90a", formats=("cubin",))
    assert v.target == "sm_90a" and "wgmma.mma_async" in v.source
    assert v.entry.dynamic_shared_bytes > 0


def test_split_k_compiles(monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import generate_cuda

    monkeypatch.setattr(kernels, "wgmma_tiles", lambda *a, **kw: WgmmaTiles(1, 64, 3, 1, split=3))
    g, d = _prec(cc.conv("nchw", 2, 512, 7, 7, 96, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True), "tf32")
    sp = kernels.gemm_split(d, g)
    assert sp is not None and sp.room >= 3
    (v,) = generate_cuda(d, g, "sm_90a", formats=("cubin",))
    assert v.workgroups[2] == 3 and "hb_last" in v.source  # batch 1 (N holds the images) x 3 slices


# -- GPU -----------------------------------------------------------------------------------

def _truncated_reference(g, d, xs):
    """The f32 oracle on the GEMM operands with their low 13 mantissa bits cleared (what wgmma's
    tf32 reads of f32 data)."""
    root = d.attrs["root"]
    ins = list(xs)
    for v in root.inputs[:2]:
        i = list(d.inputs).index(v)
        ins[i] = (ins[i].view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    prec = root.attrs["precision"]
    root.attrs["precision"] = "fp32"
    try:
        return cc.reference(g, d, ins)[0]
    finally:
        root.attrs["precision"] = prec


GPU_TILES = [WgmmaTiles(1, 64, 2, 0), WgmmaTiles(1, 128, 3, 1), WgmmaTiles(2, 128, 6, 1),
             WgmmaTiles(2, 64, 4, 0), WgmmaTiles(1, 64, 4, 1, split=2), WgmmaTiles(2, 128, 3, 1, split=3)]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "f16"])
@pytest.mark.parametrize("tiles", GPU_TILES, ids=lambda t: f"{t.bm}x{t.bn}s{t.stages}i{t.inflight}k{t.split}")
@pytest.mark.parametrize("case", sorted(CASES))
def test_wgmma_runs_on_cuda(monkeypatch, case, tiles, precision):
    import halbench
    from halbench.compiler.codegen.cuda import generate_cuda
    from halbench.compiler.codegen.kernels import gemm_split
    from tests.compiler.test_gemm_async import _run

    monkeypatch.setattr(kernels, "WGMMA_MATMULS", True)
    monkeypatch.setattr(kernels, "wgmma_tiles", lambda *a, **kw: tiles)
    g, d = _prec(CASES[case](), precision)
    sp = gemm_split(d, g)
    if tiles.split > 1 and (sp is None or sp.room < tiles.split):
        pytest.skip(f"{case}: the schedule reserves no scratch for {tiles.split} slices")
    with halbench.create_device("cuda://") as dev:
        if dev.info.identity.arch != "sm_90":
            pytest.skip("wgmma needs an sm_90 device (sm_90a code)")
        (v,) = generate_cuda(d, g, "sm_90a", formats=("cubin",))
        assert "wgmma.mma_async" in v.source
        xs = cc.random_inputs(g, d, seed=5)
        want = _truncated_reference(g, d, xs) if precision == "tf32" else cc.reference(g, d, xs)[0]
        (got,) = _run(dev, d, g, v, xs, runs=2)  # twice: split-K counters back at zero after a run
        assert np.isfinite(got).all()
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        assert err < 1e-5, f"{case} {precision} {tiles}: {err:.2e} from the oracle"
