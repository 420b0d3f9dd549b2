"""CUDA codegen: every case compiles to cubin for sm_80 and sm_90 and to PTX through NVRTC (CI,
no GPU); on a GPU (``--gpu``), each runs on cuda:// and matches the local oracle within 1e-4."""

from __future__ import annotations

import re

import numpy as np
import pytest

from halbench.compiler.codegen.cuda import cuda_source, generate_cuda
from tests.compiler import codegen_cases as cc
from tests.compiler.test_codegen_vulkan import RTOL, rel_err, run_variant

pytest.importorskip("cuda.bindings.nvrtc")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(cc.CASES))
def test_compiles_to_cubin_and_ptx(case, arch):
    from halbench.drivers.cuda.cubin import cubin_arch

    g, d = cc.build(case)
    cubin, ptx = generate_cuda(d, g, arch)
    assert (cubin.format, ptx.format) == ("cuda-cubin-v1", "cuda-ptx-v1")
    assert cubin_arch(cubin.payload) == arch and cubin.target == arch
    assert re.search(rf"^\.target {arch}\b", ptx.payload.decode(), re.MULTILINE)
    assert re.search(r"^\.visible \.entry main\(", ptx.payload.decode(), re.MULTILINE)
    from halbench.compiler.codegen.kernels import uses_extract

    assert cubin.entry.bindings == len(d.inputs) + len(d.outputs) + uses_extract(d) and cubin.entry.constants == 0
    assert cubin.entry == ptx.entry and cubin.workgroups == ptx.workgroups
    # sm_90+: the kernel waits for its predecessors itself, and its entry point says so (the driver
    # links it by a programmatic edge); before sm_90 neither
    _, src = cuda_source(d, g, arch)
    assert ("griddepcontrol.wait" in src) == cubin.entry.dependent_launch == (arch == "sm_90")


def test_same_plan_as_vulkan():
    """One kernel plan feeds both APIs: same workgroup size and count for the same target."""
    from halbench.compiler.codegen.glsl import glsl_sources

    g, d = cc.build("conv_nchw_s2_pad_bias")
    plan_c, src = cuda_source(d, g, "sm_90")
    plan_v, _ = glsl_sources(d, g, "h100")
    # sm_90 stages the tiles through cp.async (test_gemm_async.py), reading the im2col view by tap
    assert "__shared__ __align__(16) float As" in src and "hb_tap(" in src and "cp.async" in src
    assert plan_c.template == plan_v.template == "gemm.j2"


@pytest.fixture(scope="module")
def cu():
    import halbench

    with halbench.create_device("cuda://") as dev:
        yield dev


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["cubin", "ptx"])
@pytest.mark.parametrize("case", sorted(cc.CASES))
def test_runs_on_cuda(cu, case, fmt):
    g, d = cc.build(case)
    arch = cu.info.identity.arch
    inputs = cc.random_inputs(g, d)
    ref = cc.reference(g, d, inputs)
    (variant,) = generate_cuda(d, g, arch, formats=(fmt,))
    from halbench.compiler.codegen.kernels import uses_extract

    status = uses_extract(d)  # a gather takes its bounds status slot as one more binding
    outs = run_variant(cu, variant, inputs, [(g.types[v].shape, np.float32) for v in d.outputs]
                       + [((4,), np.uint32)] * status)
    if status:
        assert outs.pop().tolist() == [0, 0, 0, 0]  # in bounds: nothing recorded
    for o, r in zip(outs, ref):
        assert rel_err(o, r) <= RTOL, f"{case}/{fmt}: rel err {rel_err(o, r):.2e}"


@pytest.mark.parametrize("case", ["elementwise_vec4", "reduce_row_long", "conv_nhwc_hwcf", "matmul_big"])
def test_hip_source_is_the_cuda_kernel(case):
    """HIP shares the CUDA kernel text; only the header differs (hipRTC itself needs ROCm)."""
    from halbench.compiler.codegen.hip import HIP_HEADER, hip_source

    g, d = cc.build(case)
    _, hip = hip_source(d, g, "gfx942")
    _, cuda = cuda_source(d, g, "sm_90")
    assert HIP_HEADER in hip and "cuda_fp16" not in hip
    assert hip.split("// ", 1)[1] == cuda.split("// ", 1)[1] or "hb_main(" in hip


@pytest.mark.parametrize(("target", "early"), [("h100", True), ("a100", False)])
def test_dependent_launch_is_recorded_in_the_bundle(target, early, tmp_path):
    """The entry points of an sm_90+ bundle say that their kernels wait for their predecessors
    (the manifest keeps it through a write and a read); an sm_80 bundle's do not."""
    import onnx

    from halbench.bundle import read_bundle
    from halbench.compiler import CompileOptions, compile_model
    from tests.compiler.onnx_cases import CASES

    model, _ = CASES["conv_relu6"](np.random.default_rng(0))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    compile_model(path, CompileOptions(target_devices=("cuda",), targets={"cuda": target})).write(tmp_path / "m.hbx")
    flags = {v.entry.dependent_launch for e in read_bundle(tmp_path / "m.hbx").manifest.executables for v in e.variants}
    assert flags == {early}
