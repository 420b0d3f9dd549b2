"""The IR and the passes on their own: text form, dump-after, buffer reuse, barriers, options."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest

from halbench.compiler import CompileOptions, compile_model
from halbench.compiler.ir import Body, Graph, Node, Op, TensorType
from halbench.compiler.passes.assign_buffers import ALIGNMENT, assign_buffers
from halbench.compiler.pipeline import PASSES, run_pipeline
from halbench.errors import UserError
from tests.compiler.onnx_cases import CASES

pytest.importorskip("iree.compiler")


def _chain(n: int, size: int) -> Graph:
    """x -> neg -> neg -> ... (n generics), each intermediate ``size`` floats."""
    g = Graph()
    t = TensorType((size,), "f32")
    g.types["x"] = t
    g.inputs = [("x", "x")]
    prev = "x"
    for i in range(n):
        b = Body()
        b.yields = [b.add(Node("negf", (b.add(Node("arg", (), "f32", 0)),), "f32"))]
        out = f"%{i}"
        g.types[out] = t
        g.ops.append(Op("generic", [prev], [out], {
            "dims": [size], "iterators": ["parallel"], "maps": [(("d", 0),), (("d", 0),)], "body": b,
            "reduce": [None], "inits": [None], "init_consts": [None]}))
        prev = out
    g.outputs = [("y", prev)]
    return g


def test_liveness_reuses_memory_and_aligns() -> None:
    g = _chain(6, 100)
    # Keep them separate dispatches (no fusion): run buffers on the raw chain as dispatches.
    from halbench.compiler.passes.form_dispatches import form_dispatches

    g = assign_buffers(form_dispatches(g))
    offsets = {off for v, (buf, off) in g.storage.items() if buf == "transient"}
    assert all(o % ALIGNMENT == 0 for o in offsets)
    assert g.transient_nbytes <= 2 * 512  # ping-pong between two 400 B slots, not six
    assert g.storage["%5"][0] == "output:y"


def test_fusion_collapses_elementwise_chain() -> None:
    g = run_pipeline(_chain(5, 64))
    assert len(g.ops) == 1 and g.ops[0].attrs["kind"] == "elementwise"


def test_dump_after_prints_readable_ir(tmp_path: Path) -> None:
    model, _ = CASES["conv_relu6"](np.random.default_rng(0))
    onnx.save(model, tmp_path / "m.onnx")
    buf = io.StringIO()
    from halbench.compiler.frontend import load
    from halbench.compiler.parse import parse_module

    imp = load(tmp_path / "m.onnx")
    g = parse_module(imp.module, input_names=imp.input_names, output_names=imp.output_names,
                     blobs=imp.blobs, weight_names=imp.weight_names)
    run_pipeline(g, dump_after="form_dispatches", out=buf)
    text = buf.getvalue()
    assert "IR after form_dispatches" in text and "dispatch[depthwise_conv+elementwise]" in text
    assert "depthwise_conv2d(x, " in text and "epilogue:" in text and "select" in text
    assert "6.0" in text  # the Clip bound, inlined as a literal
    with pytest.raises(UserError, match="unknown pass"):
        run_pipeline(g, dump_after="nope")
    assert PASSES[0] == "parse" and "fuse_elementwise" in PASSES


def test_barriers_only_between_dependent_dispatches(tmp_path: Path) -> None:
    model, _ = CASES["attention"](np.random.default_rng(0))
    onnx.save(model, tmp_path / "m.onnx")
    steps = compile_model(tmp_path / "m.onnx").manifest.functions[0].steps
    kinds = [s.kind for s in steps]
    assert kinds.count("barrier") < kinds.count("dispatch")   # q/k/v projections run together
    assert all(b.offset % 256 == 0 for s in steps if s.kind == "dispatch" for b in s.bindings)


def test_compile_options_are_frozen_and_hash_stably() -> None:
    a = CompileOptions(input_shapes={"x": [1, 3, 8, 8]}, weights="random")
    b = CompileOptions(input_shapes={"x": (1, 3, 8, 8)}, weights="random", dump_after="cost")
    assert a.cache_key() == b.cache_key() and hash(a) == hash(CompileOptions(input_shapes={"x": (1, 3, 8, 8)}, weights="random"))
    assert a.cache_key() != CompileOptions().cache_key()
    with pytest.raises(AttributeError):
        a.weights = "file"  # type: ignore[misc]
    with pytest.raises(UserError):
        CompileOptions(weights="zeros")


def test_statistics_have_stage_times(tmp_path: Path) -> None:
    model, _ = CASES["gemm"](np.random.default_rng(0))
    onnx.save(model, tmp_path / "m.onnx")
    s = compile_model(tmp_path / "m.onnx").statistics
    assert {"import_onnx", "torch_to_linalg", "parse", "passes", "codegen", "schedule"} <= set(s["stages_s"])
    assert s["dispatches"] == 1 and s["flops"] == 2 * 3 * 16 * 10 + 3 * 10


@pytest.mark.parametrize("case,pattern", [("softmax_last", "softmax"), ("softmax_axis1", "softmax"),
                                          ("layernorm", "layer_norm"), ("attention", "softmax")])
def test_softmax_and_layer_norm_are_recognised(case: str, pattern: str, tmp_path: Path) -> None:
    model, _ = CASES[case](np.random.default_rng(0))
    onnx.save(model, tmp_path / "m.onnx")
    # the attention case's softmax would become part of a fused attention dispatch (test_attention.py)
    g = compile_model(tmp_path / "m.onnx", CompileOptions(fuse_attention=False)).graph
    tagged = [d for d in g.ops if d.attrs.get("pattern", ("",))[0] == pattern]
    # fuse_rows makes a group over the last axis one row dispatch holding the group's generics
    members = sum(len(d.attrs["root"].attrs["ops"]) if d.attrs["kind"] == "row" else 1 for d in tagged)
    assert members >= 4 and all(d.attrs["name"].startswith(pattern + ":") for d in tagged)
    assert any(d.attrs["kind"] == "row" for d in tagged) == (case != "softmax_axis1")


def _embedding_model(path: Path, reshape_to: list[int]) -> Path:
    """MiniLM's embedding head: ids (1x8, negative ones wrap) -> Reshape -> Gather(table) ->
    Reshape(``reshape_to``) -> + position rows: the reshapes sit between element-wise ops."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    table = numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "table")
    pos = numpy_helper.from_array(rng.standard_normal(reshape_to).astype(np.float32), "pos")
    flat = numpy_helper.from_array(np.array([8], np.int64), "flat")
    shape = numpy_helper.from_array(np.array(reshape_to, np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["ids", "flat"], ["ids_flat"]),
             helper.make_node("Gather", ["table", "ids_flat"], ["rows"], axis=0),
             helper.make_node("Reshape", ["rows", "shape"], ["rows3"]),
             helper.make_node("Add", ["rows3", "pos"], ["y"])]
    graph = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, reshape_to)],
                              [table, pos, flat, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(("reshape_to", "dispatches"), [([1, 8, 4], 1), ([2, 4, 4], 2)])
def test_fusion_looks_through_unit_dim_reshapes(reshape_to: list[int], dispatches: int, tmp_path: Path) -> None:
    """Index wrap, gather and add fuse into one dispatch across reshapes that only add or drop
    size-1 dims; a reshape that splits a dim keeps its dispatches apart. Both match onnxruntime."""
    from tests.compiler.helpers import compile_and_run, onnx_reference

    path = _embedding_model(tmp_path / "emb.onnx", reshape_to)
    ids = np.array([[0, 3, -1, 9, -10, 4, 2, 7]], np.int64)
    outs, cm = compile_and_run(path, {"ids": ids}, tmp_path, target_devices=("local",))
    assert len(cm.manifest.functions[0].dispatches) == dispatches
    np.testing.assert_allclose(outs[0], onnx_reference(path, {"ids": ids})[0], rtol=1e-6)
