"""Import paths and bad input: old opsets, initializers as inputs, dynamic dims and overrides,
MLIR text (inline and dense_resource weights), and one clear error line for what is wrong."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from halbench.compiler import CompileOptions, compile_model
from halbench.errors import CompileError, UserError
from tests.compiler.helpers import compile_and_run, onnx_reference, rel_err, run_local
from tests.compiler.onnx_cases import _rand

pytest.importorskip("iree.compiler")
pytest.importorskip("onnxruntime")


def _conv_softmax(opset: int, dims: list, weights_as_inputs: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(_rand(rng, (4, 3, 3, 3)), "W")
    fc = numpy_helper.from_array(_rand(rng, (4 * 6 * 6, 5)), "FC")
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "FC"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"], axis=1)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    if weights_as_inputs:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in (w, fc, shape)]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [w, fc, shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7 if opset >= 12 else 5
    return m


def _check(tmp_path: Path, model: onnx.ModelProto, x: np.ndarray, **options) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    ref = onnx_reference(path, {"x": x})
    out, _ = compile_and_run(path, {"x": x}, tmp_path, **options)
    assert rel_err(out[0], ref[0]) <= 1e-4


@pytest.mark.parametrize("opset", [9, 11, 13, 17])
def test_opsets(opset: int, tmp_path: Path) -> None:
    _check(tmp_path, _conv_softmax(opset, [1, 3, 6, 6]), _rand(np.random.default_rng(2), (1, 3, 6, 6)))


def test_initializers_listed_as_inputs_are_weights(tmp_path: Path) -> None:
    model = _conv_softmax(9, [1, 3, 6, 6], weights_as_inputs=True)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    cm = compile_model(path)
    assert [t.name for t in cm.manifest.functions[0].inputs] == ["x"]
    assert {"W", "FC"} <= {w.name for w in cm.manifest.weights}


def test_dynamic_dim_is_refused_naming_the_input(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_conv_softmax(17, ["batch", 3, 6, 6]), path)
    with pytest.raises(UserError, match="input 'x' has a dynamic dimension 0"):
        compile_model(path)


def test_negative_declared_dims_are_refused_naming_the_value(tmp_path: Path) -> None:
    """torch-mlir's importer failed on them naming only an MLIR type (`!torch.vtensor<[-3,4],f32>`)."""
    path = tmp_path / "m.onnx"
    m = _conv_softmax(17, [-2, 3, 6, 6])
    onnx.save(m, path)
    with pytest.raises(UserError, match=r"input 'x' declares dimension 0 as -2, which is no size: .*"
                                        r"--input-shape x="):
        compile_model(path)
    x = _rand(np.random.default_rng(3), (1, 3, 6, 6))
    _check(tmp_path, m, x, input_shapes={"x": (1, 3, 6, 6)})  # the way out works
    m = _conv_softmax(17, [1, 3, 6, 6])
    dims = m.graph.output[0].type.tensor_type.shape.dim
    del dims[:]
    dims.add().dim_value = -3
    onnx.save(m, path)
    with pytest.raises(UserError, match=rf"output '{m.graph.output[0].name}' declares dimension 0 as -3, "
                                        r"which is no size: the model is not valid ONNX; fix or remove"):
        compile_model(path)


@pytest.mark.parametrize("batch", [1, 3])
def test_input_shape_override(batch: int, tmp_path: Path) -> None:
    x = _rand(np.random.default_rng(3), (batch, 3, 6, 6))
    _check(tmp_path, _conv_softmax(17, ["batch", 3, 6, 6]), x, input_shapes={"x": (batch, 3, 6, 6)})


def test_input_shape_for_unknown_input(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_conv_softmax(17, [1, 3, 6, 6]), path)
    with pytest.raises(UserError, match="model's inputs are"):
        compile_model(path, CompileOptions(input_shapes={"nope": (1, 2)}))


@pytest.mark.parametrize("k", [8, 300])   # 300x300 stays a dense_resource blob in the text
def test_mlir_text_input(k: int, tmp_path: Path) -> None:
    from halbench.compiler.frontend import load

    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(_rand(rng, (k, k)), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, k])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    (tmp_path / "m.mlir").write_text(str(load(tmp_path / "m.onnx").module))
    x = _rand(rng, (2, k))
    cm = compile_model(tmp_path / "m.mlir")
    cm.write(tmp_path / "m.hbx")
    out = run_local(tmp_path / "m.hbx", [x])
    assert rel_err(out[0], onnx_reference(tmp_path / "m.onnx", {"x": x})[0]) <= 1e-4


def test_malformed_onnx(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage-not-a-protobuf\xff\xff")
    with pytest.raises(UserError, match="not a valid ONNX model"):
        compile_model(tmp_path / "bad.onnx")


def test_malformed_mlir(tmp_path: Path) -> None:
    (tmp_path / "bad.mlir").write_text("func.func @f(%a: tensor<2xf32>) { this is not mlir }")
    with pytest.raises(UserError, match="not valid MLIR"):
        compile_model(tmp_path / "bad.mlir")


def test_unsupported_op_names_op_and_lists_supported(tmp_path: Path) -> None:
    (tmp_path / "u.mlir").write_text("""
func.func @main(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %e = tensor.empty() : tensor<3x2xf32>
  %s = linalg.softmax dimension(1) ins(%x : tensor<2x3xf32>) outs(%x : tensor<2x3xf32>) -> tensor<2x3xf32>
  %t = linalg.transpose ins(%s : tensor<2x3xf32>) outs(%e : tensor<3x2xf32>) permutation = [1, 0]
  return %t : tensor<3x2xf32>
}""")
    with pytest.raises(CompileError) as e:
        compile_model(tmp_path / "u.mlir")
    msg = str(e.value)
    assert "linalg.softmax" in msg and "halbench list-ops" in msg
    assert "\n" not in msg


def test_missing_file_and_wrong_suffix(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        compile_model(tmp_path / "none.onnx")
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(UserError, match="expected an .onnx or .mlir"):
        compile_model(tmp_path / "m.txt")


def _wrap_pad(shape: list[int], pads: list[int], axes: list[int] | None = None, after: bool = False) -> onnx.ModelProto:
    """x -> Pad(mode wrap, constant pads [and axes]) [-> Relu, so the pad is not the graph's last node]."""
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    ins = ["x", "pads"]
    if axes is not None:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        ins += ["", "axes"]
    nodes = [helper.make_node("Pad", ins, ["p" if after else "y"], mode="wrap")]
    if after:
        nodes.append(helper.make_node("Relu", ["p"], ["y"]))
    g = helper.make_graph(nodes, "wrap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@pytest.mark.parametrize("shape,pads,axes,after", [
    ([1, 3, 4, 5], [0, 0, 1, 1, 0, 0, 1, 1], None, False),  # the ONNX node test's pads
    ([2, 3, 4], [0, 3, 1, 1, 0, 4], None, True),  # a pad as wide as its axis; three axes at once
    ([1, 2, 6, 5], [2, 1, 0, 3], [2, -1], False),  # axes, a negative one among them
    ([1, 1, 6, 5], [0, 0, -2, 1, 0, 0, 1, -1], None, True),  # negative pads crop, mixed with wraps
])
def test_wrap_pad_matches_onnxruntime(tmp_path: Path, shape, pads, axes, after) -> None:
    """torch-mlir's lowering of a wrap pad never terminates; the importer writes it as slices and
    concats along each padded axis (a negative pad crops), checked against onnxruntime."""
    _check(tmp_path, _wrap_pad(shape, pads, axes, after), _rand(np.random.default_rng(5), tuple(shape)))


def test_wrap_pad_wider_than_its_axis_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_wrap_pad([1, 1, 3, 4], [0, 0, 4, 0, 0, 0, 0, 0]), path)
    with pytest.raises(CompileError, match=r"pads 4, 0 on axis 2 of size 3: halbench wraps by at most the axis's size"):
        compile_model(path, CompileOptions())


@pytest.mark.parametrize("pads,axes,match", [
    ([0, 0, 1, 1], None, r"4 pads for 4 axes, where ONNX wants 8"),  # half as long: would pad nothing
    ([1, 1, 1], [2], r"3 pads for 1 axes, where ONNX wants 2"),
    ([1, 1], [4], r"axes \[4\] do not name distinct axes of a rank-4 input"),  # would wrap round to axis 0
    ([1, 1, 1, 1], [2, -2], r"axes \[2, -2\] do not name distinct axes"),
])
def test_wrap_pad_with_malformed_pads_or_axes_is_refused_in_one_line(tmp_path: Path, pads, axes, match) -> None:
    """Pads or axes that do not fit the input are the model's error: one line naming it, not a
    quietly smaller pad (onnxruntime refuses these files too)."""
    from halbench.errors import HalbenchError

    path = tmp_path / "m.onnx"
    onnx.save(_wrap_pad([1, 1, 3, 4], pads, axes), path)
    # (ONNX's strict shape inference refuses these first, naming the node; halbench's own check
    # stays behind it for what inference lets through)
    with pytest.raises(HalbenchError, match=rf"{match}|node 'y' \(Pad\) is not valid ONNX: ") as e:
        compile_model(path, CompileOptions())
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 2, 2], "pads": [1, 0, 1, 1, 1, 0], "strides": [2, 1, 2]},  # depth padded at both ends
    {"kernel_shape": [2, 3, 1], "strides": [3, 2, 1], "ceil_mode": 1, "dilations": [2, 1, 1]},  # ceil reaches past D
    {"kernel_shape": [1, 2, 2]},  # one depth tap
])
def test_maxpool_3d_matches_onnxruntime(tmp_path: Path, attrs) -> None:
    """A 3-D MaxPool becomes strided depth slices (padded with -inf), their Max and one 2-D pool
    over H and W; the pads, dilations and ceil_mode the ONNX node tests leave out, against onnxruntime."""
    g = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], "mp3d",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 6, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    _check(tmp_path, m, _rand(np.random.default_rng(7), (2, 3, 7, 6, 5)))


@pytest.mark.parametrize("shape,batch_axis,time_axis,lens", [
    ([5, 3, 2], 1, 0, [5, 1, 3]),  # time first, a 3-D value; a full and a length-1 sequence
    ([2, 6, 4], 0, 1, [0, 4]),  # batch first; an empty sequence is left as it is
])
def test_reverse_sequence_matches_onnxruntime(tmp_path: Path, shape, batch_axis, time_axis, lens) -> None:
    """ReverseSequence as a GatherElements along time whose index reads the lengths at run time
    (torch-mlir lowers it to a loop halbench does not run), against onnxruntime."""
    g = helper.make_graph(
        [helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis)], "rs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("lens", TensorProto.INT64, [len(lens)])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "rs.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    feeds = {"x": _rand(np.random.default_rng(9), tuple(shape)), "lens": np.array(lens, np.int64)}
    ref = onnx_reference(path, feeds)
    out, _ = compile_and_run(path, feeds, tmp_path)
    np.testing.assert_array_equal(out[0], ref[0])


@pytest.mark.parametrize("shape,batch_axis,time_axis,lens,match", [
    ([5, 3, 2], 2, 0, 3, r"batch_axis 2 and time_axis 0 on a rank-3 input, where ONNX wants 0 and 1"),
    ([5, 3, 2], 0, 0, 5, r"batch_axis 0 and time_axis 0"),
    ([5, 3, 2], 1, 0, 4, r"sequence_lens of shape \[4\] for a batch of 3"),
])
def test_reverse_sequence_with_bad_axes_is_refused_in_one_line(tmp_path: Path, shape, batch_axis, time_axis, lens,
                                                               match) -> None:
    g = helper.make_graph(
        [helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis)], "rs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("lens", TensorProto.INT64, [lens])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "rs.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    with pytest.raises(CompileError, match=match) as e:
        compile_model(path, CompileOptions())
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("auto_pad,strides,kernel", [
    ("SAME_UPPER", [2, 2], [3, 3]),  # odd total padding: the extra at the end
    ("SAME_LOWER", [3, 2], [2, 3]),  # ... at the start
    ("SAME_UPPER", [2, 2], [4, 2]),  # even: symmetric pads, no crop
])
def test_conv_transpose_same_matches_onnxruntime(tmp_path: Path, auto_pad, strides, kernel) -> None:
    w = numpy_helper.from_array(_rand(np.random.default_rng(4), (3, 2, *kernel)), "w")
    g = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], auto_pad=auto_pad, strides=strides)],
                          "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    _check(tmp_path, helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
           _rand(np.random.default_rng(8), (1, 3, 4, 5)))


def test_small_det_is_the_cofactor_expansion(tmp_path: Path) -> None:
    """Det of 2x2 / 3x3 matrices whose first pivot is zero (torch-mlir's unpivoted LU gave NaN),
    batched, against onnxruntime."""
    for n in (2, 3):
        x = _rand(np.random.default_rng(n), (4, n, n))
        x[:, 0, 0] = 0.0
        x[1] = 0.0  # a singular one
        g = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "det",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, n, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        path = tmp_path / f"det{n}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
        ref = onnx_reference(path, {"x": x})
        out, _ = compile_and_run(path, {"x": x}, tmp_path)
        assert np.isfinite(out[0]).all() and out[0].shape == (4,)
        np.testing.assert_allclose(out[0], ref[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p,axis,opset", [(2, 0, 17), (1, -1, 17), (2, 1, 18)])
def test_lp_normalization_of_a_zero_vector_is_zero(tmp_path: Path, p: int, axis: int, opset: int) -> None:
    x = _rand(np.random.default_rng(3), (3, 4, 2))
    x[:, 1, :] = 0.0
    x[0] = 0.0
    g = helper.make_graph([helper.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p)], "lpn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "lpn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), path)
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    norm = np.linalg.norm(x, ord=p, axis=axis, keepdims=True) if p == 2 else np.abs(x).sum(axis=axis, keepdims=True)
    expect = x / np.where(norm == 0, 1, norm)  # the ONNX reference's rule
    assert np.isfinite(out[0]).all()
    np.testing.assert_allclose(out[0], expect, rtol=1e-5, atol=1e-7)


def _graph_model(nodes: list, inputs: dict[str, tuple[int, np.ndarray]], outputs: list[str], opsets: list,
                 inits: list | None = None) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, a.shape) for n, (t, a) in inputs.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits or [])
    return helper.make_model(g, opset_imports=opsets, ir_version=8)


@pytest.mark.parametrize("op,attrs,per,t", [
    ("Adagrad", {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.001}, 3, 3),
    ("Adam", {"alpha": 0.9, "beta": 0.99, "epsilon": 1e-3, "norm_coefficient": 0.01,
              "norm_coefficient_post": 0.02}, 4, 4),
    ("Adam", {"alpha": 0.9, "beta": 0.99, "epsilon": 1e-3}, 4, 0),  # T = 0: no bias correction
    ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01}, 3, 2),
    ("Momentum", {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.01}, 3, 0),
])
def test_training_optimizers_match_the_onnx_reference(tmp_path: Path, op, attrs, per, t) -> None:
    """The ai.onnx.preview.training optimizers as element-wise chains, two variables of different
    shapes at once, against onnx's reference implementation (onnxruntime has no such kernels)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(11)
    shapes = [(3,), (2, 4)]
    letters = {"Adagrad": "XGH", "Momentum": "XGV", "Adam": "XGVH"}[op]
    names = [f"{k}{i}" for k in letters for i in range(2)]
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64)}
    for n in names:
        a = _rand(rng, shapes[int(n[1])])
        feeds[n] = np.abs(a) if n[0] == "H" else a  # a squared-gradient accumulator is not negative
    outs = [f"{k}{i}_new" for k in letters.replace("G", "") for i in range(2)]
    node = helper.make_node(op, ["R", "T", *names], outs, domain="ai.onnx.preview.training", **attrs)
    m = _graph_model([node], {n: (TensorProto.INT64 if n == "T" else TensorProto.FLOAT, a) for n, a in feeds.items()},
                     outs, [helper.make_opsetid("ai.onnx.preview.training", 1)])
    ref = ReferenceEvaluator(m).run(None, feeds)
    path = tmp_path / "opt.onnx"
    onnx.save(m, path)
    out, _ = compile_and_run(path, feeds, tmp_path)
    assert len(out) == len(ref) == len(outs)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and rel_err(o, r) <= 1e-5


@pytest.mark.parametrize("opset", [11, 17])  # 11: the model is upgraded first, then rewritten
def test_ml_binarizer_and_array_feature_extractor_match_onnxruntime(tmp_path: Path, opset: int) -> None:
    x = _rand(np.random.default_rng(12), (3, 4, 5))
    idx = np.array([4, 0, 4, 2], np.int64)
    m = _graph_model([helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", threshold=0.25),
                      helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["f"], domain="ai.onnx.ml")],
                     {"x": (TensorProto.FLOAT, x), "i": (TensorProto.INT64, idx)}, ["b", "f"],
                     [helper.make_opsetid("ai.onnx.ml", 1), helper.make_opsetid("", opset)])
    path = tmp_path / "ml.onnx"
    onnx.save(m, path)
    ref = onnx_reference(path, {"x": x, "i": idx})
    out, _ = compile_and_run(path, {"x": x, "i": idx}, tmp_path)
    np.testing.assert_array_equal(out[0], ref[0])
    np.testing.assert_array_equal(out[1], ref[1])


@pytest.mark.parametrize("axis,cond", [(None, [0, 1, 1, 0, 0, 0, 1]), (1, [1, 0, 1]), (-1, [0, 1, 1, 1]), (0, [1])])
def test_compress_with_a_constant_condition_matches_onnxruntime(tmp_path: Path, axis, cond) -> None:
    """A condition shorter than its axis selects from the axis's start; no axis: the input flattened."""
    cnd = numpy_helper.from_array(np.array(cond, bool), "c")
    m = _graph_model([helper.make_node("Compress", ["x", "c"], ["y"], **({} if axis is None else {"axis": axis}))],
                     {"x": (TensorProto.FLOAT, np.zeros((2, 3, 4), np.float32))}, ["y"],
                     [helper.make_opsetid("", 17)], [cnd])
    _check(tmp_path, m, _rand(np.random.default_rng(13), (2, 3, 4)))


def test_compress_selecting_past_its_axis_is_refused_in_one_line(tmp_path: Path) -> None:
    cnd = numpy_helper.from_array(np.array([0, 0, 0, 1], bool), "c")
    m = _graph_model([helper.make_node("Compress", ["x", "c"], ["y"], axis=1)],
                     {"x": (TensorProto.FLOAT, np.zeros((2, 3), np.float32))}, ["y"], [helper.make_opsetid("", 17)],
                     [cnd])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with pytest.raises(CompileError, match=r"selects element 3 of an axis of 3; give a condition no longer"):
        compile_model(path, CompileOptions())


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("axis,data,idx", [
    (1, (3, 5), [[0, 4, 4], [1, 1, -1]]),  # repeated and negative indices; fewer rows than the data
    (0, (4, 2, 3), [[[3, 0, 3]], [[3, 2, 0]]]),  # along the first axis of three; a partial middle axis
    (1, (2, 3), [[0, 2, 2, 1, 0, -3], [1, 1, 1, 1, 2, 0]]),  # more indices than data along the axis
])
def test_scatter_elements_max_min_matches_onnxruntime(tmp_path: Path, reduction, axis, data, idx) -> None:
    """ScatterElements with reduction max / min as a one-hot reduction, repeated indices included."""
    rng = np.random.default_rng(14)
    idx = np.array(idx, np.int64)
    feeds = {"d": _rand(rng, data), "i": idx, "u": _rand(rng, idx.shape)}
    m = _graph_model([helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=axis, reduction=reduction)],
                     {"d": (TensorProto.FLOAT, feeds["d"]), "i": (TensorProto.INT64, idx),
                      "u": (TensorProto.FLOAT, feeds["u"])}, ["y"], [helper.make_opsetid("", 18)])
    path = tmp_path / "se.onnx"
    onnx.save(m, path)
    ref = onnx_reference(path, feeds)
    out, _ = compile_and_run(path, feeds, tmp_path)
    np.testing.assert_array_equal(out[0], ref[0])


def test_scatter_elements_max_index_out_of_range_stops_the_run(tmp_path: Path) -> None:
    """An index outside [-n, n) is an error, as onnxruntime makes it, not an update dropped: the
    run stops with halbench's one-line index error naming the dispatch."""
    from halbench.errors import HalbenchError

    idx = np.array([[0, 3]], np.int64)  # 3 is past an axis of 3
    feeds = {"d": np.zeros((2, 3), np.float32), "i": idx, "u": np.ones((1, 2), np.float32)}
    m = _graph_model([helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction="max")],
                     {"d": (TensorProto.FLOAT, feeds["d"]), "i": (TensorProto.INT64, idx),
                      "u": (TensorProto.FLOAT, feeds["u"])}, ["y"], [helper.make_opsetid("", 18)])
    path = tmp_path / "se.onnx"
    onnx.save(m, path)
    with pytest.raises(HalbenchError, match=r"index 3, outside its input.s bounds"):
        compile_and_run(path, feeds, tmp_path)
    ok = dict(feeds, i=np.array([[0, -3]], np.int64))  # -3 is the first element
    np.testing.assert_array_equal(compile_and_run(path, ok, tmp_path)[0][0], [[1, 0, 0], [0, 0, 0]])


def _scan_body() -> onnx.GraphProto:
    """state s [3], running sum; scan element x [3]: s' = s + x, out y = s' * x; and a count."""
    nodes = [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Mul", ["s2", "x"], ["y"]),
             helper.make_node("Add", ["c", "one"], ["c2"])]
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    vi = helper.make_tensor_value_info
    return helper.make_graph(nodes, "body", [vi("s", TensorProto.FLOAT, [3]), vi("c", TensorProto.FLOAT, []),
                                             vi("x", TensorProto.FLOAT, [3])],
                             [vi("s2", TensorProto.FLOAT, [3]), vi("c2", TensorProto.FLOAT, []),
                              vi("y", TensorProto.FLOAT, [3])], [one])


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (1, 1, 1, 0), (0, 0, -1, 1)])
def test_scan_is_unrolled_and_matches_onnxruntime(tmp_path: Path, in_axis, in_dir, out_axis, out_dir) -> None:
    """Scan (torch-mlir lowers it to an scf.for halbench does not run) unrolled over its static
    length: two states, one scan input along either axis and direction, the scan output
    stacked along either axis and direction."""
    rng = np.random.default_rng(18)
    xs = _rand(rng, (5, 3) if in_axis == 0 else (3, 5))
    feeds = {"s0": _rand(rng, (3,)), "c0": np.array(0.0, np.float32), "xs": xs}
    node = helper.make_node("Scan", ["s0", "c0", "xs"], ["sf", "cf", "ys"], body=_scan_body(), num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    m = _graph_model([node], {k: (TensorProto.FLOAT, v) for k, v in feeds.items()}, ["sf", "cf", "ys"],
                     [helper.make_opsetid("", 17)])
    path = tmp_path / "scan.onnx"
    onnx.save(m, path)
    ref = onnx_reference(path, feeds)
    out, _ = compile_and_run(path, feeds, tmp_path)
    for o, r in zip(out, ref):
        np.testing.assert_allclose(o, r, rtol=1e-6)
    assert float(out[1]) == 5.0


def test_loop_with_a_constant_trip_count_is_unrolled(tmp_path: Path) -> None:
    """Loop with a constant trip count whose body passes its condition through: unrolled, the
    iteration number a constant per step, the scan output stacked along a new first axis."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["v", "fi"], ["w"]), helper.make_node("Add", ["v", "w"], ["v2"]),
         helper.make_node("Identity", ["w"], ["scan"])], "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("v", TensorProto.FLOAT, [2])],
        [vi("cond_out", TensorProto.BOOL, []), vi("v2", TensorProto.FLOAT, [2]), vi("scan", TensorProto.FLOAT, [2])])
    inits = [numpy_helper.from_array(np.array(4, np.int64), "M"), numpy_helper.from_array(np.array(True), "c")]
    x = np.array([0.5, -1.5], np.float32)
    m = _graph_model([helper.make_node("Loop", ["M", "c", "x"], ["vf", "all"], body=body)],
                     {"x": (TensorProto.FLOAT, x)}, ["vf", "all"], [helper.make_opsetid("", 17)], inits)
    path = tmp_path / "loop.onnx"
    onnx.save(m, path)
    ref = onnx_reference(path, {"x": x})
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    assert out[1].shape == (4, 2)
    for o, r in zip(out, ref):
        np.testing.assert_allclose(o, r, rtol=1e-6)


def test_if_with_a_run_time_condition_selects_between_both_branches(tmp_path: Path) -> None:
    """If whose condition is an input (torch-mlir lowers it to a select on tensors that halbench
    cannot run): both branches computed, each output a Where of the two."""
    vi = helper.make_tensor_value_info
    then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vi("t", TensorProto.FLOAT, [3])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", TensorProto.FLOAT, [3])])
    x = np.array([1.5, -2.0, 3.0], np.float32)
    m = _graph_model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                     {"c": (TensorProto.BOOL, np.array(True)), "x": (TensorProto.FLOAT, x)}, ["y"],
                     [helper.make_opsetid("", 17)])
    path = tmp_path / "if.onnx"
    onnx.save(m, path)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        out, _ = compile_and_run(path, feeds, tmp_path)
        np.testing.assert_array_equal(out[0], onnx_reference(path, feeds)[0])


@pytest.mark.parametrize("shape,axis,inverse,onesided,length", [
    ((2, 12, 3, 1), 1, 0, 0, None),  # real signal
    ((2, 5, 8, 2), 2, 0, 0, 6),  # complex, cut to 6 points
    ((1, 9, 4, 1), 1, 0, 1, 12),  # onesided, zero-padded to 12: 7 frequencies
    ((2, 7, 3, 2), 1, 1, 0, None),  # inverse
    ((1, 6, 4, 2), 1, 1, 1, None),  # inverse onesided: 10 real points
    ((1, 5, 3, 2), 1, 1, 1, 9),  # ... of an odd length
])
def test_dft_matches_numpy(tmp_path: Path, shape, axis, inverse, onesided, length) -> None:
    """DFT (torch-mlir has no pattern) as matrix products with cosine / sine tables, against
    numpy's FFT (what the ONNX reference runs) in float64."""
    x = _rand(np.random.default_rng(19), shape)
    inits = [numpy_helper.from_array(np.array(axis, np.int64), "axis")]
    ins = ["x", "", "axis"]
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "n"))
        ins[1] = "n"
    m = _graph_model([helper.make_node("DFT", ins, ["y"], inverse=inverse, onesided=onesided)],
                     {"x": (TensorProto.FLOAT, x)}, ["y"], [helper.make_opsetid("", 20)], inits)
    path = tmp_path / "dft.onnx"
    onnx.save(m, path)
    z = x[..., 0].astype(np.float64) + (1j * x[..., 1] if shape[-1] == 2 else 0)
    n = length or (2 * (shape[axis] - 1) if inverse and onesided else shape[axis])
    if inverse and onesided:
        want = np.fft.irfft(z, n=n, axis=axis)[..., None]
    else:
        r = np.fft.ifft(z, n=n, axis=axis) if inverse else np.fft.fft(z, n=n, axis=axis)
        if onesided:
            r = np.take(r, np.arange(n // 2 + 1), axis=axis)
        want = np.stack([r.real, r.imag], axis=-1)
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    assert out[0].shape == want.shape
    np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-5)


def test_stft_matches_the_reference(tmp_path: Path) -> None:
    """STFT (torch-mlir has no pattern): frames gathered at compile-time indices, the window
    given at run time, their onesided DFT; against the ONNX reference implementation."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(20)
    feeds = {"s": _rand(rng, (2, 50, 1)), "w": np.hanning(12).astype(np.float32)}
    m = _graph_model([helper.make_node("STFT", ["s", "step", "w"], ["y"])],
                     {"s": (TensorProto.FLOAT, feeds["s"]), "w": (TensorProto.FLOAT, feeds["w"])}, ["y"],
                     [helper.make_opsetid("", 17)], [numpy_helper.from_array(np.array(5, np.int64), "step")])
    path = tmp_path / "stft.onnx"
    onnx.save(m, path)
    ref = ReferenceEvaluator(m).run(None, feeds)[0]
    out, _ = compile_and_run(path, feeds, tmp_path)
    assert out[0].shape == ref.shape == (2, 8, 7, 2)
    np.testing.assert_allclose(out[0], ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("groups,bias", [(2, False), (3, True)])
def test_grouped_conv_transpose_matches_onnxruntime(tmp_path: Path, groups, bias) -> None:
    """ConvTranspose with groups (torch-mlir's lowering fails) as one per group, concatenated."""
    rng = np.random.default_rng(21)
    x = _rand(rng, (2, 2 * groups, 4, 5))
    inits = [numpy_helper.from_array(_rand(rng, (2 * groups, 3, 3, 2)), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(_rand(rng, (3 * groups,)), "b"))
        ins.append("b")
    m = _graph_model([helper.make_node("ConvTranspose", ins, ["y"], group=groups, strides=[2, 1], pads=[1, 0, 1, 0])],
                     {"x": (TensorProto.FLOAT, x)}, ["y"], [helper.make_opsetid("", 17)], inits)
    path = tmp_path / "ct.onnx"
    onnx.save(m, path)
    ref = onnx_reference(path, {"x": x})[0]
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    np.testing.assert_allclose(out[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_blocked_quantization_matches_the_reference(tmp_path: Path, op) -> None:
    """Quantize / DequantizeLinear with blocked scales (torch-mlir has no pattern) as their
    formulas, each scale repeated over its block of 3 along axis 1 (the last block short)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(22)
    x = (rng.uniform(-200, 200, (2, 8)).astype(np.float32) if op == "QuantizeLinear"
         else rng.integers(-128, 128, (2, 8)).astype(np.int8))
    scale = rng.uniform(0.5, 2.0, (2, 3)).astype(np.float32)
    zp = rng.integers(-5, 5, (2, 3)).astype(np.int8)
    m = _graph_model([helper.make_node(op, ["x", "s", "z"], ["y"], axis=1, block_size=3)],
                     {"x": (TensorProto.FLOAT if op == "QuantizeLinear" else TensorProto.INT8, x)}, ["y"],
                     [helper.make_opsetid("", 21)], [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT8 if op == "QuantizeLinear" else TensorProto.FLOAT
    path = tmp_path / "q.onnx"
    onnx.save(m, path)
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    assert out[0].dtype == ref.dtype
    np.testing.assert_array_equal(out[0], ref)


def test_col2im_matches_torch_fold(tmp_path: Path) -> None:
    """Col2Im (torch-mlir lowers none here) as compile-time gathers, against PyTorch's fold (an
    implementation nobody here wrote), with strides, dilations and uneven pads."""
    torch = pytest.importorskip("torch")
    img, blk, st, dil, pads = [7, 9], [2, 3], [2, 1], [1, 2], [1, 0, 0, 2]
    padded = [img[i] + pads[i] + pads[2 + i] for i in range(2)]
    nb = [(padded[i] - (dil[i] * (blk[i] - 1) + 1)) // st[i] + 1 for i in range(2)]
    x = _rand(np.random.default_rng(23), (2, 3 * 6, nb[0] * nb[1]))
    m = _graph_model([helper.make_node("Col2Im", ["x", "img", "blk"], ["y"], strides=st, dilations=dil, pads=pads)],
                     {"x": (TensorProto.FLOAT, x)}, ["y"], [helper.make_opsetid("", 18)],
                     [numpy_helper.from_array(np.array(img, np.int64), "img"),
                      numpy_helper.from_array(np.array(blk, np.int64), "blk")])
    path = tmp_path / "c2i.onnx"
    onnx.save(m, path)
    # fold over the padded image (torch pads both sides alike), then cut the pads away
    full = torch.nn.functional.fold(torch.from_numpy(x), padded, blk, dilation=dil, stride=st).numpy()
    want = full[:, :, pads[0]:pads[0] + img[0], pads[1]:pads[1] + img[1]]
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-6)


def test_flex_attention_from_the_preview_domain(tmp_path: Path) -> None:
    """FlexAttention (``ai.onnx.preview``, which torch-mlir does not import) expanded into the
    standard's function body, against softmax(Q Kᵀ / sqrt(d)) V computed here in float64."""
    rng = np.random.default_rng(24)
    feeds = {"q": _rand(rng, (1, 2, 5, 8)), "k": _rand(rng, (1, 2, 7, 8)), "v": _rand(rng, (1, 2, 7, 8))}
    g = helper.make_graph([helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview")], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)],
                          ir_version=10)
    path = tmp_path / "flex.onnx"
    onnx.save(m, path)
    q, k, v = (feeds[n].astype(np.float64) for n in "qkv")
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    out, _ = compile_and_run(path, feeds, tmp_path)
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-6)


def test_average_pool_ceil_mode_counts_like_pytorch(tmp_path: Path) -> None:
    """A torch.onnx-exported avg_pool2d with ceil_mode and count_include_pad: its last windows
    reach past the padded input and divide by the taps inside it (PyTorch, the specification),
    not by the whole window (torch-mlir's lowering, 1.5x off there)."""
    torch = pytest.importorskip("torch")

    class Pool(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)

    x = torch.from_numpy(_rand(np.random.default_rng(25), (1, 3, 8, 10)))
    path = tmp_path / "pool.onnx"
    torch.onnx.export(Pool(), (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    want = Pool()(x).numpy()
    out, _ = compile_and_run(path, {"x": x.numpy()}, tmp_path)
    assert out[0].shape == want.shape == (1, 3, 5, 6)
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-6)


def _crafted(kind: str) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    if kind == "resize_inf_scale":
        return _graph_model([helper.make_node("Resize", ["x", "roi", "s"], ["y"], mode="linear",
                                              coordinate_transformation_mode="tf_crop_and_resize")],
                            {"x": (TensorProto.FLOAT, np.zeros((1, 1, 4, 4), np.float32))}, ["y"],
                            [helper.make_opsetid("", 19)],
                            [numpy_helper.from_array(np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32), "roi"),
                             numpy_helper.from_array(np.array([1, 1, np.inf, 1], np.float32), "s")])
    if kind == "scan_axes_mismatch":
        body = helper.make_graph([helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])],
                                 "b", [vi("s", TensorProto.FLOAT, [3]), vi("x", TensorProto.FLOAT, [3])],
                                 [vi("s2", TensorProto.FLOAT, [3]), vi("o", TensorProto.FLOAT, [3])])
        return _graph_model([helper.make_node("Scan", ["s0", "xs"], ["y", "ys"], body=body, num_scan_inputs=1,
                                              scan_input_axes=[0, 1])],
                            {"s0": (TensorProto.FLOAT, np.zeros(3, np.float32)),
                             "xs": (TensorProto.FLOAT, np.zeros((4, 3), np.float32))}, ["y"], [helper.make_opsetid("", 17)])
    return _graph_model([helper.make_node("DFT", ["x", "n", "ax"], ["y"])],  # a 2^20-point DFT of 8 samples
                        {"x": (TensorProto.FLOAT, np.zeros((1, 8, 1), np.float32))}, ["y"], [helper.make_opsetid("", 20)],
                        [numpy_helper.from_array(np.array(1 << 20, np.int64), "n"),
                         numpy_helper.from_array(np.array(1, np.int64), "ax")])


@pytest.mark.parametrize("kind", ["resize_inf_scale", "scan_axes_mismatch", "dft_huge_length"])
def test_crafted_rewrite_inputs_get_a_one_line_error(tmp_path: Path, kind) -> None:
    """A Resize with an infinite scale (an OverflowError in the tap tables), a Scan whose axes
    outnumber its scan inputs (an IndexError in the unroller) and a DFT whose tables would take
    gigabytes are left to the importer, which refuses each in one line naming the node."""
    from halbench.errors import HalbenchError

    path = tmp_path / f"{kind}.onnx"
    onnx.save(_crafted(kind), path)
    with pytest.raises(HalbenchError) as e:
        compile_model(path, CompileOptions(target_devices=("local",)))
    msg = str(e.value)
    assert "\n" not in msg.strip() and (path.name in msg or re.match(r"node 'y' \(\w+\) is not valid ONNX: ", msg))


def test_f16_range_counts_in_f32(tmp_path: Path) -> None:
    """An f16 Range (torch-mlir lowers none) as an f32 Range cast to f16, matching the ONNX
    reference implementation."""
    from onnx.reference import ReferenceEvaluator

    feeds = {"s": np.array(1.5, np.float16), "l": np.array(9.0, np.float16), "d": np.array(0.75, np.float16)}
    m = _graph_model([helper.make_node("Range", ["s", "l", "d"], ["y"])],
                     {k: (TensorProto.FLOAT16, v) for k, v in feeds.items()}, ["y"], [helper.make_opsetid("", 17)])
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    path = tmp_path / "r.onnx"
    onnx.save(m, path)
    ref = ReferenceEvaluator(m).run(None, feeds)[0]  # (onnxruntime has no f16 Range)
    out, _ = compile_and_run(path, {}, tmp_path, input_values=feeds)  # (its length: compile time)
    assert out[0].dtype == np.float16
    np.testing.assert_array_equal(out[0], ref)


@pytest.mark.parametrize("group", [1, 16])
def test_f16_convs_accumulate_in_f32_on_the_local_driver(tmp_path: Path, group) -> None:
    """f16 convolutions (and depthwise ones) on local-sync:// (the NumPy kernels, halbench's
    oracle) accumulate in f32 and round once, as the GPU kernels do: within an ulp of the exact
    result rounded to f16, where rounding each of a 7x7 filter's 49 tap sums to f16 drifts several."""
    rng = np.random.default_rng(17)
    x = rng.uniform(0, 1, (1, 16, 9, 9)).astype(np.float16)
    w = rng.uniform(0, 1, (16 if group > 1 else 4, 16 // group, 7, 7)).astype(np.float16)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[3, 3, 3, 3], group=group)
    m = _graph_model([node], {"x": (TensorProto.FLOAT16, x)}, ["y"], [helper.make_opsetid("", 17)],
                     [numpy_helper.from_array(w, "w")])
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    path = tmp_path / "g.onnx"
    onnx.save(m, path)
    exact = onnx_reference(_f32_copy(m, tmp_path), {"x": x.astype(np.float32)})[0].astype(np.float16)
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    assert out[0].dtype == np.float16
    np.testing.assert_allclose(out[0].astype(np.float32), exact.astype(np.float32), rtol=1e-3)


def _f32_copy(m: onnx.ModelProto, tmp: Path) -> Path:
    """``m`` with its f16 inputs, outputs and initializers made f32 (the exact computation)."""
    import copy

    m32 = copy.deepcopy(m)
    for vi in [*m32.graph.input, *m32.graph.output]:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    for i, t in enumerate(m32.graph.initializer):
        m32.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    path = tmp / "f32.onnx"
    onnx.save(m32, path)
    return path


@pytest.mark.parametrize("mode,axis,w", [
    ("linear", -2, [0, 3]),
    ("circular", -2, [6, 4]),  # wraps past the cache's end
    ("linear", 1, None),  # no write indices: every batch writes from 0
    ("circular", 2, [-1, 9]),
])
def test_tensor_scatter_matches_the_reference(tmp_path: Path, mode, axis, w) -> None:
    """TensorScatter (opset 24, KV caches; torch-mlir has no pattern) as a select between the
    cache and the update row each position takes, against the ONNX reference implementation."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(16)
    cache = _rand(rng, (2, 3, 7, 4))
    ushape = list(cache.shape)
    ushape[axis] = 3
    feeds = {"c": cache, "u": _rand(rng, tuple(ushape))}
    ins = {"c": (TensorProto.FLOAT, cache), "u": (TensorProto.FLOAT, feeds["u"])}
    names = ["c", "u"]
    if w is not None:
        feeds["w"] = np.array(w, np.int64)
        ins["w"] = (TensorProto.INT64, feeds["w"])
        names.append("w")
    m = _graph_model([helper.make_node("TensorScatter", names, ["y"], axis=axis, mode=mode)], ins, ["y"],
                     [helper.make_opsetid("", 24)])
    path = tmp_path / "ts.onnx"
    onnx.save(m, path)
    ref = ReferenceEvaluator(m).run(None, feeds)[0]
    out, _ = compile_and_run(path, feeds, tmp_path)
    np.testing.assert_array_equal(out[0], ref)


def test_tensor_scatter_writing_past_the_cache_stops_the_run(tmp_path: Path) -> None:
    """A linear write index that would put the update past the cache's end is an error (the
    reference fails on it too), not a write that is dropped."""
    from halbench.errors import HalbenchError

    feeds = {"c": np.zeros((1, 5, 2), np.float32), "u": np.ones((1, 2, 2), np.float32), "w": np.array([4], np.int64)}
    m = _graph_model([helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], axis=1)],
                     {k: (TensorProto.INT64 if k == "w" else TensorProto.FLOAT, v) for k, v in feeds.items()}, ["y"],
                     [helper.make_opsetid("", 24)])
    path = tmp_path / "ts.onnx"
    onnx.save(m, path)
    with pytest.raises(HalbenchError, match=r"index 4, outside its input.s bounds"):
        compile_and_run(path, feeds, tmp_path)
    out, _ = compile_and_run(path, dict(feeds, w=np.array([3], np.int64)), tmp_path)
    np.testing.assert_array_equal(out[0][0, :, 0], [0, 0, 0, 1, 1])


@pytest.mark.parametrize("attrs,roi,scales,sizes", [
    # tf_crop_and_resize (torch-mlir: no pattern), a crop reaching outside: the extrapolation value
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.0},
     [0.2, -0.3, 0.9, 1.2], None, [5, 9]),
    # align_corners with scales giving a fractional length (the specification uses 5 * 0.7 = 3.5)
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, [0.7, 0.55], None),
    ({"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, None, [0.7, 1.3], None),
    ({"mode": "nearest", "coordinate_transformation_mode": "align_corners", "nearest_mode": "floor"},
     None, None, [8, 11]),
    ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, None, [0.6, 1.7], None),
    ({"mode": "linear", "antialias": 1}, None, [0.4, 0.75], None),  # downsampling widens the filter
    ({"mode": "cubic", "antialias": 1}, None, None, [2, 13]),
    ({"mode": "nearest", "keep_aspect_ratio_policy": "not_smaller", "axes": [2, 3]}, None, None, [3, 5]),
    ({"mode": "linear", "antialias": 1}, None, [], [3, 4]),  # an empty scales beside sizes (as exporters write)
])
def test_resize_by_tables_matches_onnxruntime(tmp_path: Path, attrs, roi, scales, sizes) -> None:
    """The Resize modes torch-mlir refuses or computes with other coordinates, as per-axis
    gathers with compile-time taps and coefficients, against the ONNX reference implementation
    (the specification's own code, which the backend node tests' expected outputs come from):
    onnxruntime (1.32) departs from it for tf_crop_and_resize and for align_corners with a
    fractional output length (it uses the whole one), 2.0 off on these inputs."""
    from onnx.reference import ReferenceEvaluator

    x = _rand(np.random.default_rng(15), (1, 2, 5, 7))
    inits, ins = [], ["x", "", "", ""]
    for k, (name, v) in enumerate((("roi", roi), ("scales", scales), ("sizes", sizes)), start=1):
        if v is not None:
            full = v if name != "scales" or not v else [1.0, 1.0, *v]
            if name == "sizes" and "axes" not in attrs:
                full = [1, 2, *v]
            if name == "roi" and "axes" not in attrs:
                full = [0, 0, *v[:2], 1, 1, *v[2:]]
            inits.append(numpy_helper.from_array(np.array(full, np.int64 if name == "sizes" else np.float32), name))
            ins[k] = name
    m = _graph_model([helper.make_node("Resize", ins, ["y"], **attrs)], {"x": (TensorProto.FLOAT, x)}, ["y"],
                     [helper.make_opsetid("", 19)], inits)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    assert out[0].shape == ref.shape
    np.testing.assert_allclose(out[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy,sizes,mode", [
    ("not_larger", [8, 20], "linear"),  # scale min(2, 3.33) = 2: 8 x 12
    ("not_smaller", [10, 9], "nearest"),  # scale max(2.5, 1.5) = 2.5: 10 x 15
    ("not_larger", [2, 9], "nearest"),  # scale min(0.5, 1.5) = 0.5, a downsample: 2 x 3
])
def test_resize_keeping_the_aspect_ratio_matches_onnxruntime(tmp_path: Path, policy, sizes, mode) -> None:
    """keep_aspect_ratio_policy (torch-mlir has no pattern) as a Resize by the policy's one scale."""
    sz = numpy_helper.from_array(np.array(sizes, np.int64), "sizes")
    m = _graph_model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], axes=[2, 3], mode=mode,
                                       keep_aspect_ratio_policy=policy)],
                     {"x": (TensorProto.FLOAT, np.zeros((1, 2, 4, 6), np.float32))}, ["y"],
                     [helper.make_opsetid("", 19)], [sz])
    _check(tmp_path, m, _rand(np.random.default_rng(15), (1, 2, 4, 6)))


@pytest.mark.parametrize("mode,dims", [("nearest", 2), ("linear", 2), ("cubic", 2), ("nearest", 3), ("linear", 3)])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_matches_the_onnx_reference(tmp_path: Path, mode, dims, padding_mode, align_corners) -> None:
    """GridSample as clamped gathers (2-D and 3-D), with grid points far outside the image (three
    reflections deep), on pixel centres and halfway between them (nearest rounds halves to even),
    against onnx's reference implementation (onnxruntime has no 5-D GridSample)."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(16)
    x = _rand(rng, (2, 3, 4, 5) if dims == 2 else (2, 2, 3, 4, 5))
    grid = rng.uniform(-3.5, 3.5, (2, 3, 6, 2) if dims == 2 else (2, 2, 3, 6, 3)).astype(np.float32)
    grid[0, 0, ..., 0] = (np.arange(6) - 2.5) / 2.5  # x on (W = 5) half-pixel steps: ties for nearest
    grid[0, 0, ..., 1:] = 0.0
    m = _graph_model([helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding_mode,
                                       align_corners=align_corners)],
                     {"x": (TensorProto.FLOAT, x), "g": (TensorProto.FLOAT, grid)}, ["y"],
                     [helper.make_opsetid("", 20)])
    path = tmp_path / "gs.onnx"
    onnx.save(m, path)
    ref = ReferenceEvaluator(m).run(None, {"x": x, "g": grid})
    out, _ = compile_and_run(path, {"x": x, "g": grid}, tmp_path)
    assert out[0].shape == ref[0].shape
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-5, atol=1e-5)


def test_gelu_tanh_uses_the_exact_constant(tmp_path: Path) -> None:
    """Gelu(approximate='tanh') as its formula: torch-mlir's lowering scales by 0.797724 instead
    of sqrt(2 / pi) = 0.7978846, 1e-3 relative off near x = -2.5 (further out, f32's cancellation in
    1 + tanh swamps both)."""
    x = np.linspace(-3.0, 3.0, 61, dtype=np.float32).reshape(1, 61)
    m = _graph_model([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
                     {"x": (TensorProto.FLOAT, x)}, ["y"], [helper.make_opsetid("", 20)])
    path = tmp_path / "gelu.onnx"
    onnx.save(m, path)
    ref = onnx_reference(path, {"x": x})
    out, _ = compile_and_run(path, {"x": x}, tmp_path)
    np.testing.assert_allclose(out[0], ref[0], rtol=2e-4, atol=1e-7)


@pytest.mark.parametrize("op,direction,attrs,extras", [
    ("LSTM", "bidirectional", {}, ("B", "lens", "h0", "c0", "P")),  # peepholes, lengths 5 and 2
    ("LSTM", "reverse", {}, ("lens",)),
    ("GRU", "bidirectional", {"linear_before_reset": 1}, ("B", "lens", "h0")),
    ("GRU", "reverse", {}, ("B",)),
    ("RNN", "bidirectional", {}, ("B", "lens")),
])
def test_recurrent_nodes_unrolled_match_onnxruntime(tmp_path: Path, op, direction, attrs, extras) -> None:
    """RNN / GRU / LSTM unrolled over their time steps (torch-mlir lowers only the forward
    direction, to a loop, and drops LSTM's peepholes), sequence lengths read at run time."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    d, t, bsz, i, h = (2 if direction == "bidirectional" else 1), 5, 2, 3, 4
    rng = np.random.default_rng(17)
    feeds = {"X": _rand(rng, (t, bsz, i)), "W": _rand(rng, (d, gates * h, i)), "R": _rand(rng, (d, gates * h, h))}
    optional = {"B": _rand(rng, (d, 2 * gates * h)), "lens": np.array([5, 2], np.int32),
                "h0": _rand(rng, (d, bsz, h)), "c0": _rand(rng, (d, bsz, h)), "P": _rand(rng, (d, 3 * h))}
    names = ["X", "W", "R", "B", "lens", "h0", "c0", "P"][:3 + max(["B", "lens", "h0", "c0", "P"].index(e) + 1
                                                               for e in extras)]
    ins = [n if n in feeds or n in extras else "" for n in names]
    feeds.update({n: optional[n] for n in extras})
    outs = ["Y", "Yh"] + (["Yc"] if op == "LSTM" else [])
    m = _graph_model([helper.make_node(op, ins, outs, hidden_size=h, direction=direction, **attrs)],
                     {n: (TensorProto.INT32 if n == "lens" else TensorProto.FLOAT, a) for n, a in feeds.items()},
                     outs, [helper.make_opsetid("", 17)])
    path = tmp_path / "rec.onnx"
    onnx.save(m, path)
    ref = onnx_reference(path, feeds)
    out, _ = compile_and_run(path, feeds, tmp_path)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)


def test_lstm_batch_first_layout_matches_the_onnx_reference(tmp_path: Path) -> None:
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(18)
    feeds = {"X": _rand(rng, (2, 4, 3)), "W": _rand(rng, (2, 16, 3)), "R": _rand(rng, (2, 16, 4)),
             "h0": _rand(rng, (2, 2, 4))}
    m = _graph_model([helper.make_node("LSTM", ["X", "W", "R", "", "", "h0"], ["Y", "Yh", "Yc"], hidden_size=4,
                                       direction="bidirectional", layout=1)],
                     {n: (TensorProto.FLOAT, a) for n, a in feeds.items()}, ["Y", "Yh", "Yc"],
                     [helper.make_opsetid("", 17)])
    ref = ReferenceEvaluator(m).run(None, feeds)
    path = tmp_path / "lstm.onnx"
    onnx.save(m, path)
    out, _ = compile_and_run(path, feeds, tmp_path)
    for o, r in zip(out, ref):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)
