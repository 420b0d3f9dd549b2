"""Split-K on the matrix-unit GEMM of gemm_mma.j2 (Vulkan's cooperative matrix, CUDA's WMMA before
sm_80) under ``--precision f16``: a deep GEMM with few output tiles (ResNet-50's stage-4
convolutions, a batch-1 projection) is cut along K into the slices the split rule picks
(tuning.split_k), each slice a workgroup; the tile's last slice to finish adds the partial sums
in slice order and runs the epilogue, as the scalar GEMM does (gemm.j2). Where the schedule
reserved scratch, more slices than the rule's are added until every compute unit has
MMA_SPLIT_WARPS subgroups (tuning.mma_split_slices): the matrix GEMM does not prefetch its
staging loads, so resident workgroups are what hides them.

CI (no GPU): which GEMMs split, into slices of whole BK steps with none empty (a hypothesis
property over shapes and rooms), within the scratch the schedule reserves, with the scratch binding; the SPIR-V passes spirv-val and NVRTC
compiles the sm_75 WMMA kernel; with ``MMA_SPLIT_K`` off those GEMMs stay on the rounded scalar
GEMM. On a GPU (``--gpu``): the split kernels run twice in a row (the tile counters must be back
at zero after a run) against the rounding NumPy oracle, on the Vulkan cooperative matrix and,
through PTX JIT-compiled by the driver, as sm_75 WMMA on CUDA.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halbench.compiler.codegen import kernels
from tests.compiler import codegen_cases as cc


def _prec(case, precision: str = "f16"):
    g, d = case
    d.attrs["root"].attrs["precision"] = precision
    return g, d


#: deep GEMMs with few output tiles, which the rule splits (name -> case)
SPLIT_CASES = {
    # ResNet-50 b1's 512 -> 512 3x3 convolution at 7x7: 512 x 49 outputs, K 4608
    "stage4_b1": lambda: cc.conv("nchw", 1, 512, 7, 7, 512, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
    # K 1800 not a multiple of the 32-deep step, M and N not of the 32x32 tile
    "conv_odd": lambda: cc.conv("nchw", 1, 200, 7, 7, 72, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
    "matmul": lambda: cc.matmul(64, 96, 2048, epilogue=True),
    "batch_matmul": lambda: cc.matmul(33, 50, 1000, batch=3),
}


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_vulkan_cooperative_matrix_splits_deep_low_wave_gemms(case):
    from halbench.compiler.codegen.glsl import generate_vulkan, glsl_sources

    g, d = _prec(SPLIT_CASES[case]())
    sp = kernels.gemm_split(d, g)
    assert sp is not None and sp.slices > 1
    plan, src = glsl_sources(d, g, "h100", abis=("bda",))
    c = plan.ctx
    split, depth, k = c["SPLIT"], c["DEPTH"], c["K"]
    assert plan.template == "gemm_mma.j2" and plan.scratch
    assert 1 < split <= sp.room and depth % c["BK"] == 0
    assert (split - 1) * depth < k <= split * depth  # no slice left empty
    assert plan.workgroups[2] == split * max(sp.batch, 1)
    assert c["CTR"] == sp.partial_words  # the counters after every slice's partial sums
    assert c["GX"] * c["GY"] * max(sp.batch, 1) <= sp.counters  # one counter per output tile
    body = src["bda"]
    assert f"int kend = min({k}, kbeg + {depth});" in body and "coopMatMulAdd" in body
    # the Vulkan memory model (on with cooperative matrices): partial sums released and acquired
    # at queue-family scope around an acq_rel counter, not by barrier() (shared memory only)
    assert body.count("controlBarrier(gl_ScopeWorkgroup, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer") == 2
    assert "1u, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease)) ==" in body
    # no shared variable of its own for the last slice's flag: on NVIDIA's driver a 4-byte one
    # moved the operands' shared arrays off their 16-byte alignment (garbage products)
    assert [name for _, name, _ in plan.shared] == ["As", "Bs", "Cs"] and "if (Cs[0] == 0.0f) return;" in body
    for v in generate_vulkan(d, g, "h100", "all"):  # glslang + spirv-val
        assert v.entry.bindings == len(d.inputs) + len(d.outputs) + 1  # + the scratch binding
        assert v.workgroups == plan.workgroups


def test_split_off_keeps_those_gemms_on_the_rounded_scalar_gemm(monkeypatch):
    from halbench.compiler.codegen.glsl import glsl_sources

    monkeypatch.setattr(kernels, "MMA_SPLIT_K", False)
    g, d = _prec(SPLIT_CASES["stage4_b1"]())
    plan, _ = glsl_sources(d, g, "h100", abis=("bda",))
    assert plan.template == "gemm.j2" and plan.ctx["SPLIT"] > 1 and plan.ctx["ROUND"] != "{}"


def test_a_wide_gemm_stays_whole():
    """Output tiles enough for several workgroups per compute unit (ResNet-50 b8's first 3x3
    convolution, 64 x 25088 x 576): one slice, no counters, no scratch traffic."""
    from halbench.compiler.codegen.glsl import glsl_sources

    g, d = _prec(cc.conv("nchw", 8, 64, 56, 56, 64, (3, 3), 1, 1, (1, 1, 1, 1)))
    plan, src = glsl_sources(d, g, "h100", abis=("bda",))
    assert plan.template == "gemm_mma.j2" and plan.ctx["SPLIT"] == 1
    assert "Cs[0]" not in src["bda"] and plan.workgroups[2] == 1


def test_split_fills_the_machine_beyond_the_rule():
    """ResNet-50 b8's 128 -> 128 3x3 convolution at 28x28 (128 x 6272 x 1152): the rule leaves it
    whole, 196 workgroups of 4 subgroups on the H100's 132 SMs; split-K adds slices until every
    SM has MMA_SPLIT_WARPS subgroups (H100 Vulkan f16, ResNet-50 b8 2.98 -> 2.78 ms)."""
    from halbench.compiler.codegen.glsl import glsl_sources
    from halbench.compiler.codegen.tuning import MMA_SPLIT_MIN_DEPTH, MMA_SPLIT_WARPS, tuning_for

    g, d = _prec(cc.conv("nchw", 8, 128, 28, 28, 128, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True))
    sp = kernels.gemm_split(d, g)
    assert sp is not None and sp.slices == 1 and sp.room > 1  # the rule: whole; scratch reserved
    plan, _ = glsl_sources(d, g, "h100", abis=("bda",))
    c, cus = plan.ctx, tuning_for("h100", "vulkan").compute_units
    groups = c["GX"] * c["GY"]
    assert plan.template == "gemm_mma.j2" and (c["BM"], c["BN"]) == (64, 64) and groups == 196
    assert 1 < c["SPLIT"] <= sp.room and c["DEPTH"] >= MMA_SPLIT_MIN_DEPTH
    assert groups * c["SPLIT"] * (plan.workgroup_size[0] // 32) >= MMA_SPLIT_WARPS * cus
    assert groups * (c["SPLIT"] - 1) * (plan.workgroup_size[0] // 32) < MMA_SPLIT_WARPS * cus  # no more than needed


@given(m=st.integers(1, 4096), n=st.integers(1, 8192), k=st.integers(16, 20000), batch=st.integers(1, 8),
       room=st.integers(1, 16), rule=st.integers(1, 16))
@settings(max_examples=300, deadline=None)
def test_split_slices_are_whole_steps_within_the_room(m, n, k, batch, room, rule):
    from halbench.compiler.codegen.tuning import (
        MMA_SPLIT_MIN_DEPTH,
        mma_fragment,
        mma_split_slices,
        mma_tiles,
        tuning_for,
    )

    t = tuning_for("h100", "vulkan")
    rule = min(rule, room)
    tiles = mma_tiles(t, mma_fragment(t, "f16"), m, n, k, batch * rule)
    s = mma_split_slices(t, tiles, m, n, k, batch, room, rule)
    assert 1 <= s <= max(room, 1)
    per = -(-k // s)
    depth = -(-per // tiles.bk) * tiles.bk if s > 1 else k
    assert -(-k // depth) == s  # no empty slice
    if s > max(rule, 1):
        assert depth >= MMA_SPLIT_MIN_DEPTH


def test_sm75_wmma_splits_and_compiles():
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import cuda_source, generate_cuda

    g, d = _prec(SPLIT_CASES["conv_odd"]())
    plan, src = cuda_source(d, g, "sm_75")
    assert plan.template == "gemm_mma.j2" and plan.ctx["SPLIT"] > 1 and "nvcuda::wmma" in src
    assert "atomicAdd" in src and "__threadfence();" in src
    _, ptx = generate_cuda(d, g, "sm_75")
    assert "wmma.mma.sync" in ptx.payload.decode()


# -- GPU -----------------------------------------------------------------------------------

def _against_oracle(dev, d, g, variant, label: str) -> None:
    from tests.compiler.test_codegen_vulkan import rel_err
    from tests.compiler.test_gemm_async import _run

    xs = cc.random_inputs(g, d, seed=5)
    want = cc.reference(g, d, xs)[0]  # the rounding oracle: f16-rounded operands, f32 sums
    (got,) = _run(dev, d, g, variant, xs, runs=2)  # twice: the counters must be back at zero
    assert np.isfinite(got).all()
    err = rel_err(got, want)
    assert err < 1e-5, f"{label}: {err:.2e} from the rounding oracle"


@pytest.mark.gpu
@pytest.mark.parametrize("abi", ["bda", "descriptors"])
@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_split_runs_on_vulkan_cooperative_matrix(case, abi):
    import halbench
    from halbench.compiler.codegen.glsl import generate_vulkan
    from halbench.compiler.codegen.tuning import mma_fragment, tuning_for
    from halbench.compiler.targets import target_from_device

    with halbench.create_device("vulkan://") as dev:
        target = target_from_device(dev.info, "vulkan")
        if mma_fragment(tuning_for(target, "vulkan"), "f16") is None:
            pytest.skip(f"no f16 cooperative matrix on {dev.info.name}")
        g, d = _prec(SPLIT_CASES[case]())
        (v,) = generate_vulkan(d, g, target, abi)
        assert "coopMatMulAdd" in v.source and v.workgroups[2] > 1
        _against_oracle(dev, d, g, v, f"vulkan/{case}/{abi}")


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_split_runs_as_sm75_wmma_ptx_on_cuda(case):
    import halbench
    from halbench.compiler.codegen.cuda import generate_cuda

    with halbench.create_device("cuda://") as dev:
        g, d = _prec(SPLIT_CASES[case]())
        (v,) = generate_cuda(d, g, "sm_75", formats=("ptx",))  # the driver JIT-compiles it
        assert "nvcuda::wmma" in v.source and v.workgroups[2] > 1
        _against_oracle(dev, d, g, v, f"cuda sm_75 ptx/{case}")


# -- what the bundle records ------------------------------------------------------------------

def test_bundle_records_each_matrix_gemm_kernel_and_tiles(tmp_path):
    """``inspect`` (and the manifest it reads, schema-checked) names the matrix kernel, its
    operand type, tiles, K slices and stages per variant; fp32 bundles record none."""
    pytest.importorskip("cuda.bindings.nvrtc")
    pytest.importorskip("iree.compiler", reason="the ONNX front end needs iree-base-compiler (the GPU machine has none)")
    import json

    from click.testing import CliRunner

    from halbench.bundle import read_bundle
    from halbench.cli import main
    from tests.compiler.test_precision import _onnx_gemm_conv

    model = _onnx_gemm_conv(tmp_path)
    out = {}
    for precision in ("f16", "fp32"):
        out[precision] = tmp_path / f"m-{precision}.hbx"
        r = CliRunner().invoke(main, ["compile", str(model), "-o", str(out[precision]), "--target-device",
                                      "vulkan,cuda", "--vulkan-target", "h100", "--cuda-target", "h100",
                                      "--vulkan-dispatch-abi", "bda", "--cuda-formats", "cubin",
                                      "--precision", precision])
        assert r.exit_code == 0, r.output
    conv = read_bundle(out["f16"]).manifest.executables[0]
    vk, cu = conv.variants
    assert vk.matrix["kernel"] == "coopmat" and vk.matrix["operands"] == "f16"
    assert cu.matrix["kernel"] == "mma.sync" and cu.matrix["stages"] >= 2
    for v in (vk, cu):
        x = v.matrix
        assert v.workgroups[2] == x.get("split", 1) and x["bm"] % 16 == 0 and x["bn"] % 8 == 0
    r = CliRunner().invoke(main, ["inspect", str(out["f16"])])
    assert r.exit_code == 0 and "coopmat f16 " in r.output and "mma.sync f16 " in r.output, r.output
    r = CliRunner().invoke(main, ["inspect", str(out["f16"]), "--format", "json"])
    doc = json.loads(r.output)
    assert doc["executables"][0]["variants"][0]["matrix"]["kernel"] == "coopmat"
    assert all(v.matrix is None for e in read_bundle(out["fp32"]).manifest.executables for v in e.variants)


def test_manifest_refuses_an_unknown_matrix_kernel():
    from pydantic import ValidationError

    from halbench.bundle.manifest_schema import MatrixChoiceDoc

    MatrixChoiceDoc.model_validate({"kernel": "wgmma", "operands": "bf16", "bm": 128, "bn": 256, "bk": 64})
    for bad in ({"kernel": "tensor-cores"}, {"operands": "fp8"}, {"bm": 0}, {"split": 65}, {"extra": 1}):
        with pytest.raises(ValidationError):
            MatrixChoiceDoc.model_validate({"kernel": "coopmat", "operands": "f16", "bm": 64, "bn": 64, "bk": 32,
                                            **bad})
