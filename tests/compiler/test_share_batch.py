"""A batch matmul against a weight broadcast over the batch reads the 2-D weight in place
(passes/share_batch_operands.py): no broadcast dispatch, the same numbers as onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.compiler.helpers import compile_for, device_or_skip, onnx_reference, rel_err, run_local

pytest.importorskip("iree.compiler")


def _model(tmp: Path, shared: str, transpose: bool = False) -> tuple[Path, dict[str, np.ndarray]]:
    """MatMul of a [4, 24, 40] input by a [40, 56] weight (shared "b"), or of a [24, 40]
    weight by a [4, 40, 56] input (shared "a"); with ``transpose`` the weight is stored
    transposed and goes through a Transpose node first."""
    r = np.random.default_rng(3)
    nodes = []
    if shared == "b":
        w = r.standard_normal((56, 40) if transpose else (40, 56)).astype(np.float32)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 24, 40])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 24, 56])
        if transpose:
            nodes.append(helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]))
        nodes.append(helper.make_node("MatMul", ["x", "wt" if transpose else "w"], ["y"]))
        feeds = {"x": r.standard_normal((4, 24, 40)).astype(np.float32)}
    else:
        w = r.standard_normal((24, 40)).astype(np.float32)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 40, 56])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 24, 56])
        nodes.append(helper.make_node("MatMul", ["w", "x"], ["y"]))
        feeds = {"x": r.standard_normal((4, 40, 56)).astype(np.float32)}
    g = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(w, "w")])
    path = tmp / f"share_{shared}{'_t' if transpose else ''}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, feeds


@pytest.mark.parametrize("shared,transpose", [("b", False), ("b", True), ("a", False)])
def test_broadcast_weight_is_read_in_place(tmp_path: Path, shared: str, transpose: bool) -> None:
    from halbench.bundle import read_bundle

    path, feeds = _model(tmp_path, shared, transpose)
    ref = onnx_reference(path, feeds)[0]
    bundle = compile_for("vulkan", path, tmp_path)
    steps = read_bundle(bundle).manifest.functions[0].dispatches
    assert [s.name for s in steps] == [steps[0].name] and "batch_matmul" in steps[0].name, \
        "the broadcast copy of the weight should be gone: one batch_matmul dispatch"
    for uri in ("local-sync://", device_or_skip("vulkan://")):
        out = run_local(bundle, feeds, uri)[0]
        assert rel_err(out, ref) < 1e-5, uri


def test_shared_operand_recorded_in_the_tuning_problem(tmp_path: Path) -> None:
    from halbench.bundle import read_bundle

    path, _ = _model(tmp_path, "b")
    m = read_bundle(compile_for("vulkan", path, tmp_path)).manifest
    gemms = [v.gemm for e in m.executables for v in e.variants if v.gemm]
    assert gemms and all(g["problem"]["attrs"].get("shared") == "b" and len(g["problem"]["b"]) == 2 for g in gemms)
