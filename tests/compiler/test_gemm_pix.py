"""The register-staged GEMM's im2col split on Vulkan (gemm.j2 PIX, kernels._portable_im2col).

An NCHW convolution's B[k][n] is read through the pixel of each owned column (decomposed once
before the K loop) and the filter tap of each step, not hb_im2col per element and step. Here:
the GLSL source takes that path (padding test and packed coordinates only where a tap can reach
the padding), HIP / WGSL / CUDA sm_75 keep hb_im2col, and the kernels match the NumPy oracle on
lavapipe for strided, padded, dilated, grouped, 1x1 / 3x3 / 7x7 and split-K convolutions, under
forced tiles where a thread's elements sit in several columns and where the last element round
is partial; two ONNX convolutions also against onnxruntime.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from halbench.compiler.codegen.glsl import generate_vulkan, glsl_sources
from halbench.compiler.codegen.tuning import GemmConfig, tuning_for
from tests.compiler import codegen_cases as cc
from tests.compiler.helpers import forced_gemm_tuning
from tests.compiler.test_codegen_vulkan import RTOL, rel_err
from tests.compiler.test_gemm_async import _run

CASES = {
    "conv3x3_pad_bias": lambda: cc.conv("nchw", 2, 8, 9, 11, 12, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
    "conv7x7_s2_p3": lambda: cc.conv("nchw", 2, 3, 20, 18, 8, (7, 7), 2, 1, (3, 3, 3, 3)),
    "conv3x3_s2_asym": lambda: cc.conv("nchw", 1, 5, 13, 11, 7, (3, 3), 2, 1, (1, 0, 1, 1)),
    "conv3x3_s2_unpadded": lambda: cc.conv("nchw", 1, 4, 12, 11, 6, (3, 3), 2),
    "conv_dil": lambda: cc.conv("nchw", 1, 3, 12, 12, 6, (3, 3), 1, 2, (2, 1, 2, 1)),
    "conv1x1": lambda: cc.conv("nchw", 2, 16, 7, 7, 20, (1, 1), epilogue=True),
    "conv1x1_s2": lambda: cc.conv("nchw", 2, 16, 8, 8, 12, (1, 1), 2),
    "conv1x1_grouped": lambda: cc.conv("ngchw", 2, 8, 4, 6, 12, (1, 1), groups=2),
    "conv3x3_grouped": lambda: cc.conv("ngchw", 2, 3, 8, 8, 4, (3, 3), 1, 1, (1, 1, 1, 1), groups=2),
    "conv_split_k": lambda: cc.conv("nchw", 1, 256, 7, 7, 64, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
}
#: where a tap can reach the padding: the padding test and the packed (row, column) register
PADDED = {"conv3x3_pad_bias", "conv7x7_s2_p3", "conv3x3_s2_asym", "conv_dil", "conv3x3_grouped", "conv_split_k"}
#: a 1x1 stride-1 unpadded convolution whose images have whole 4s of pixels: on wide thread tiles
#: B is read in runs of 4 along N (kernels._glsl_staging's VB), not through the pixel and tap
RUNS_OF_4 = {"conv1x1_grouped"}
#: forced tiles (None: the rule's): 32 threads on 64 columns (a thread's elements in two
#: columns), a partial last element round (96 threads, 32 x 8 elements of B), runs of 4
CONFIGS = {None: None, "32x64x8": GemmConfig(32, 64, 8, 8, 8), "48x32x8": GemmConfig(48, 32, 8, 4, 4),
           "64x64x16runs": GemmConfig(64, 64, 16, 8, 4, 1, True)}


def _tuning(d, g, config: str | None):
    t = tuning_for("llvmpipe", "vulkan")
    return t if CONFIGS[config] is None else forced_gemm_tuning(t, d, g, CONFIGS[config])


@pytest.mark.parametrize("case", sorted(CASES))
def test_glsl_reads_the_pixel_once_and_the_tap_per_step(case):
    g, d = CASES[case]()
    plan, srcs = glsl_sources(d, g, "llvmpipe", ("bda",))
    src = srcs["bda"]
    assert plan.template == "gemm.j2"
    if plan.ctx["VB"] is not None:
        assert case in RUNS_OF_4 and plan.ctx["PIX"] is None
        assert "hb_im2col" not in src and "hb_xb" not in src
        return
    assert plan.ctx["PIX"] is not None
    assert "hb_im2col" not in src and "int hb_xb0 = 0;" in src
    assert ("uint(ih) <" in src) == (case in PADDED) == ("hb_xq0" in src), case
    # the pixel decomposition (n / OH*OW ...) only before the K loop, the tap's inside it
    head, body = src.split("for (int k0", 1)
    assert "int nn = n /" in head and "int nn = n /" not in body
    assert "int o = xb + ci *" in body


def test_a_thread_in_several_columns_decomposes_each_once():
    g, d = CASES["conv3x3_pad_bias"]()
    plan, srcs = glsl_sources(d, g, tuning=_tuning(d, g, "32x64x8"), abis=("bda",))
    # 32 threads over 64 columns: element e in column (lid + 32 e) % 64, two distinct ones
    assert plan.ctx["PIXN"] == 2 and plan.ctx["WG"] == 32
    src = srcs["bda"]
    assert "int hb_xb1 = 0;" in src and "int hb_xb2" not in src
    assert "int xb = hb_xb1;" in src and "int xb = hb_xb0;" in src


def test_other_languages_keep_hb_im2col():
    """HIP, WGSL and CUDA sm_75 read the im2col view as before (hb_im2col per element)."""
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.compiler.codegen.hip import hip_source
    from halbench.compiler.codegen.wgsl import wgsl_source

    g, d = CASES["conv3x3_pad_bias"]()
    t75 = dataclasses.replace(tuning_for("sm_90", "cuda"), arch="sm_75", name="sm_75")
    for plan, src in (cuda_source(d, g, tuning=t75), hip_source(d, g, "gfx942"), wgsl_source(d, g)):
        assert plan.ctx["PIX"] is None
        assert "hb_im2col" in src and "hb_xb" not in src


def test_coordinates_beyond_16_bits_fall_back_to_hb_im2col():
    from halbench.compiler.codegen.kernels import _portable_im2col

    args = {"nb": 64, "g_off": "", "kk": (3, 3), "st": [1, 1], "dl": [1, 1], "pad": "0.0f", "load": "B0[o]"}
    assert _portable_im2col(hw=(8, 8), ohw=(8, 8), pads=[1, 1, 1, 1], **args)["packed"]
    assert _portable_im2col(hw=(8, 40000), ohw=(8, 40000), pads=[1, 1, 1, 1], **args) is None


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_numpy_on_lavapipe(vk, case, config, monkeypatch):
    g, d = CASES[case]()
    t = _tuning(d, g, config)
    plan, _ = glsl_sources(d, g, tuning=t, abis=("bda",))
    assert (plan.ctx["PIX"] is not None) == (plan.ctx["VB"] is None)
    assert plan.ctx["VB"] is None or case in RUNS_OF_4
    if config is not None:
        assert plan.gemm["source"] == "tuned", plan.gemm
    if case == "conv_split_k":
        assert plan.ctx["SPLIT"] > 1
    matches_numpy_on_lavapipe(vk, d, g, t, monkeypatch, 5, f"{case}/{config}")


def matches_numpy_on_lavapipe(vk, d, g, t, monkeypatch, seed: int, what: str) -> None:
    """Dispatch ``d`` compiled for lavapipe with tuning ``t`` (its forced tiles) writes every
    output and matches the NumPy reference."""
    from halbench.compiler.codegen import glsl

    monkeypatch.setattr(glsl, "tuning_for", lambda *a, **k: t)  # generate_vulkan with the forced tiles
    (variant,) = generate_vulkan(d, g, "llvmpipe", "bda")
    inputs = cc.random_inputs(g, d, seed=seed)
    ref = cc.reference(g, d, inputs)
    for o, r in zip(_run(vk, d, g, variant, inputs), ref):
        assert np.isfinite(o).all(), f"{what}: unwritten outputs"
        assert rel_err(o, r) <= RTOL, f"{what}: rel err {rel_err(o, r):.2e}"


@pytest.mark.parametrize("shape", [
    # (n, c, h, w, f, k, stride, pad, dilation, group): ResNet's stem, a split-K 3x3, a grouped one
    (2, 3, 30, 28, 16, 7, 2, 3, 1, 1),
    (1, 256, 7, 7, 64, 3, 1, 1, 1, 1),
    (2, 8, 11, 9, 12, 3, 2, 2, 2, 2),
])
def test_onnx_convolutions_match_onnxruntime_on_lavapipe(tmp_path: Path, shape) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.compiler.helpers import compile_for, device_or_skip, onnx_reference, run_local

    pytest.importorskip("onnxruntime")
    dev = device_or_skip("vulkan://")
    n, c, h, w, f, k, stride, pad, dil, group = shape
    rng = np.random.default_rng(sum(shape))
    wt = numpy_helper.from_array(rng.standard_normal((f, c // group, k, k)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(f).astype(np.float32), "B")
    node = helper.make_node("Conv", ["x", "W", "B"], ["y"], strides=[stride] * 2, pads=[pad] * 4,
                            dilations=[dil] * 2, group=group)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [wt, bias])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}
    bundle = compile_for("vulkan", path, tmp_path)
    (out,), (ref,) = run_local(bundle, feeds, dev), onnx_reference(path, feeds)
    assert out.shape == ref.shape and rel_err(out, ref) <= RTOL
