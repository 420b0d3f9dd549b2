"""--weights random declares, by their derivation tree, the weights the compiler made of
seeded-random ones by moving and joining elements (a transposed Gemm weight from constant
folding, Q / K / V weights concatenated by merge_gemms), instead of storing them: the runtime
remakes them bit for bit (bundle.weights.derive_values), and the manifest schema checks an
untrusted tree before anything is sized from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from halbench.bundle.weights import DERIVE_LIMITS, derive_shape, derive_values, random_weight
from halbench.errors import UserError

# -- the tree's semantics --------------------------------------------------------------------


def _leaf(seed: int, shape: list[int], dtype: str = "f32") -> dict:
    return {"op": "random", "seed": seed, "dtype": dtype, "shape": shape}


def test_map_and_concat_are_numpy_transposes_and_concatenations() -> None:
    init = {"distribution": "normal", "scale": 0.02}
    a, b = random_weight("f32", (5, 3), 1, init), random_weight("f32", (5, 4), 2, init)
    # out[i0, i1, i2] = x[i2, i1]: a transpose with a size-1 dim in front (torch-mlir's folded copy)
    t = {"op": "map", "dims": [1, 3, 5], "axes": [2, 1], "of": [_leaf(1, [5, 3])]}
    assert derive_shape(t) == ((1, 3, 5), "f32")
    np.testing.assert_array_equal(derive_values(t, init), a.T[None])
    # a batch dim it does not read: broadcast (a MatMul weight copied per batch)
    bt = {"op": "map", "dims": [2, 3, 5], "axes": [2, 1], "of": [_leaf(1, [5, 3])]}
    np.testing.assert_array_equal(derive_values(bt, init), np.stack([a.T, a.T]))
    c = {"op": "concat", "axis": 1, "of": [_leaf(1, [5, 3]), _leaf(2, [5, 4])]}
    assert derive_shape(c) == ((5, 7), "f32")
    np.testing.assert_array_equal(derive_values(c, init), np.concatenate([a, b], axis=1))
    # 3-D, every permutation of the axes
    x = random_weight("f32", (2, 3, 4), 9, init)
    for axes in ([0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]):
        dims = [0, 0, 0]
        for j, k in enumerate(axes):
            dims[k] = x.shape[j]
        got = derive_values({"op": "map", "dims": dims, "axes": axes, "of": [_leaf(9, [2, 3, 4])]}, init)
        idx = np.indices(dims)
        np.testing.assert_array_equal(got, x[tuple(idx[k] for k in axes)], err_msg=str(axes))


@pytest.mark.parametrize(("tree", "match"), [
    ({"op": "fft", "of": [_leaf(1, [4])]}, "unknown weight derivation op 'fft'"),
    ({"op": "map", "dims": [4, 4], "axes": [0, 0], "of": [_leaf(1, [4, 4])]}, "distinct"),
    ({"op": "map", "dims": [3, 4], "axes": [1, 0], "of": [_leaf(1, [3, 4])]}, "need \\[4, 3\\]"),
    ({"op": "concat", "axis": 0, "of": [_leaf(1, [2, 3]), _leaf(2, [2, 4])]}, "do not fit"),
    ({"op": "concat", "axis": 2, "of": [_leaf(1, [2, 3])]}, "do not fit"),
    ({"op": "concat", "axis": 0, "of": []}, "needs 1 to"),
    ({"op": "concat", "axis": 0, "of": [_leaf(1, [2]), _leaf(2, [2], "f16")]}, "joins parts of types"),
    ({"op": "concat", "axis": -1, "of": [_leaf(1, [2])]}, "non-negative integers"),
    ({"op": "concat", "axis": 0, "of": [_leaf(1, [2])], "code": "x"}, "exactly the keys"),
    ({"op": "random", "seed": -1, "dtype": "f32", "shape": [2]}, "random leaf"),
    ({"op": "random", "seed": 1, "dtype": "i64", "shape": [2]}, "random leaf"),
    ({"op": "random", "seed": 1, "dtype": "f32", "shape": [2, -3]}, "random leaf"),
    ("leaf", "must be an object"),
])
def test_a_tree_that_does_not_fit_is_one_line_naming_the_problem(tree, match) -> None:
    with pytest.raises(UserError, match=match) as e:
        derive_shape(tree)
    assert "\n" not in str(e.value)


def test_deep_or_wide_trees_are_refused_before_they_are_walked_far() -> None:
    deep: dict = _leaf(1, [2])
    for _ in range(DERIVE_LIMITS["depth"] + 1):
        deep = {"op": "concat", "axis": 0, "of": [deep]}
    with pytest.raises(UserError, match="nests deeper"):
        derive_shape(deep)
    wide = {"op": "concat", "axis": 0, "of": [_leaf(i, [1]) for i in range(DERIVE_LIMITS["parts"] + 1)]}
    with pytest.raises(UserError, match="parts"):
        derive_shape(wide)
    many = {"op": "concat", "axis": 0, "of": [{"op": "concat", "axis": 0, "of": [_leaf(i, [1]) for i in range(60)]}
                                             for _ in range(5)]}  # 306 nodes, each concat within its cap
    with pytest.raises(UserError, match="more than 256 nodes"):
        derive_shape(many)


def test_the_manifest_schema_holds_the_tree_to_the_declared_weight() -> None:
    from pydantic import ValidationError

    from halbench.bundle.manifest_schema import WeightDoc

    tree = {"op": "map", "dims": [3, 5], "axes": [1, 0], "of": [_leaf(1, [5, 3])]}
    doc = {"name": "w", "buffer": 0, "dtype": "f32", "shape": [3, 5], "storage": "random", "seed": 1, "derive": tree}
    WeightDoc.model_validate(doc)
    WeightDoc.model_validate({**doc, "dtype": "f16", "random_dtype": "f32"})  # made in f32, then rounded
    for patch, match in (({"shape": [5, 3]}, "derive makes \\[3, 5\\]xf32, not the declared \\[5, 3\\]xf32"),
                         ({"dtype": "f16"}, "not the declared \\[3, 5\\]xf16"),
                         ({"storage": "file", "member": "weights/w.bin"}, "derive is for random weights"),
                         ({"derive": {**tree, "axes": [0, 1]}}, "derive: weight derivation 'map'")):
        with pytest.raises(ValidationError, match=match):
            WeightDoc.model_validate({**doc, **patch})


# -- the compiler declares them, the runtime remakes them --------------------------------------

def _sibling_gemms(tmp: Path, h: int) -> Path:
    """Three MatMuls of one [2, 8, h] activation by [h, h] weights stored transposed (Transpose
    nodes, as torch exports Linear layers), each plus a bias: folded transposes (at h = 16 by the
    parser, with the batch broadcast in; at h = 96 by fold_constants), merged into one GEMM; then
    a Gemm with transB=1 (a classifier head)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(5)
    inits, nodes, outs = [], [], []
    for k in "qkv":
        inits += [numpy_helper.from_array(r.standard_normal((h, h)).astype(np.float32), f"{k}.w"),
                  numpy_helper.from_array(r.standard_normal(h).astype(np.float32), f"{k}.b")]
        nodes += [helper.make_node("Transpose", [f"{k}.w"], [f"{k}.wt"], perm=[1, 0]),
                  helper.make_node("MatMul", ["x", f"{k}.wt"], [f"{k}.m"]),
                  helper.make_node("Add", [f"{k}.m", f"{k}.b"], [k])]
    nodes += [helper.make_node("Add", ["q", "k"], ["qk"]), helper.make_node("Mul", ["qk", "v"], ["h"]),
              helper.make_node("Reshape", ["h", "flat"], ["hf"]),
              helper.make_node("Gemm", ["hf", "head.w", "head.b"], ["y"], transB=1)]
    inits += [numpy_helper.from_array(np.array([2, 8 * h], np.int64), "flat"),
              numpy_helper.from_array(r.standard_normal((10, 8 * h)).astype(np.float32), "head.w"),
              numpy_helper.from_array(r.standard_normal(10).astype(np.float32), "head.b")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, h])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])]
    path = tmp / f"siblings{h}.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], outs, inits),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(("precision", "h"), [("fp32", 16), ("fp32", 96), ("f16", 96)])
def test_random_bundles_store_none_of_the_weights_the_compiler_moved_or_joined(tmp_path: Path, precision: str,
                                                                             h: int) -> None:
    pytest.importorskip("iree.compiler")
    import onnx

    from halbench.bundle import read_bundle
    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx, weight_array
    from halbench.compiler import CompileOptions, compile_model
    from tests.compiler.helpers import device_or_skip, onnx_reference, rel_err, run_local

    path = _sibling_gemms(tmp_path, h)
    opts = {"precision": precision, "target_devices": ("local", "vulkan")}
    if precision == "f16":  # the f16 weights are converted at compile time: drawn, made, then rounded
        opts.update(target_devices=("cuda",), targets={"cuda": "h100"}, backend_options={"cuda-formats": "cubin"})
        pytest.importorskip("cuda.bindings.nvrtc")
    cm = compile_model(path, CompileOptions(weights="random", **opts))
    cm.write(tmp_path / "r.hbx")
    man = read_bundle(tmp_path / "r.hbx").manifest  # through the schema, as a runtime reads it
    assert not any(m.startswith("weights/") for m in man.members), list(man.members)
    derived = {w.name: w for w in man.weights if w.derive is not None}
    ops = {w.derive["op"] for w in derived.values()}
    assert ops == {"map", "concat"}, ops  # the head's transposed weight; merged weights and biases
    assert any(w.derive["op"] == "concat" and all(p["op"] == "map" for p in w.derive["of"])
               for w in derived.values())  # Q / K / V: three folded transposes, joined
    # bit for bit what the compiler computed from the randomized model's initializers
    m = onnx.load(str(path))
    randomize_onnx(m, RANDOM_SEED)
    onnx.save(m, tmp_path / "randomized.onnx")
    stored = compile_model(tmp_path / "randomized.onnx", CompileOptions(**opts))
    by_name = {w.name: w for w in stored.manifest.weights}
    for name, w in derived.items():
        s = by_name[name]
        assert s.storage == "file"
        want = weight_array(s, stored.members[s.member])
        got = weight_array(w)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), name
        if precision == "f16":
            assert w.dtype == "f16" and w.random_dtype == "f32"
    if precision == "fp32":  # and it runs: the function onnxruntime computes on the randomized model
        feeds = {"x": np.random.default_rng(1).standard_normal((2, 8, h)).astype(np.float32)}
        ref = onnx_reference(tmp_path / "randomized.onnx", feeds)[0]
        for uri in ("local-sync://", device_or_skip("vulkan://")):
            assert rel_err(run_local(tmp_path / "r.hbx", feeds, uri)[0], ref) < 1e-5, uri
