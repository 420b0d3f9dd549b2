"""Every dispatch names the ONNX nodes it computes, through fusion, in the bundle's manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from halbench.compiler.ir import merge_locs, node_names

pytest.importorskip("iree.compiler")
onnx = pytest.importorskip("onnx")
zoo = pytest.importorskip("halbench.bench.zoo")


def test_locations_to_node_names() -> None:
    assert node_names('"conv_Conv"') == ["conv_Conv"]
    assert node_names('fused["a", "b", "a"]') == ["a", "b"]
    assert node_names('"model.mlir":12:5') == []  # a file location names no node
    assert node_names("op #3 of @main") == []
    assert node_names(merge_locs('"a"', '"b", "a"', "")) == ["a", "b"]


def test_tiny_cnn_dispatches_name_their_nodes(tmp_path: Path) -> None:
    from halbench.bundle.archive import read_bundle
    from halbench.compiler import compile_model

    path = tmp_path / "tiny-cnn.onnx"
    zoo.save("tiny-cnn", str(path))
    graph_nodes = {n.name for n in onnx.load(str(path)).graph.node}
    cm = compile_model(path)
    steps = cm.manifest.functions[0].dispatches
    assert all(s.nodes for s in steps)
    assert all(set(s.nodes) <= graph_nodes for s in steps)
    # The first conv and its ReLU run as one dispatch (epilogue): both nodes are named.
    assert any(s.name == "conv+elementwise" and {"conv_Conv", "relu_Relu"} <= set(s.nodes) for s in steps)
    # Every Conv and Gemm of the model is computed by some dispatch.
    named = {n for s in steps for n in s.nodes}
    assert {n for n in graph_nodes if n.endswith(("_Conv", "_Gemm"))} <= named
    cm.write(tmp_path / "m.hbx")
    again = read_bundle(tmp_path / "m.hbx").manifest.functions[0].dispatches
    assert [s.nodes for s in again] == [s.nodes for s in steps]
