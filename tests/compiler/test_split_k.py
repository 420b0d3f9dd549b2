"""Split-K GEMMs: a small-output, deep matmul or convolution is split along K on GPUs; the last
slice of each tile adds the partial sums in slice order and runs the epilogue.

Checked on lavapipe (the real Vulkan driver) against onnxruntime: the result is right, the same
on every run (the per-tile counters go back to zero, the order of the sum is fixed), and the
bundle reserves the scratch range the kernels use. WebGPU has no device-scope fence, so its
variant runs unsplit over the same schedule. CUDA's source is compiled by NVRTC.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from halbench.bundle import read_bundle
from halbench.compiler.codegen.kernels import gemm_split
from halbench.compiler.codegen.tuning import split_k
from tests.compiler.helpers import device_or_skip, onnx_reference

RNG = np.random.default_rng(7)


def _model(tmp: Path, name: str, nodes, x_shape, inits) -> Path:
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp / f"{name}.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(m), path)
    return path


def _linear(tmp: Path, m: int, k: int, n: int) -> Path:
    """MatMul + bias + ReLU: the epilogue must run once, on the summed result."""
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    return _model(tmp, f"linear_{m}x{k}x{n}", nodes, [m, k], {"w": w, "b": b})


def _conv(tmp: Path) -> Path:
    """ResNet's last stage at batch 1: 7x7 pixels, 3x3 x 256 channels in, 128 out."""
    w = (RNG.standard_normal((128, 256, 3, 3)) * np.sqrt(2 / (256 * 9))).astype(np.float32)
    b = RNG.standard_normal(128).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    return _model(tmp, "conv_7x7", nodes, [1, 256, 7, 7], {"w": w, "b": b})


def _compile(path: Path, *apis: str) -> Path:
    from halbench.compiler.compile import CompileOptions, compile_model

    out = path.with_suffix(".hbx")
    compile_model(path, CompileOptions(target_devices=apis)).write(out)
    return out


def test_split_rule_keeps_big_and_shallow_gemms_whole() -> None:
    assert split_k(128, 384, 1536) == (6, 256)  # BERT's FFN down-projection at batch 1
    assert split_k(512, 49, 4608)[0] == 8  # ResNet-50's last 3x3 convolutions at batch 1
    assert split_k(1024, 384, 384) == (1, 384)  # enough tiles already
    assert split_k(128, 128, 64) == (1, 64)  # too shallow to split
    for m, n, k in [(37, 45, 700), (1, 1000, 2048), (64, 3136, 576)]:
        s, depth = split_k(m, n, k)
        assert s >= 2 and depth % 16 == 0 and (s - 1) * depth < k <= s * depth


@pytest.mark.parametrize("shape", [(37, 700, 45), (128, 1536, 384)])
def test_split_matmul_matches_onnxruntime_on_lavapipe_every_run(tmp_path: Path, shape) -> None:
    uri = device_or_skip("vulkan://")
    path = _linear(tmp_path, *shape)
    bundle = _compile(path, "vulkan", "local")
    man = read_bundle(bundle).manifest
    scratch = [b for b in man.buffers if b.kind == "scratch"]
    assert len(scratch) == 1
    step = man.functions[0].dispatches[0]
    assert any(r.buffer == scratch[0].id for r in step.bindings)
    feeds = {"x": RNG.standard_normal(shape[:2]).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    import halbench
    from halbench.runtime.module import Module

    for dev_uri in ("local-sync://", uri):
        with halbench.create_device(dev_uri) as dev, Module.load(bundle, dev) as mod:
            outs = [mod.invoke(None, feeds)[0] for _ in range(3)]
        np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
        for o in outs[1:]:  # counters back at zero, partials added in slice order
            np.testing.assert_array_equal(o, outs[0])


def test_split_convolution_matches_onnxruntime_on_lavapipe(tmp_path: Path) -> None:
    uri = device_or_skip("vulkan://")
    path = _conv(tmp_path)
    bundle = _compile(path, "vulkan")
    exe = read_bundle(bundle).manifest.executables[0]
    assert all(v.workgroups[2] > 1 for v in exe.variants)  # z = slices
    feeds = {"x": RNG.standard_normal((1, 256, 7, 7)).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    import halbench
    from halbench.runtime.module import Module

    with halbench.create_device(uri) as dev, Module.load(bundle, dev) as mod:
        out = mod.invoke(None, feeds)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_webgpu_runs_a_split_dispatch_unsplit(tmp_path: Path) -> None:
    uri = device_or_skip("webgpu://")
    path = _linear(tmp_path, 37, 700, 45)
    bundle = _compile(path, "webgpu")
    variant = read_bundle(bundle).manifest.executables[0].variants[0]
    assert variant.workgroups[2] == 1 and variant.entry.bindings == 5  # x, w, b, y + scratch
    feeds = {"x": RNG.standard_normal((37, 700)).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    import halbench
    from halbench.runtime.module import Module

    with halbench.create_device(uri) as dev, Module.load(bundle, dev) as mod:
        out = mod.invoke(None, feeds)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_cuda_source_of_a_split_gemm_compiles_with_nvrtc(tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.compile import CompileOptions, compile_model

    path = _linear(tmp_path, 128, 1536, 384)
    cm = compile_model(path, CompileOptions(target_devices=("cuda",), targets={"cuda": "h100"}))
    d = cm.graph.ops[0]
    sp = gemm_split(d, cm.graph)
    assert sp is not None and sp.slices == 6
    variants = cm.manifest.executables[0].variants
    assert {v.format for v in variants} == {"cuda-cubin-v1", "cuda-ptx-v1"}
    assert all(v.workgroups[2] == 6 for v in variants)
