"""int8 on Vulkan with glslang 13 (no GL_EXT_integer_dot_product):

- MatMulInteger models compile and match the exact definition (int64 NumPy) on lavapipe (8-bit storage,
  32-bit integer arithmetic);
- the `dot-int8` micro (peak/dot/int8 of the device-peaks suite) runs on Vulkan, through SPIR-V's
  OpSDot where the device has shaderIntegerDotProduct and through the unpack-and-multiply
  emulation where it has not, both checked exactly against the host's model of the kernel.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from halbench.bench.micro import dot_int8_expected, prepare_micro
from halbench.compiler.backends import backend
from halbench.compiler.backends.glslang import spirv_requirements


@pytest.fixture(scope="module")
def lavapipe():
    import halbench

    try:
        dev = halbench.create_device("vulkan://")
    except Exception as e:  # noqa: BLE001 - no Vulkan here: skip with the reason
        pytest.skip(f"no Vulkan device: {e}")
    yield dev
    dev.close()


# -- MatMulInteger ------------------------------------------------------------------------------

_NP = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}


def _matmul_integer(path, m, k, n, a_type, b_type, b_zp_per_column: bool):
    rng = np.random.default_rng(7)
    info = np.iinfo(_NP[b_type])
    w = rng.integers(info.min, info.max, size=(k, n), endpoint=True).astype(_NP[b_type])
    b_zp = (rng.integers(-3, 4, size=n) + (3 if b_type == TensorProto.UINT8 else 0)).astype(_NP[b_type])
    inits = [helper.make_tensor("w", b_type, [k, n], w.tobytes(), raw=True),
             helper.make_tensor("a_zp", a_type, [], [5 if a_type == TensorProto.UINT8 else -4]),
             helper.make_tensor("b_zp", b_type, [n] if b_zp_per_column else [],
                                b_zp.tolist() if b_zp_per_column else [int(b_zp[0])])]
    node = helper.make_node("MatMulInteger", ["a", "w", "a_zp", "b_zp"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", a_type, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


def _exact(path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """MatMulInteger as the ONNX specification defines it, in int64: (A - a_zp) x (B - b_zp).
    The reference: onnxruntime's x86 u8 x s8 kernel on CPUs without VNNI (AVX2's vpmaddubsw)
    saturates pairs of products to int16 and gives other numbers (seen on this CI's machine,
    onnxruntime 1.24-1.32); u8 x u8 and s8 x s8 it computes exactly."""
    from onnx import numpy_helper

    model = onnx.load(path)
    vals = {i.name: numpy_helper.to_array(i).astype(np.int64) for i in model.graph.initializer}
    vals.update({k: v.astype(np.int64) for k, v in feeds.items()})
    (node,) = model.graph.node
    a, b, azp, bzp = (vals[n] for n in node.input)
    return ((a - azp) @ (b - bzp)).astype(np.int32)


@pytest.mark.parametrize("a_type, b_type", [(TensorProto.UINT8, TensorProto.INT8),
                                            (TensorProto.INT8, TensorProto.INT8),
                                            (TensorProto.UINT8, TensorProto.UINT8)],
                         ids=["u8xi8", "i8xi8", "u8xu8"])
@pytest.mark.parametrize("shape", [(5, 37, 7), (64, 256, 96)], ids=["odd", "tiled"])
def test_matmul_integer_on_vulkan_matches_onnxruntime(lavapipe, tmp_path, a_type, b_type, shape):
    import onnxruntime as ort

    from halbench.compiler import CompileOptions, compile_model
    from halbench.runtime.module import Module

    m, k, n = shape
    path = tmp_path / "mmi.onnx"
    _matmul_integer(path, m, k, n, a_type, b_type, b_zp_per_column=(shape[0] == 64))
    info = np.iinfo(_NP[a_type])
    a = np.random.default_rng(1).integers(info.min, info.max, size=(m, k), endpoint=True).astype(_NP[a_type])
    ref = _exact(path, {"a": a})
    (ort_out,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"a": a})
    if not np.array_equal(ort_out, ref):  # only where onnxruntime's u8 x s8 kernel saturates
        assert a_type == TensorProto.UINT8 and b_type == TensorProto.INT8
    for target in ({}, {"vulkan": "llvmpipe"}):
        cm = compile_model(path, CompileOptions(target_devices=("vulkan",), targets=target))
        cm.write(tmp_path / "mmi.hbx")
        mod = Module.load(str(tmp_path / "mmi.hbx"), lavapipe)
        try:
            (out,) = mod.invoke(None, {"a": a})
        finally:
            mod.close()
        assert out.dtype == np.int32 and np.array_equal(out, ref), target


# -- the dot-int8 micro ---------------------------------------------------------------------------

def test_dot_int8_micro_runs_on_vulkan(lavapipe):
    mb = prepare_micro("dot-int8", lavapipe, {"workgroups": 8, "iters": 257})
    try:
        for _ in range(2):
            sample = mb.run()
            assert sample.device_ms > 0
        check = mb.check()
        assert check["passed"] and check["max_abs_error"] == 0.0, check
        native = bool(lavapipe.info.features.flags.get("shaderIntegerDotProduct"))
        assert ("OpSDot" if native else "emulated") in check["note"]
        assert mb.metrics["flops"] == 8 * 256 * 257 * 128
    finally:
        mb.close()


def _run_kernel(dev, mk, groups: int, iters: int) -> np.ndarray:
    out = dev.allocate(groups * mk.workgroup_size * 4)
    try:
        exe = dev.load_executable(mk.binary)
        entry = next(iter(exe.entries))
        cb = dev.command_buffer()
        cb.dispatch(exe, entry, (groups, 1, 1), [out], [iters])
        cb.end()
        dev.submit(cb).wait(timeout_s=60)
        return out.read(np.float32)
    finally:
        out.free()


@pytest.mark.parametrize("native", [True, False], ids=["opsdot", "emulated"])
@pytest.mark.parametrize("fmt", ["vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1"])
def test_both_int8_dot_paths_are_exact(lavapipe, native, fmt):
    if native and not lavapipe.info.features.flags.get("shaderIntegerDotProduct"):
        pytest.skip(f"{lavapipe.info.name} has no shaderIntegerDotProduct")
    if fmt not in lavapipe.formats:
        pytest.skip(f"{lavapipe.uri} does not load {fmt}")
    flags = dict(lavapipe.info.features.flags, shaderIntegerDotProduct=native)
    info = dataclasses.replace(lavapipe.info, features=dataclasses.replace(lavapipe.info.features, flags=flags))
    mk = backend("vulkan").micro_binary("dot_int8", fmt, info)
    # The native module needs the feature (a device without it would refuse it); the emulation not.
    assert ("shaderIntegerDotProduct" in spirv_requirements(mk.binary.data)) is native
    got = _run_kernel(lavapipe, mk, groups=3, iters=129)
    assert np.array_equal(got, np.resize(dot_int8_expected(129), got.shape))


def test_the_host_model_is_not_periodic():
    """A kernel that ran too few iterations (or none) must not pass the exact check."""
    seen = {dot_int8_expected(i).tobytes() for i in (0, 1, 2, 4095)}
    assert dot_int8_expected(4096).tobytes() not in seen


def test_dynamic_quantized_batched_matmul_on_vulkan(lavapipe, tmp_path):
    """The pattern quantized exports use: DynamicQuantizeLinear -> MatMulInteger on a 3-D input."""
    import onnxruntime as ort

    from halbench.compiler import CompileOptions, compile_model
    from halbench.runtime.module import Module

    rng = np.random.default_rng(5)
    w = rng.integers(-128, 127, size=(40, 24), endpoint=True).astype(np.int8)
    inits = [helper.make_tensor("w", TensorProto.INT8, [40, 24], w.tobytes(), raw=True),
             helper.make_tensor("b_zp", TensorProto.INT8, [24], rng.integers(-3, 4, 24).tolist())]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["a", "scale", "a_zp"]),
             helper.make_node("MatMulInteger", ["a", "w", "a_zp", "b_zp"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 6, 24])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "dq.onnx")
    x = rng.standard_normal((2, 6, 40)).astype(np.float32)
    # onnxruntime quantizes x (DynamicQuantizeLinear); the u8 x s8 product is computed exactly
    # here (see _exact: onnxruntime's own saturates on CPUs without VNNI)
    dq = helper.make_model(helper.make_graph(
        nodes[:1], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 40])],
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 6, 40]),
         helper.make_tensor_value_info("a_zp", TensorProto.UINT8, [])]), opset_imports=[helper.make_opsetid("", 13)])
    dq.ir_version = 8
    a, a_zp = ort.InferenceSession(dq.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["a", "a_zp"], {"x": x})
    b_zp = np.array(inits[1].int32_data, dtype=np.int64)
    ref = ((a.astype(np.int64) - int(a_zp)) @ (w.astype(np.int64) - b_zp)).astype(np.int32)
    compile_model(tmp_path / "dq.onnx", CompileOptions(target_devices=("vulkan",))).write(tmp_path / "dq.hbx")
    mod = Module.load(str(tmp_path / "dq.hbx"), lavapipe)
    try:
        (out,) = mod.invoke(None, {"x": x})
    finally:
        mod.close()
    assert np.array_equal(out, ref)
