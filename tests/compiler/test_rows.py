"""Fused softmax / layer norm (passes/fuse_rows.py, codegen/rows.py): one dispatch per group,
the same results as onnxruntime on local-sync:// and vulkan:// (lavapipe: its subgroup
arithmetic and the generic target's shared-memory tree, both ABIs) and webgpu://, CUDA row
kernels through NVRTC, and groups that must not fuse (a softmax over a non-last axis, a layer
norm whose mean is also used elsewhere) still right."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from halbench.compiler import CompileOptions, compile_model
from tests.compiler.helpers import device_or_skip, onnx_reference, rel_err, run_local

pytest.importorskip("onnxruntime")
pytest.importorskip("iree.compiler")

TOLERANCE = 1e-4
_RNG = np.random.default_rng(12)


def _init(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((_RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes: list, inits: list, inputs: list, outputs: list, opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "rows", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def bert_layer(seq: int = 16, hidden: int = 64) -> onnx.ModelProto:
    """Self-attention (one head) with a scaled, masked softmax, a residual and LayerNormalization,
    then a GELU-free MLP with a second layer norm written out as ReduceMean / Sub / Pow / Sqrt."""
    f = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f, [2, seq, hidden])
    y = helper.make_tensor_value_info("y", f, [2, seq, hidden])
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Add", ["ss", "mask"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["a"]),
        helper.make_node("Add", ["a", "x"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "g1", "b1"], ["n1"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["n1", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Add", ["hr", "n1"], ["r2"]),
        helper.make_node("ReduceMean", ["r2"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["r2", "mu"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["nd"]),
        helper.make_node("Mul", ["nd", "g2"], ["ng"]),
        helper.make_node("Add", ["ng", "b2"], ["y"]),
    ]
    mask = np.zeros((1, 1, seq), np.float32)
    mask[..., seq - 3:] = -10000.0
    inits = [_init("wq", hidden, hidden), _init("wk", hidden, hidden), _init("w1", hidden, hidden),
             numpy_helper.from_array(np.float32(hidden ** -0.5).reshape(()), "scale"),
             numpy_helper.from_array(mask, "mask"),
             _init("g1", hidden, scale=1.0), _init("b1", hidden), _init("g2", hidden, scale=1.0), _init("b2", hidden),
             numpy_helper.from_array(np.float32(2.0).reshape(()), "two"),
             numpy_helper.from_array(np.float32(1e-6).reshape(()), "eps")]
    # ReduceMean takes axes as an attribute up to opset 17
    return _model(nodes, inits, [x], [y], opset=17)


def softmax_axis1() -> onnx.ModelProto:
    """Softmax over a non-last axis: its rows are strided, so it keeps its dispatches."""
    f = TensorProto.FLOAT
    return _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [],
                  [helper.make_tensor_value_info("x", f, [2, 24, 8])], [helper.make_tensor_value_info("y", f, [2, 24, 8])])


def layer_norm_mean_used() -> onnx.ModelProto:
    """A layer norm whose mean is also a graph output and feeds another op."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["x", "mu"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["nd"]),
        helper.make_node("Mul", ["nd", "g"], ["ng"]),
        helper.make_node("Add", ["ng", "b"], ["y"]),
        helper.make_node("Mul", ["mu", "three"], ["m3"]),
    ]
    inits = [_init("g", 96, scale=1.0), _init("b", 96),
             numpy_helper.from_array(np.float32(1e-5).reshape(()), "eps"),
             numpy_helper.from_array(np.float32(3.0).reshape(()), "three")]
    return _model(nodes, inits, [helper.make_tensor_value_info("x", f, [3, 5, 96])],
                  [helper.make_tensor_value_info("y", f, [3, 5, 96]), helper.make_tensor_value_info("m3", f, [3, 5, 1]),
                   helper.make_tensor_value_info("mu", f, [3, 5, 1])])


def long_softmax() -> onnx.ModelProto:
    """A softmax over 5000 elements: longer than a workgroup keeps in registers (the looping,
    re-reading row kernel)."""
    f = TensorProto.FLOAT
    return _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [],
                  [helper.make_tensor_value_info("x", f, [3, 5000])], [helper.make_tensor_value_info("y", f, [3, 5000])])


MODELS = {"bert_layer": bert_layer, "softmax_axis1": softmax_axis1,
          "layer_norm_mean_used": layer_norm_mean_used, "long_softmax": long_softmax}


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = (rng.standard_normal(shape) * 2).astype(np.float32)
    return out


def _kinds(cm) -> list[str]:
    return [d.attrs["name"] for d in cm.graph.ops]


def _compile(name: str, tmp: Path, apis: tuple[str, ...], **options: object):
    model = MODELS[name]()
    path = tmp / f"{name}.onnx"
    onnx.save(model, path)
    # attention blocks stay unfused here: these tests are about the row dispatches
    # (test_attention.py covers the fused attention kernel)
    options.setdefault("fuse_attention", False)
    cm = compile_model(path, CompileOptions(target_devices=apis, **options))
    bundle = tmp / f"{name}.hbx"
    cm.write(bundle)
    return cm, path, bundle, _feeds(model)


def _pipeline(path: Path):
    """The IR after every pass, and the number of dispatches before fuse_rows."""
    import io

    from halbench.compiler.frontend import load
    from halbench.compiler.parse import parse_module
    from halbench.compiler.pipeline import run_pipeline

    imp = load(path, {}, {})
    g = parse_module(imp.module, input_names=imp.input_names, output_names=imp.output_names,
                     blobs=imp.blobs, weight_names=imp.weight_names)
    text = io.StringIO()
    out = run_pipeline(g, "recognize_patterns", text, fuse_attention_blocks=False)
    return out, text.getvalue().count(" = dispatch[")


def _fused_away(g) -> int:
    return sum(len(d.attrs["root"].attrs["ops"]) - 1 for d in g.ops if d.attrs["kind"] == "row")


def _check(out: list[np.ndarray], ref: list[np.ndarray], what: str) -> None:
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and np.isfinite(o).all()
        assert rel_err(o, r) <= TOLERANCE, f"{what}: relative error {rel_err(o, r):.2e}"


# -- what fuses ---------------------------------------------------------------------------------

def test_minilm_layer_norms_and_softmaxes_are_one_dispatch_each(tmp_path: Path) -> None:
    zoo = pytest.importorskip("halbench.bench.zoo")
    from halbench.compiler.passes.fuse_rows import fuse_rows

    path = tmp_path / "minilm.onnx"
    zoo.save("minilm-l6", str(path), seq=128)
    g, before = _pipeline(path)
    names = [d.attrs["name"] for d in g.ops]
    assert names.count("layer_norm:row") == 13 and names.count("softmax:row") == 6
    # nothing tagged is left unfused; a layer norm was 4 dispatches (the mean and the variance's
    # scaling fuse into their readers across the size-1 reshapes), a softmax 4
    assert not [n for n in names if n.startswith(("layer_norm:", "softmax:")) and not n.endswith(":row")]
    sizes = {(d.attrs["pattern"][0], len(d.attrs["root"].attrs["ops"])) for d in g.ops if d.attrs["kind"] == "row"}
    assert sizes == {("layer_norm", 4), ("softmax", 4)}
    assert len(g.ops) == before - 13 * 3 - 6 * 3  # 146 -> 89 (188 -> 105 before the reshapes fused)
    assert len(fuse_rows(g).ops) == len(g.ops)  # a fused group is not fused again


def test_bert_layer_fuses_and_matches_onnxruntime_locally(tmp_path: Path) -> None:
    cm, path, bundle, feeds = _compile("bert_layer", tmp_path, ("local",))
    names = _kinds(cm)
    assert names.count("softmax:row") == 1 and names.count("layer_norm:row") == 2, names
    _, before = _pipeline(path)
    assert len(names) == before - _fused_away(cm.graph) and _fused_away(cm.graph) >= 3 + 2 * 3
    _check(run_local(bundle, feeds), onnx_reference(path, feeds), "bert_layer on local-sync://")


def test_softmax_over_a_non_last_axis_keeps_its_dispatches(tmp_path: Path) -> None:
    cm, path, bundle, feeds = _compile("softmax_axis1", tmp_path, ("local",))
    assert "softmax:row" not in _kinds(cm)
    _check(run_local(bundle, feeds), onnx_reference(path, feeds), "softmax axis=1")


def test_layer_norm_whose_mean_is_used_elsewhere(tmp_path: Path) -> None:
    cm, path, bundle, feeds = _compile("layer_norm_mean_used", tmp_path, ("local",))
    rows = [d for d in cm.graph.ops if d.attrs["kind"] == "row"]
    # fused with the mean bound as a second output of the row dispatch, or left as it was
    for d in rows:
        assert len(d.outputs) >= 2
    _check(run_local(bundle, feeds), onnx_reference(path, feeds), "layer norm, mean used")


# -- GPU code -----------------------------------------------------------------------------------

def _row_dispatches(name: str, tmp: Path):
    cm, *_ = _compile(name, tmp, ("local",))
    return cm.graph, [d for d in cm.graph.ops if d.attrs["kind"] == "row"]


def test_reductions_use_subgroups_where_the_target_has_them(tmp_path: Path) -> None:
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.compiler.codegen.glsl import glsl_sources
    from halbench.compiler.codegen.hip import hip_source
    from halbench.compiler.codegen.wgsl import wgsl_source

    g, rows = _row_dispatches("bert_layer", tmp_path)
    assert rows
    for d in rows:
        _, lvp = glsl_sources(d, g, "lavapipe")
        assert "subgroupAdd(" in lvp["bda"] + lvp["descriptors"] or "subgroupMax(" in lvp["bda"]
        _, generic = glsl_sources(d, g, None)  # vulkan-generic: no subgroup arithmetic assumed
        assert "subgroup" not in generic["descriptors"] and "barrier();" in generic["descriptors"]
        plan, nv = glsl_sources(d, g, "h100")  # NVIDIA: subgroups of 32
        if plan.workgroup_size[0] <= 32:  # one subgroup there; the shared path only for smaller subgroups
            assert "if (gl_NumSubgroups > 1) {" in nv["bda"]
        _, cu = cuda_source(d, g, "sm_90")
        assert "__shfl_xor_sync(0xffffffffu" in cu
        _, hip = hip_source(d, g, "gfx942")
        assert "__shfl_xor(" in hip and "__shfl_xor_sync" not in hip
        _, text = wgsl_source(d, g, None)
        assert "workgroupBarrier()" in text and "subgroup" not in text


def test_cuda_row_kernels_compile_with_nvrtc(tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import generate_cuda

    for name in ("bert_layer", "long_softmax", "layer_norm_mean_used"):
        g, rows = _row_dispatches(name, tmp_path)
        for d in rows:
            cubin, ptx = generate_cuda(d, g, "sm_90")
            assert cubin.target == "sm_90" and b"shfl.sync.bfly" in ptx.payload


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("target, abi", [("lavapipe", "bda"), ("lavapipe", "descriptors"), (None, "bda"),
                                         ("h100", "bda")])
def test_on_vulkan_matches_onnxruntime(name: str, target: str | None, abi: str, tmp_path: Path) -> None:
    dev = device_or_skip("vulkan://")
    opts: dict = {"backend_options": {"vulkan-dispatch-abi": abi}}
    if target:
        opts["targets"] = {"vulkan": target}
    _, path, bundle, feeds = _compile(name, tmp_path, ("vulkan", "local"), **opts)
    ref = onnx_reference(path, feeds)
    _check(run_local(bundle, feeds, dev), ref, f"{name} on {dev} ({target or 'generic'}, {abi})")
    _check(run_local(bundle, feeds, "local-sync://"), ref, f"{name} on local-sync://")


@pytest.mark.parametrize("name", ["bert_layer", "long_softmax"])
def test_on_webgpu_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    dev = device_or_skip("webgpu://")
    cm, path, bundle, feeds = _compile(name, tmp_path, ("webgpu", "local"))
    assert any(d.attrs["kind"] == "row" for d in cm.graph.ops)
    _check(run_local(bundle, feeds, dev), onnx_reference(path, feeds), f"{name} on {dev}")
