"""What #17 added to the compiler, end to end through the CLI and the runtime, against
onnxruntime: frozen shape inputs, unsigned signatures, ONNX function expansion, sequential
reductions, scan / sort / scatter, 1-D and 3-D pools, empty tensors, old opsets, ``check`` and
``list-ops``. (The ONNX node tests in tests/conformance cover the op semantics case by case.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.compiler.helpers import device_or_skip, onnx_reference, run_local


def _halbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "halbench", *args], capture_output=True, text=True, timeout=300,
                          check=False)


def _save(tmp: Path, name: str, nodes, inputs, outputs, inits=(), opset: int = 18) -> Path:
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    path = tmp / f"{name}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _compile(path: Path, *extra: str, api: str = "local") -> Path:
    out = path.with_suffix(".hbx")
    r = _halbench("compile", str(path), "-o", str(out), "--target-device", api, *extra)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(params=["local-sync://", "vulkan://"])
def device(request) -> str:
    return device_or_skip(request.param)


def _api(device: str) -> str:
    return "vulkan" if device.startswith("vulkan") else "local"


def test_freeze_input_makes_a_reshape_shape_a_constant(tmp_path: Path, device: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("shape", TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path = _save(tmp_path, "rs", [helper.make_node("Reshape", ["x", "shape"], ["r"]),
                                  helper.make_node("Relu", ["r"], ["y"])], [x, s], [y])
    r = _halbench("compile", str(path), "-o", str(tmp_path / "no.hbx"))
    assert r.returncode != 0 and "--freeze-input" in r.stderr, r.stderr
    bundle = _compile(path, "--freeze-input", "shape=3xi64=3,2,2", api=_api(device))
    xv = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    (out,) = run_local(bundle, [xv], device)
    np.testing.assert_allclose(out, np.maximum(xv, 0).reshape(3, 2, 2))


def test_unsigned_inputs_and_outputs_keep_their_type(tmp_path: Path, device: str) -> None:
    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 5])
    b = helper.make_tensor_value_info("b", TensorProto.UINT8, [4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    path = _save(tmp_path, "u8", [helper.make_node("Add", ["a", "b"], ["y"])], [a, b], [y])
    bundle = _compile(path, api=_api(device))
    rng = np.random.default_rng(1)
    av, bv = (rng.integers(0, 256, (4, 5), dtype=np.uint8) for _ in range(2))
    (out,) = run_local(bundle, [av, bv], device)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, onnx_reference(path, {"a": av, "b": bv})[0])


def test_an_op_without_a_torch_mlir_pattern_runs_through_its_onnx_function(tmp_path: Path, device: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])
    s = helper.make_tensor("scale", TensorProto.FLOAT, [8], np.linspace(0.5, 1.5, 8).tolist())
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path = _save(tmp_path, "rms", [helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=-1)],
                 [x], [y], [s], opset=23)
    out_path = tmp_path / "rms.hbx"
    r = _halbench("compile", str(path), "-o", str(out_path), "--target-device", _api(device))
    assert r.returncode == 0, r.stderr
    assert "RMSNormalization" in r.stderr and "function bod" in r.stderr  # the note says what happened
    xv = np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)
    (out,) = run_local(out_path, [xv], device)
    ref = xv / np.sqrt(np.mean(xv * xv, axis=-1, keepdims=True) + 1e-5) * np.linspace(0.5, 1.5, 8)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_argmax_cumsum_topk_and_scatter(tmp_path: Path, device: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [3, 2])
    upd = helper.make_tensor_value_info("upd", TensorProto.FLOAT, [3, 2])
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in
            (("am", TensorProto.INT64), ("cs", TensorProto.FLOAT), ("tv", TensorProto.FLOAT),
             ("ti", TensorProto.INT64), ("sc", TensorProto.FLOAT))]
    k = helper.make_tensor("k", TensorProto.INT64, [1], [3])
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [1])
    nodes = [helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
             helper.make_node("CumSum", ["x", "axis"], ["cs"]),
             helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=1),
             helper.make_node("ScatterElements", ["x", "idx", "upd"], ["sc"], axis=1)]
    path = _save(tmp_path, "ordered", nodes, [x, idx, upd], outs, [k, axis])
    bundle = _compile(path, api=_api(device))
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((3, 7)).astype(np.float32),
             "idx": np.array([[0, 6], [2, 2], [5, 1]], np.int64),
             "upd": rng.standard_normal((3, 2)).astype(np.float32)}
    got = run_local(bundle, feeds, device)
    for o, r in zip(got, onnx_reference(path, feeds)):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)


def test_one_and_three_dimensional_pools_and_lrn(tmp_path: Path, device: str) -> None:
    x1 = helper.make_tensor_value_info("x1", TensorProto.FLOAT, [1, 3, 16])
    x3 = helper.make_tensor_value_info("x3", TensorProto.FLOAT, [1, 2, 6, 6, 6])
    x4 = helper.make_tensor_value_info("x4", TensorProto.FLOAT, [1, 8, 5, 5])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("p1", "p3", "lrn")]
    nodes = [helper.make_node("AveragePool", ["x1"], ["p1"], kernel_shape=[3], strides=[2]),
             helper.make_node("AveragePool", ["x3"], ["p3"], kernel_shape=[2, 2, 2]),
             helper.make_node("LRN", ["x4"], ["lrn"], size=3, alpha=1e-4, beta=0.75, bias=1.0)]
    path = _save(tmp_path, "pools", nodes, [x1, x3, x4], outs)
    bundle = _compile(path, api=_api(device))
    rng = np.random.default_rng(4)
    feeds = {"x1": rng.standard_normal((1, 3, 16)).astype(np.float32),
             "x3": rng.standard_normal((1, 2, 6, 6, 6)).astype(np.float32),
             "x4": rng.standard_normal((1, 8, 5, 5)).astype(np.float32)}
    for o, r in zip(run_local(bundle, feeds, device), onnx_reference(path, feeds)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5)


def test_an_empty_input_gives_the_empty_and_identity_results(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("s", "r")]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0),
             helper.make_node("Relu", ["x"], ["r"])]
    path = _save(tmp_path, "empty", nodes, [x], outs, [axes])
    bundle = _compile(path, "--input-shape", "x=0x4")
    s, r = run_local(bundle, [np.zeros((0, 4), np.float32)])
    np.testing.assert_array_equal(s, np.zeros(4, np.float32))
    assert r.shape == (0, 4)


def test_an_opset_6_model_is_upgraded_with_a_note(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path = _save(tmp_path, "old", [helper.make_node("Relu", ["x"], ["y"])], [x], [y], opset=6)
    r = _halbench("compile", str(path), "-o", str(tmp_path / "old.hbx"))
    assert r.returncode == 0, r.stderr
    assert "opset 6 was upgraded" in r.stderr


def test_check_names_the_node_it_cannot_compile(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 0.5, 0.5])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Resize", ["a", "", "scales"], ["b"], mode="nearest", antialias=1, name="shrink"),
             helper.make_node("Relu", ["b"], ["c"], name="last"),
             helper.make_node("Relu", ["x"], ["d"], name="again"),
             helper.make_node("Sum", ["c", "c"], ["y0"], name="sum"),
             helper.make_node("Relu", ["y0"], ["y"], name="out")]
    path = _save(tmp_path, "chk", nodes, [x], [y, helper.make_tensor_value_info("d", TensorProto.FLOAT, None)],
                 [scales], opset=19)
    r = _halbench("check", str(path))
    assert r.returncode == 1
    assert "shrink (Resize, opset 19)" in r.stdout and "1 cannot be compiled" in r.stdout, r.stdout
    r = _halbench("check", str(path), "--format", "json")
    data = json.loads(r.stdout)
    assert [n["ok"] for n in data["nodes"]] == [True, False, True, True, True, True]
    assert data["nodes"][3]["same_as"] == "first"  # one signature is compiled once


def test_list_ops_shows_linalg_ops_and_measured_onnx_support() -> None:
    r = _halbench("list-ops", "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert "linalg.conv_2d_nchw_fchw" in data["linalg"]["top-level"]
    assert "tm_tensor.scatter" in data["linalg"]["top-level"]
    ops = data["onnx"]["ops"]
    assert ops["Conv"]["local-sync://"][0] > 0  # measured passes, from the conformance run
    r = _halbench("list-ops")
    assert "ONNX backend node tests" in r.stdout and "Conv" in r.stdout


def _classic_cnn(tmp: Path) -> onnx.ModelProto:
    """An old-style zoo CNN block: IR version 3, opset 8, weights also listed as graph inputs."""
    from onnx import numpy_helper

    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "B")
    x = helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 16, 16])
    wi = helper.make_tensor_value_info("W", TensorProto.FLOAT, [8, 3, 3, 3])
    bi = helper.make_tensor_value_info("B", TensorProto.FLOAT, [8])
    y = helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 8, 7, 7])
    nodes = [helper.make_node("Conv", ["data", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("LRN", ["r"], ["n"], size=5, alpha=1e-4, beta=0.75, bias=1.0),
             helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Softmax", ["p"], ["prob"])]
    m = helper.make_model(helper.make_graph(nodes, "old", [x, wi, bi], [y], [w, b]),
                          opset_imports=[helper.make_opsetid("", 8)])
    m.ir_version = 3
    return m


def test_an_ir3_opset8_model_with_weights_among_its_inputs_keeps_its_shapes(tmp_path: Path, device: str) -> None:
    path = tmp_path / "old_cnn.onnx"
    onnx.save(_classic_cnn(tmp_path), path)
    bundle = _compile(path, api=_api(device))
    xv = np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)
    (out,) = run_local(bundle, [xv], device)
    np.testing.assert_allclose(out, onnx_reference(path, {"data": xv})[0], rtol=1e-4, atol=1e-6)


def test_weights_in_an_external_data_file_beside_the_model_load(tmp_path: Path) -> None:
    m = _classic_cnn(tmp_path)
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin",
                    size_threshold=0)
    assert (tmp_path / "ext.bin").stat().st_size > 800
    bundle = _compile(path)
    xv = np.random.default_rng(7).standard_normal((1, 3, 16, 16)).astype(np.float32)
    (out,) = run_local(bundle, [xv])
    np.testing.assert_allclose(out, onnx_reference(path, {"data": xv})[0], rtol=1e-4, atol=1e-6)
