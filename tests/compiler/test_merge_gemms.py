"""Sibling GEMMs merged into one (passes/merge_gemms.py): MiniLM-L6's Q, K and V projections are
one GEMM dispatch per layer that fused attention still reads in place; a torch.onnx-exported
self-attention and handmade Gemm / MatMul siblings match onnxruntime on local-sync:// and
vulkan:// (lavapipe) with the merge on, with fused attention off, and at --precision f16;
siblings that cannot be read in place are left alone; the CUDA kernels compile with NVRTC."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from halbench.compiler import CompileOptions, compile_model
from tests.compiler.helpers import onnx_reference, rel_err, run_local

pytest.importorskip("onnxruntime")
pytest.importorskip("iree.compiler")

TOLERANCE = 1e-4


def _names(cm) -> list[str]:
    return [s.name for s in cm.manifest.functions[0].dispatches]


def _gemms(names: list[str]) -> int:
    return sum(1 for n in names if n.split("+")[0] in ("matmul", "batch_matmul"))


def _check(outs, ref, what: str, tol: float = TOLERANCE) -> None:
    assert len(outs) == len(ref)
    for o, r in zip(outs, ref):
        assert o.shape == r.shape, what
        err = rel_err(o, r)
        assert err < tol, f"{what}: relative error {err:.2e}"


def _graph(path: Path, merge: bool, fuse: bool = True):
    from halbench.compiler.frontend import load
    from halbench.compiler.parse import parse_module
    from halbench.compiler.pipeline import run_pipeline

    imp = load(path, {}, {})
    g = parse_module(imp.module, input_names=imp.input_names, output_names=imp.output_names,
                     blobs=imp.blobs, weight_names=imp.weight_names)
    return run_pipeline(g, fuse_attention_blocks=fuse, merge_sibling_gemms=merge)


# -- MiniLM-L6 ----------------------------------------------------------------------------------

def test_minilm_qkv_is_one_gemm_per_layer_and_attention_still_fuses(tmp_path: Path) -> None:
    zoo = pytest.importorskip("halbench.bench.zoo")
    path = tmp_path / "minilm.onnx"
    zoo.save("minilm-l6", str(path), seq=128)
    on, off = _graph(path, True), _graph(path, False)
    names = [d.attrs["name"] for d in on.ops]
    # 3 projections -> 1, in each of the 6 layers
    assert len(on.ops) == len(off.ops) - 6 * 2
    assert _gemms(names) == _gemms([d.attrs["name"] for d in off.ops]) - 12
    assert names.count("attention:flash") == 6 and "transpose" not in [d.attrs["kind"] for d in on.ops]
    merged = [d for d in on.ops if d.attrs["kind"] == "batch_matmul"
              and on.types[d.attrs["root"].outputs[0]].shape[-1] == 3 * 384]
    assert len(merged) == 6 and all(d.attrs["epilogue"] is not None for d in merged)  # the biases ride along
    for d in on.ops:
        if d.attrs["kind"] == "attention":
            a = d.attrs["root"].attrs
            assert len(a["loads"]) == 3 and a["store"] is not None
            # Q, K and V: the same merged result, each at its own index of the sibling dim
            picks = sorted(next(int(v) for k, v in t.attrs["maps"][0] if k == "c") for t in a["loads"].values())
            assert picks == [0, 1, 2] and len({on.root(t.inputs[0]) for t in a["loads"].values()}) == 1


# -- a torch.onnx-exported BERT-style self-attention --------------------------------------------

def _self_attention(tmp: Path, manual: bool) -> tuple[Path, dict[str, np.ndarray]]:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    d, h, s = 64, 4, 12

    class SelfAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))

        def forward(self, x, mask):
            b = x.shape[0]

            def heads(t):
                return t.view(b, s, h, d // h).transpose(1, 2)

            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            if manual:
                a = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5 + mask, dim=-1) @ v
            else:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.o(a.transpose(1, 2).reshape(b, s, d))

    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((1, s, d)).astype(np.float32),
             "mask": np.where(rng.random((1, 1, 1, s)) < 0.3, -1e4, 0).astype(np.float32)}
    feeds["mask"][..., 0] = 0
    path = tmp / f"self_attention_{'manual' if manual else 'sdpa'}.onnx"
    torch.onnx.export(SelfAttention().eval(), tuple(torch.from_numpy(x) for x in feeds.values()), str(path),
                      opset_version=17, input_names=list(feeds), output_names=["y"], dynamo=False)
    return path, feeds


@pytest.mark.parametrize("manual", [False, True], ids=["sdpa", "manual"])
def test_torch_exported_self_attention(manual: bool, vk, tmp_path: Path, monkeypatch) -> None:
    path, feeds = _self_attention(tmp_path, manual)
    ref = onnx_reference(path, feeds)
    opts = {"target_devices": ("vulkan", "local"), "targets": {"vulkan": "lavapipe"}}
    cm = compile_model(path, CompileOptions(**opts))
    names = _names(cm)
    assert _gemms(names) == 2 and names.count("attention:flash") == 1 and "transpose" not in names, names
    off = _names(compile_model(path, CompileOptions(**opts, merge_gemms=False)))
    assert _gemms(off) == 4 and len(off) == len(names) + 2
    monkeypatch.setenv("HALBENCH_NO_MERGE_GEMMS", "1")
    assert _names(compile_model(path, CompileOptions(**opts))) == off
    monkeypatch.delenv("HALBENCH_NO_MERGE_GEMMS")
    # fused attention off: the head splits (transposes, or element-wise scales) are dispatches
    # that read the merged result; merged Q, K, V, then Q·Kᵀ, ·V and the output projection
    nofuse = compile_model(path, CompileOptions(**opts, fuse_attention=False))
    assert _gemms(_names(nofuse)) == 4
    for what, c in (("merged", cm), ("merged, attention unfused", nofuse)):
        bundle = tmp_path / "m.hbx"
        c.write(bundle)
        _check(run_local(bundle, feeds), ref, f"{what} on local-sync://")
        _check(run_local(bundle, feeds, "vulkan://"), ref, f"{what} on vulkan://")


def test_torch_exported_self_attention_at_f16_precision(vk, tmp_path: Path) -> None:
    """--precision f16: the merged GEMM takes the matrix path (attention stays unfused there)."""
    path, feeds = _self_attention(tmp_path, False)
    cm = compile_model(path, CompileOptions(target_devices=("vulkan", "local"), targets={"vulkan": "lavapipe"},
                                            precision="f16"))
    assert _gemms(_names(cm)) == 2 + 2  # Q, K, V merged; output projection; Q·Kᵀ and ·V
    bundle = tmp_path / "f16.hbx"
    cm.write(bundle)
    ref = onnx_reference(path, feeds)
    _check(run_local(bundle, feeds), ref, "f16 on local-sync://", 2e-3)
    _check(run_local(bundle, feeds, "vulkan://"), ref, "f16 on vulkan://", 2e-3)


# -- handmade siblings --------------------------------------------------------------------------

def _siblings(rows: int = 6, k: int = 8, n: int = 12) -> onnx.ModelProto:
    """Gemm(x, W1ᵀ, b1) -> Relu times Gemm(x, W2ᵀ, b2) -> Sigmoid, and x·W4 - x·W5 (through a
    transpose pair): four siblings that only element-wise ops read (fuse_elementwise folds the
    biases into them); x·W3 + b3 is a function output, so it cannot be read in place: left alone."""
    rng = np.random.default_rng(11)
    f = TensorProto.FLOAT

    def w(name: str, *shape: int):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [w("w1", n, k), w("b1", n), w("w2", n, k), w("b2", n), w("w3", k, n), w("b3", n),
             w("w4", k, n), w("w5", k, n)]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["g1"], transB=1),
             helper.make_node("Gemm", ["x", "w2", "b2"], ["g2"], transB=1),
             helper.make_node("Relu", ["g1"], ["r1"]), helper.make_node("Sigmoid", ["g2"], ["s2"]),
             helper.make_node("Mul", ["r1", "s2"], ["y"]),
             helper.make_node("MatMul", ["x", "w3"], ["m3"]), helper.make_node("Add", ["m3", "b3"], ["z"]),
             helper.make_node("MatMul", ["x", "w4"], ["m4"]), helper.make_node("MatMul", ["x", "w5"], ["m5"]),
             helper.make_node("Transpose", ["m5"], ["m5t"], perm=[1, 0]),
             helper.make_node("Transpose", ["m5t"], ["m5tt"], perm=[1, 0]),
             helper.make_node("Sub", ["m4", "m5tt"], ["u"])]
    g = helper.make_graph(nodes, "siblings", [helper.make_tensor_value_info("x", f, [rows, k])],
                          [helper.make_tensor_value_info(v, f, [rows, n]) for v in ("y", "z", "u")], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_handmade_siblings_merge_where_read_in_place(vk, tmp_path: Path) -> None:
    path = tmp_path / "siblings.onnx"
    onnx.save(_siblings(), path)
    g = _graph(path, True)
    shapes = sorted(tuple(g.types[d.attrs["root"].outputs[0]].shape) for d in g.ops
                    if d.attrs["kind"] in ("matmul", "batch_matmul"))
    off = _graph(path, False)
    assert len([d for d in off.ops if d.attrs["kind"] == "matmul"]) == 5
    assert shapes == [(6, 12), (6, 4 * 12)], shapes
    feeds = {"x": np.random.default_rng(2).standard_normal((6, 8)).astype(np.float32)}
    cm = compile_model(path, CompileOptions(target_devices=("vulkan", "local"), targets={"vulkan": "lavapipe"}))
    bundle = tmp_path / "siblings.hbx"
    cm.write(bundle)
    ref = onnx_reference(path, feeds)
    _check(run_local(bundle, feeds), ref, "siblings on local-sync://")
    _check(run_local(bundle, feeds, "vulkan://"), ref, "siblings on vulkan://")


# -- CUDA: NVRTC --------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_cuda_kernels_of_the_merged_block_compile_for_sm_90(precision: str, tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.drivers.cuda.cubin import cubin_arch

    path, _ = _self_attention(tmp_path, False)
    cm = compile_model(path, CompileOptions(target_devices=("cuda",), targets={"cuda": "sm_90"},
                                            backend_options={"cuda-formats": "cubin"}, precision=precision))
    assert _gemms(_names(cm)) == (2 if precision == "fp32" else 4)
    fn = cm.manifest.functions[0]
    assert fn.dispatches
    for ex in cm.manifest.executables:
        for v in ex.variants:
            assert cubin_arch(cm.members[v.member]) == "sm_90"
