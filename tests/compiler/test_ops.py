"""Every op, compiled and run on local-sync://, against onnxruntime (random data, never zero)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.compiler.helpers import compile_and_run, onnx_reference, rel_err
from tests.compiler.onnx_cases import CASES

pytest.importorskip("onnxruntime")
pytest.importorskip("iree.compiler")

TOLERANCE = 1e-4


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    model, feeds = CASES[name](np.random.default_rng(abs(hash(name)) % 2**32))
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    ref = onnx_reference(path, feeds)
    out, cm = compile_and_run(path, feeds, tmp_path)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape
        assert np.any(r != 0)
        assert rel_err(o, r) <= TOLERANCE, f"{name}: relative error {rel_err(o, r):.2e}"


def test_conv_bias_relu6_is_one_dispatch(tmp_path: Path) -> None:
    model, feeds = CASES["conv_relu6"](np.random.default_rng(0))
    onnx.save(model, tmp_path / "m.onnx")
    _, cm = compile_and_run(tmp_path / "m.onnx", feeds, tmp_path)
    names = [d.attrs["name"] for d in cm.graph.ops]
    assert names == ["depthwise_conv+elementwise"]  # pad, bias and clip all fused


def test_softmax_fuses_exp_into_sum(tmp_path: Path) -> None:
    model, feeds = CASES["softmax_last"](np.random.default_rng(0))
    onnx.save(model, tmp_path / "m.onnx")
    _, cm = compile_and_run(tmp_path / "m.onnx", feeds, tmp_path)
    kinds = [d.attrs["kind"] for d in cm.graph.ops]
    # fuse_rows makes the softmax one row dispatch; inside it, the exp stays fused into the sum:
    # two reductions (max, sum of exp) and at most four ops in all
    (row,) = [d for d in cm.graph.ops if d.attrs["kind"] == "row"]
    inner = row.attrs["root"].attrs["ops"]
    reductions = [o for o in inner if any(o.attrs.get("reduce") or ())]
    assert kinds == ["row"] and len(reductions) == 2 and len(inner) <= 4
