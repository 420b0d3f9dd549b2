"""The mma.sync GEMM's pipeline on CUDA targets with dynamic shared memory (sm_80+ that opt in
past 48 KiB, the H100's 227 KiB): STAGES-deep cp.async rings, tiles past the static limit,
tf32 im2col by 4-byte zero-filling copies, split-K of deep low-wave convolutions.

CI (no GPU): which targets opt in (Vulkan, WebGPU and HIP keep static shared memory), the
convolution rule's stages / tiles / splits, the entry point's dynamic size, every cp.async
guarded (its source an in-range address or the operand's base with size 0), the static
fallback, and NVRTC compiling sm_90 and sm_90a cubins. On a GPU (``--gpu``): forced pipelines
(2-4 stages, split 2-3, tf32 / f16, 3x3 padded / 1x1 convolutions, matmuls) against the
rounding NumPy oracle.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from halbench.compiler.codegen import kernels
from halbench.compiler.codegen.tuning import (
    STATIC_SHARED_BYTES,
    MmaTiles,
    mma_sync_shared_bytes,
    tuning_for,
)
from tests.compiler import codegen_cases as cc
from tests.compiler.test_gemm_async import _run


def _prec(case, precision: str):
    g, d = case
    d.attrs["root"].attrs["precision"] = precision
    return g, d


def _stage4():  # ResNet-50 b8's 512 -> 512 3x3 convolution at 7x7: 56 blocks of 64x64, K 4608
    return cc.conv("nchw", 8, 512, 7, 7, 512, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True)


def _stage2():  # ResNet-50 b8's 128 -> 128 3x3 convolution at 28x28
    return cc.conv("nchw", 8, 128, 28, 28, 128, (3, 3), 1, 1, (1, 1, 1, 1))


# -- CI ------------------------------------------------------------------------------------

def test_only_cuda_targets_that_opt_in_get_dynamic_shared_memory():
    assert tuning_for("h100", "cuda").dynamic_shared_bytes == 227 * 1024
    assert tuning_for("sm_90a", "cuda").dynamic_shared_bytes == 227 * 1024
    assert tuning_for("h100", "cuda").shared_bytes == STATIC_SHARED_BYTES  # static stays 48 KiB
    assert tuning_for("h100", "vulkan").dynamic_shared_bytes == 0
    assert tuning_for("gfx942", "hip").dynamic_shared_bytes == 0


@pytest.mark.parametrize("precision", ["tf32", "f16"])
def test_convolution_takes_three_stages_in_dynamic_shared_memory(precision):
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import cuda_source, generate_cuda

    g, d = _prec(_stage2(), precision)
    plan, src = cuda_source(d, g, "h100")
    c = plan.ctx
    assert plan.template == "gemm_mma_sync.j2" and c["STAGES"] == 3
    # tf32: every operand copied, so the large tile; f16: the 3x3 im2col comes through registers
    assert (c["BM"], c["BN"], c["BK"]) == ((128, 64, 32) if precision == "tf32" else (64, 32, 64))
    need = mma_sync_shared_bytes(precision, c["BM"], c["BN"], c["BK"], 3)
    if need > STATIC_SHARED_BYTES:
        assert plan.dynamic_shared == need and plan.shared == [] and "extern __shared__" in src
    assert "cp.async.wait_group 1;" in src  # two steps in flight while one multiplies
    cubin, ptx = generate_cuda(d, g, "h100")
    assert cubin.entry.dynamic_shared_bytes == plan.dynamic_shared
    assert "mma.sync.aligned" in ptx.payload.decode()
    (arch_specific,) = generate_cuda(d, g, "sm_90a", formats=("cubin",))  # NVRTC, no GPU needed
    plan_a, _ = cuda_source(d, g, "sm_90a")  # the bare arch (no SM count): its own tiles
    assert arch_specific.target == "sm_90a" and arch_specific.entry.dynamic_shared_bytes == plan_a.dynamic_shared
    assert plan_a.ctx["STAGES"] == 3


def test_the_static_fallback_without_dynamic_shared_memory():
    """A target that does not opt in keeps two stages of static arrays within 48 KiB: the
    generated kernel is main's, entry point without dynamic shared memory."""
    from halbench.compiler.codegen.cuda import cuda_source

    t = dataclasses.replace(tuning_for("h100", "cuda"), dynamic_shared_bytes=0)
    g, d = _prec(_stage2(), "tf32")
    plan, src = cuda_source(d, g, tuning=t)
    assert plan.ctx["STAGES"] == 2 and plan.dynamic_shared == 0 and "extern __shared__" not in src
    assert sum(4 * n for _, _, n in plan.shared) <= STATIC_SHARED_BYTES
    assert "cp.async.wait_group 0;" in src


def test_sm80_keeps_the_two_stage_rule_for_convolutions():
    """The pipelined convolution rule was measured on the H100 only: an A100 (dynamic shared
    memory too) keeps the two-stage tiles, and no split inside the matrix GEMM."""
    from halbench.compiler.codegen.cuda import cuda_source

    assert tuning_for("a100", "cuda").dynamic_shared_bytes > STATIC_SHARED_BYTES
    for case in (_stage2, _stage4):
        g, d = _prec(case(), "tf32")
        plan, _ = cuda_source(d, g, "a100")
        assert plan.ctx.get("STAGES", 2) == 2 and plan.ctx.get("SPLIT", 1) == 1


def test_vulkan_keeps_static_shared_memory():
    from halbench.compiler.codegen.glsl import glsl_sources

    g, d = cc.conv("nchw", 2, 8, 13, 11, 24, (3, 3), 2, 1, (1, 1, 1, 1))
    for v in g.types:
        g.types[v] = dataclasses.replace(g.types[v], dtype="f16")
    plan, _ = glsl_sources(d, g, "h100", abis=("bda",))
    assert plan.template == "gemm_mma.j2" and plan.dynamic_shared == 0


@pytest.mark.parametrize("precision", ["tf32", "f16"])
def test_deep_low_wave_convolution_splits_k(precision):
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import cuda_source, generate_cuda

    g, d = _prec(_stage4(), precision)
    plan, src = cuda_source(d, g, "h100")
    c = plan.ctx
    split, depth, k = c["SPLIT"], c["DEPTH"], 512 * 9
    assert split == 3 and plan.scratch and plan.workgroups[2] == split
    assert depth % c["BK"] == 0 and (split - 1) * depth < k <= split * depth  # no empty slice
    gs = kernels.gemm_split(d, g)
    assert split <= gs.room and c["CTR"] == gs.partial_words
    assert f"int kend = min(4608, kbeg + {depth});" in src
    (cubin,) = generate_cuda(d, g, "h100", formats=("cubin",))
    assert cubin.entry.bindings == 5  # x, w, bias, y + scratch


def _sources():
    from halbench.compiler.codegen.cuda import cuda_source

    for precision in ("tf32", "f16"):
        for case in (_stage2, _stage4, lambda: cc.conv("nchw", 2, 64, 8, 8, 48, (1, 1), 1, 1, (0, 0, 0, 0)),
                     lambda: cc.conv("nchw", 8, 256, 56, 56, 512, (1, 1), 2, 1, (0, 0, 0, 0)),
                     lambda: cc.matmul(300, 520, 200, epilogue=True)):
            g, d = _prec(case(), precision)
            yield precision, cuda_source(d, g, "h100")[1]


def test_every_cp_async_copies_in_range_or_zero_fills_from_the_base():
    """Each copy reads ``cond ? in-range element : operand base`` and copies ``cond ? n : 0``
    bytes with the same condition: nothing outside the operand is ever addressed."""
    copy = re.compile(r'cp\.async\.c[ag]\.shared\.global \[%0\], \[%1\], (4|16), %2;\\n" :: "r"\(hb_sa\(.*?\)\), '
                      r'"l"\(\((.+?)\) \? \(const void\*\)\((.+?)\) : \(const void\*\)\((B\d+)\)\), '
                      r'"r"\(\((.+?)\) \? (\d+) : 0\)\);')
    seen = 0
    for precision, src in _sources():
        lines = [ln for ln in src.splitlines() if "cp.async.ca.shared" in ln or "cp.async.cg.shared" in ln]
        seen += len(lines)
        for ln in lines:
            m = copy.search(ln)
            assert m, ln
            size, cond, addr, base, cond2, size2 = m.groups()
            assert cond == cond2 and size == size2 and addr.lstrip("(").startswith(base), ln
    assert seen > 20  # tf32 copies its operands; f16 rounds f32 ones in registers (no copies)

# -- GPU -----------------------------------------------------------------------------------

def _forced(monkeypatch, tiles: MmaTiles) -> None:
    """Compile with ``tiles`` whatever the rule would pick (the configuration is the input)."""
    monkeypatch.setattr(kernels, "mma_sync_tiles", lambda *a, **kw: tiles)
    monkeypatch.setattr(kernels, "mma_sync_split", lambda t, tl, *a, **kw: tl)
    monkeypatch.setattr(kernels, "mma_sync_takes_split", lambda *a, **kw: True)


GPU_CASES = {"conv3x3": lambda: cc.conv("nchw", 2, 40, 13, 11, 48, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
             "conv3x3_s2": lambda: cc.conv("nchw", 2, 32, 15, 15, 40, (3, 3), 2, 1, (1, 1, 1, 1)),
             "conv1x1": lambda: cc.conv("nchw", 2, 64, 8, 8, 72, (1, 1), 1, 1, (0, 0, 0, 0), epilogue=True),
             "matmul": lambda: cc.matmul(200, 136, 520, epilogue=True)}


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "f16"])
@pytest.mark.parametrize("stages,split", [(2, 1), (3, 1), (4, 1), (3, 2), (4, 3)])
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_pipelines_run_on_cuda(monkeypatch, case, stages, split, precision):
    import halbench
    from halbench.compiler.codegen.cuda import generate_cuda
    from halbench.compiler.codegen.kernels import gemm_split

    fk, bk = (8, 32) if precision == "tf32" else (16, 64)
    _forced(monkeypatch, MmaTiles(16, 8, fk, 2, 2, 2, 4, bk, stages=stages, split=split))
    g, d = _prec(GPU_CASES[case](), precision)
    sp = gemm_split(d, g)
    if split > 1 and (sp is None or sp.room < split):
        pytest.skip(f"{case}: the schedule reserves no scratch for {split} slices")
    with halbench.create_device("cuda://") as dev:
        (v,) = generate_cuda(d, g, dev.info.identity.arch, formats=("cubin",))
        assert v.workgroups[2] % split == 0
        xs = cc.random_inputs(g, d, seed=11)
        want = cc.reference(g, d, xs)[0]
        (got,) = _run(dev, d, g, v, xs, runs=2)  # twice: the counters must be back at zero after a run
        assert np.isfinite(got).all()
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        assert err < 1e-5, f"{case} {precision} s{stages} k{split}: {err:.2e} from the rounding oracle"
