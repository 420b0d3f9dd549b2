"""Fused attention (passes/fuse_attention.py, codegen/attention.py): Q·Kᵀ, scale, mask, softmax
and ·V become one flash-attention dispatch; the same results as onnxruntime on local-sync://
and vulkan:// (lavapipe: the subgroup-shuffle and the shared-memory lane combines, both ABIs,
odd shapes), MiniLM-L6 included; CUDA kernels through NVRTC (warp shuffles); chains that must not
fuse left as they were."""

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


def attention_model(b: int = 1, h: int = 2, m: int = 5, n: int = 7, dk: int = 8, dv: int = 8,
                    mask: bool = True, export_p: bool = False) -> onnx.ModelProto:
    """softmax(Q·Kᵀ * dk^-0.5 + mask)·V over [b, h] heads, Q [m, dk], K [n, dk], V [n, dv]."""
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("q", f, [b, h, m, dk]), helper.make_tensor_value_info("k", f, [b, h, n, dk]),
           helper.make_tensor_value_info("v", f, [b, h, n, dv])]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"])]
    inits = [numpy_helper.from_array(np.float32(dk ** -0.5).reshape(()), "scale")]
    last = "ss"
    if mask:
        ins.append(helper.make_tensor_value_info("mask", f, [b, 1, 1, n]))
        nodes.append(helper.make_node("Add", ["ss", "mask"], ["sm"]))
        last = "sm"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"])]
    outs = [helper.make_tensor_value_info("o", f, [b, h, m, dv])]
    if export_p:
        outs.append(helper.make_tensor_value_info("p", f, [b, h, m, n]))
    g = helper.make_graph(nodes, "attention", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    out = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
           for i in model.graph.input}
    if "mask" in out:  # about a third of the keys masked, the first never (no fully masked row)
        mask = np.where(rng.random(out["mask"].shape) < 0.3, -10000.0, 0.0).astype(np.float32)
        mask[..., 0] = 0.0
        out["mask"] = mask
    return out


def _compile(model: onnx.ModelProto, tmp: Path, apis: tuple[str, ...] = ("local",), **options: object):
    path = tmp / "attention.onnx"
    onnx.save(model, path)
    cm = compile_model(path, CompileOptions(target_devices=apis, **options))
    bundle = tmp / "attention.hbx"
    cm.write(bundle)
    return cm, path, bundle


def _names(cm) -> list[str]:
    return [d.attrs["name"] for d in cm.graph.ops]


def _check(out: list[np.ndarray], ref: list[np.ndarray], what: str) -> None:
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and np.isfinite(o).all() and np.any(r != 0)
        assert rel_err(o, r) <= TOLERANCE, f"{what}: relative error {rel_err(o, r):.2e}"


#: (b, h, m, n, dk, dv): tiny; ragged (N neither a power of two nor a multiple of the 32-key
#: tile, M not a multiple of the row block); two keys; MiniLM's head dims; the head-dim limit.
SHAPES = [(1, 2, 5, 7, 8, 8), (2, 2, 33, 70, 16, 24), (1, 1, 3, 2, 4, 4), (1, 3, 16, 40, 32, 32),
          (1, 1, 9, 37, 64, 64)]


# -- what fuses ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_attention_is_one_dispatch_and_matches_onnxruntime_locally(shape: tuple, tmp_path: Path) -> None:
    model = attention_model(*shape)
    cm, path, bundle = _compile(model, tmp_path)
    names = _names(cm)
    # the transpose of K is read through: the whole graph is one dispatch
    assert names == ["attention:flash"], names
    (tmp_path / "off").mkdir()
    off, *_ = _compile(model, tmp_path / "off", fuse_attention=False)
    # unfused: the transpose, Q·Kᵀ, the scale+mask, the softmax row, ·V
    assert _names(off) == ["transpose", "batch_matmul", "elementwise", "softmax:row", "batch_matmul"], _names(off)
    feeds = _feeds(model)
    _check(run_local(bundle, feeds), onnx_reference(path, feeds), f"attention {shape} on local-sync://")


def test_attention_without_mask_fuses(tmp_path: Path) -> None:
    model = attention_model(1, 2, 6, 19, 8, 12, mask=False)
    cm, path, bundle = _compile(model, tmp_path)
    assert "attention:flash" in _names(cm)
    feeds = _feeds(model)
    _check(run_local(bundle, feeds), onnx_reference(path, feeds), "attention without a mask")


def test_softmax_also_a_graph_output_keeps_its_dispatches(tmp_path: Path) -> None:
    model = attention_model(1, 2, 5, 7, 8, 8, export_p=True)
    cm, path, bundle = _compile(model, tmp_path)
    names = _names(cm)
    assert "attention:flash" not in names and "softmax:row" in names
    feeds = _feeds(model)
    _check(run_local(bundle, feeds), onnx_reference(path, feeds), "attention, p exported")


def test_head_dim_over_the_limit_keeps_its_dispatches(tmp_path: Path) -> None:
    from halbench.compiler.passes.fuse_attention import MAX_HEAD_DIM

    model = attention_model(1, 1, 4, 6, MAX_HEAD_DIM + 32, 8)
    cm, path, bundle = _compile(model, tmp_path)
    assert "attention:flash" not in _names(cm) and "softmax:row" in _names(cm)
    feeds = _feeds(model)
    _check(run_local(bundle, feeds), onnx_reference(path, feeds), "attention, head dim 96")


def test_env_switch_turns_the_fusion_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CompileOptions().fuse_attention is True
    on_key = CompileOptions().to_dict()
    monkeypatch.setenv("HALBENCH_NO_FUSE_ATTENTION", "1")
    off = CompileOptions()
    assert off.fuse_attention is False and off.to_dict() != on_key  # another bundle, another cache key
    assert CompileOptions(fuse_attention=True).fuse_attention is True


def test_manifest_names_the_fused_dispatch(tmp_path: Path) -> None:
    from halbench.bundle import read_bundle

    _, _, bundle = _compile(attention_model(), tmp_path)
    names = [s.name for s in read_bundle(bundle).manifest.functions[0].dispatches]
    assert "attention:flash" in names


# -- MiniLM-L6 ----------------------------------------------------------------------------------

def _minilm(tmp: Path, seq: int) -> Path:
    zoo = pytest.importorskip("halbench.bench.zoo")
    path = tmp / f"minilm{seq}.onnx"
    zoo.save("minilm-l6", str(path), seq=seq)
    return path


def test_minilm_attention_blocks_are_one_dispatch_each(tmp_path: Path) -> None:
    from halbench.compiler.frontend import load
    from halbench.compiler.parse import parse_module
    from halbench.compiler.pipeline import run_pipeline

    imp = load(_minilm(tmp_path, 128), {}, {})

    def graph(fuse: bool):
        g = parse_module(imp.module, input_names=imp.input_names, output_names=imp.output_names,
                         blobs=imp.blobs, weight_names=imp.weight_names)
        return run_pipeline(g, fuse_attention_blocks=fuse)

    on, off = graph(True), graph(False)
    names = [d.attrs["name"] for d in on.ops]
    assert names.count("attention:flash") == 6 and "softmax:row" not in names
    # each of the 6 blocks was Q·Kᵀ, the scale+mask, the softmax row and ·V, and the head split
    # of Q, K, V and the head merge of O (transposes, now read / written through): 8 -> 1
    assert len(on.ops) == len(off.ops) - 6 * 7
    assert not [d for d in on.ops if d.attrs["kind"] == "transpose"]
    assert all(d.attrs["root"].attrs["store"] is not None and len(d.attrs["root"].attrs["loads"]) == 3
               for d in on.ops if d.attrs["kind"] == "attention")
    att = [d.attrs["root"].attrs for d in on.ops if d.attrs["kind"] == "attention"]
    assert {(a["bh"], a["m"], a["n"], a["dk"], a["dv"]) for a in att} == {(12, 128, 128, 32, 32)}


@pytest.mark.parametrize("abi", ["bda", "descriptors"])
def test_minilm_matches_onnxruntime_on_local_and_vulkan(vk, tmp_path: Path, abi: str) -> None:
    """MiniLM with its attention fused and its Q / K / V GEMMs merged (read in place through
    the merged result) on both Vulkan dispatch ABIs."""
    zoo = pytest.importorskip("halbench.bench.zoo")
    path = _minilm(tmp_path, 16)
    feeds = zoo.make_inputs("minilm-l6", seq=16)
    cm = compile_model(path, CompileOptions(target_devices=("vulkan", "local"), targets={"vulkan": "lavapipe"},
                                            backend_options={"vulkan-dispatch-abi": abi}))
    assert _names(cm).count("attention:flash") == 6
    bundle = tmp_path / "minilm.hbx"
    cm.write(bundle)
    ref = onnx_reference(path, feeds)
    _check(run_local(bundle, feeds), ref, "minilm-l6 seq 16 on local-sync://")
    _check(run_local(bundle, feeds, "vulkan://"), ref, "minilm-l6 seq 16 on vulkan://")


# -- GPU code -----------------------------------------------------------------------------------

def _matches_on_vulkan(shape: tuple, tmp: Path, target: str | None, abi: str = "bda", what: str = "") -> None:
    """``shape``'s attention model fuses, runs on vulkan:// (lavapipe) for ``target`` and matches
    onnxruntime."""
    opts: dict = {"backend_options": {"vulkan-dispatch-abi": abi}}
    if target:
        opts["targets"] = {"vulkan": target}
    model = attention_model(*shape)
    cm, path, bundle = _compile(model, tmp, ("vulkan", "local"), **opts)
    assert "attention:flash" in _names(cm)
    feeds = _feeds(model)
    _check(run_local(bundle, feeds, "vulkan://"), onnx_reference(path, feeds),
           f"attention {shape}{what} on vulkan:// ({target or 'generic'}, {abi})")


@pytest.mark.parametrize("target, abi", [("lavapipe", "bda"), ("lavapipe", "descriptors"), (None, "bda")])
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[1], SHAPES[2]], ids=lambda s: "x".join(map(str, s)))
def test_on_vulkan_matches_onnxruntime(vk, shape: tuple, target: str | None, abi: str, tmp_path: Path) -> None:
    _matches_on_vulkan(shape, tmp_path, target, abi)


def _attention_dispatches(tmp: Path, shape: tuple):
    cm, *_ = _compile(attention_model(*shape), tmp)
    return cm.graph, [d for d in cm.graph.ops if d.attrs["kind"] == "attention"]


def test_lane_combine_uses_shuffles_where_the_target_has_them(tmp_path: Path) -> None:
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.compiler.codegen.glsl import glsl_sources
    from halbench.compiler.codegen.hip import hip_source

    g, (d,) = _attention_dispatches(tmp_path, (1, 2, 33, 128, 32, 32))  # 8 lanes per query row
    _, cu = cuda_source(d, g, "sm_90")
    assert "__shfl_xor_sync(0xffffffffu, hmx0, 4)" in cu and "hmx0 = (y > hmx0)" in cu
    _, hip = hip_source(d, g, "gfx942")
    assert "__shfl_xor(" in hip and "__shfl_xor_sync" not in hip
    _, generic = glsl_sources(d, g, None)  # shared memory, no subgroup operations
    assert "hb_sm[" in generic["bda"] and "subgroup" not in generic["bda"]
    _, h100 = glsl_sources(d, g, "h100")  # Vulkan with subgroup arithmetic: subgroup shuffles
    assert "subgroupShuffleXor(hmx0, 4u)" in h100["bda"] and "GL_KHR_shader_subgroup_shuffle" in h100["bda"]
    assert "gl_SubgroupInvocationID" in h100["descriptors"]
    # a Vulkan device with subgroup arithmetic but no shuffles (both optional): shared memory
    import dataclasses

    from halbench.compiler.targets import resolve_target

    no_shuffle = dataclasses.replace(resolve_target("vulkan", "h100"), subgroup_shuffle=False)
    _, vk_ns = glsl_sources(d, g, no_shuffle)
    assert "subgroupShuffle" not in vk_ns["bda"] and "hb_sm[" in vk_ns["bda"]
    # K and V tiles staged in shared memory as 16-byte vectors, read once per 4 * rows FMAs
    assert "__shared__ float4 hb_sm[" in cu and "float4 hk0_0 = hb_sm[" in cu
    assert "hs1_0 = hs1_0 + hq1_0 * hk0_0.x;" in cu  # the second query row reuses the key vector
    # the lanes' outputs: a reduce-scatter (each of the 8 lanes ends with 4 of the 32), stored
    # as one 16-byte vector per row
    assert "ho0_0 = (hup4 ? ho0_16 : ho0_0) + __shfl_xor_sync(0xffffffffu, (hup4 ? ho0_0 : ho0_16), 4);" in cu
    assert "(4 * lane + 0)) / 4] = make_float4(ho0_0 * hinv0" in cu


def test_register_tile_and_workgroups_follow_the_problem() -> None:
    """MiniLM's attention on the H100: 2 query rows x 16 (CUDA: one 128-key tile) or 8 (Vulkan:
    64-key tiles) keys per thread and tile at batch 8, one row per thread and smaller workgroups
    at batch 1 (12 heads: still >= 132 workgroups)."""
    from halbench.compiler.codegen.attention import attention_shape
    from halbench.compiler.codegen.tuning import tuning_for

    for api in ("cuda", "vulkan"):
        t = tuning_for("h100", api)
        b8, b1 = attention_shape(t, 128, 128, 32, 32, 96), attention_shape(t, 128, 128, 32, 32, 12)
        assert (b8["RM"], b8["G"], b8["TN"] // b8["G"]) == (2, 8, 16 if api == "cuda" else 8)
        assert 12 * -(-128 // b1["BM"]) >= t.compute_units and b1["T"] % 32 == 0
        assert b8["combine"] == ("shuffle" if api == "cuda" else "subgroup")
    web = attention_shape(tuning_for(None, "webgpu"), 128, 128, 64, 64)
    assert web["combine"] == "shared" and web["vectors"] * 16 <= 16384  # WebGPU's 16 KiB


#: (b, h, m, n, dk, dv): odd sequence lengths, head dims that are not multiples of 4 (scalar
#: staging, partial vectors), one head at batch 1, more rows than one workgroup's block.
ODD_SHAPES = [(1, 1, 37, 53, 6, 10), (2, 3, 17, 9, 12, 5), (1, 1, 70, 129, 20, 20), (1, 2, 1, 5, 3, 3),
              (1, 2, 20, 64, 16, 32)]


@pytest.mark.parametrize("target", ["lavapipe", None, "h100"])
@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes_on_vulkan_match_onnxruntime(vk, shape: tuple, target: str | None, tmp_path: Path) -> None:
    """The subgroup combine (lavapipe: 4 lanes of its 8-wide subgroups; the H100 target's code: 8
    lanes, one lavapipe subgroup), the shared-memory combine (generic), masks and ragged tiles.
    Where the H100's code takes 16 lanes a row, lavapipe refuses the bundle at load by name."""
    if target == "h100":
        from halbench.compiler.codegen.attention import attention_shape
        from halbench.compiler.codegen.tuning import tuning_for

        b, h, m, n, dk, dv = shape
        lanes = attention_shape(tuning_for("h100", "vulkan"), m, n, dk, dv, b * h)["G"]
        if lanes > 8:  # the H100's code puts 16 lanes of a row in one subgroup; lavapipe's have 8
            from halbench.errors import UserError

            cm, _, bundle = _compile(attention_model(*shape), tmp_path, ("vulkan",), targets={"vulkan": "h100"})
            variants = [v for e in cm.manifest.executables for v in e.variants]
            assert any(f"subgroupSize{lanes}" in v.requires for v in variants)
            with pytest.raises(UserError, match=rf"needs subgroups of at least {lanes} invocations; "
                                                r"llvmpipe.*'s may hold 8"):
                run_local(bundle, _feeds(attention_model(*shape)), "vulkan://")
            return
    _matches_on_vulkan(shape, tmp_path, target, "descriptors")


@pytest.mark.parametrize("target", ["lavapipe", None])
def test_query_rows_in_shared_memory_match_onnxruntime(vk, target: str | None, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's other query layout (attention.Q_SHARED: the block's rows staged in shared
    memory beside the key tiles) on the ragged shapes."""
    from halbench.compiler.codegen import attention
    from halbench.compiler.codegen.glsl import glsl_sources

    monkeypatch.setattr(attention, "Q_SHARED", True)
    g, (d,) = _attention_dispatches(tmp_path, SHAPES[1])
    assert "hqs0_0 = hb_sm[" in glsl_sources(d, g, target)[1]["bda"]
    for shape in ODD_SHAPES + [SHAPES[1]]:
        (tmp_path / "x".join(map(str, shape))).mkdir()
        _matches_on_vulkan(shape, tmp_path / "x".join(map(str, shape)), target, what=", Q in shared memory")


@pytest.mark.parametrize("shape", ODD_SHAPES[:3], ids=lambda s: "x".join(map(str, s)))
def test_odd_shapes_compile_with_nvrtc_and_for_hip(shape: tuple, tmp_path: Path) -> None:
    from halbench.compiler.codegen.hip import hip_source

    g, (d,) = _attention_dispatches(tmp_path, shape)
    _, hip = hip_source(d, g, "gfx942")
    assert "hb_main" in hip
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import generate_cuda

    cubin, _ = generate_cuda(d, g, "sm_90")
    assert cubin.target == "sm_90" and cubin.payload


def test_precision_keeps_the_attention_gemms_apart(vk, tmp_path: Path) -> None:
    """--precision f16 rounds the operands of Q·Kᵀ and ·V: those GEMMs carry the precision, so
    the block is not fused (the fused kernel is exact f32) and matches within f16's tolerance."""
    from halbench.precision import tolerance

    model = attention_model(1, 2, 19, 33, 16, 16)
    cm, path, bundle = _compile(model, tmp_path, ("vulkan", "local"), precision="f16")
    assert "attention:flash" not in _names(cm) and _names(cm).count("batch_matmul") == 2
    feeds = _feeds(model)
    ref = onnx_reference(path, feeds)
    for dev in ("local-sync://", "vulkan://"):
        (out,), (r,) = run_local(bundle, feeds, dev), ref
        assert 0 < rel_err(out, r) <= tolerance("f16"), f"--precision f16 on {dev}: {rel_err(out, r):.2e}"


@pytest.mark.parametrize("shape", [SHAPES[1], (1, 12, 128, 128, 32, 32), (8, 12, 128, 128, 32, 32)],
                         ids=lambda s: "x".join(map(str, s)))
def test_cuda_attention_kernels_compile_with_nvrtc(shape: tuple, tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import generate_cuda

    g, (d,) = _attention_dispatches(tmp_path, shape)
    cubin, ptx = generate_cuda(d, g, "sm_90")
    assert cubin.target == "sm_90" and b"shfl.sync.bfly" in ptx.payload


def test_on_webgpu_matches_onnxruntime(tmp_path: Path) -> None:
    """WebGPU shares the kernel (the C subset translated to WGSL), with the shared-memory combine."""
    from tests.compiler.helpers import device_or_skip

    dev = device_or_skip("webgpu://")
    for shape in (SHAPES[1], ODD_SHAPES[0]):
        model = attention_model(*shape)
        (tmp_path / str(shape[2])).mkdir()
        cm, path, bundle = _compile(model, tmp_path / str(shape[2]), ("webgpu", "local"))
        assert "attention:flash" in _names(cm)
        feeds = _feeds(model)
        _check(run_local(bundle, feeds, dev), onnx_reference(path, feeds), f"attention {shape} on {dev}")


@pytest.mark.parametrize("kind", ["sdpa", "manual"])
def test_torch_exported_attention_fuses(kind: str, vk, tmp_path: Path) -> None:
    """torch.onnx.export of F.scaled_dot_product_attention (the scale folded into Q and Kᵀ as
    sqrt-scale multiplies) and of the attention written out by hand (a Div by sqrt(d))."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    class Sdpa(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    class Manual(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return torch.softmax(q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5) + mask, dim=-1) @ v

    rng = np.random.default_rng(1)
    feeds = {"q": rng.standard_normal((1, 2, 9, 16)), "k": rng.standard_normal((1, 2, 21, 16)),
             "v": rng.standard_normal((1, 2, 21, 16)), "mask": np.where(rng.random((1, 1, 1, 21)) < 0.3, -1e4, 0)}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    path = tmp_path / f"{kind}.onnx"
    torch.onnx.export(Sdpa() if kind == "sdpa" else Manual(), tuple(torch.from_numpy(x) for x in feeds.values()),
                      str(path), opset_version=17, input_names=list(feeds), output_names=["o"], dynamo=False)
    cm = compile_model(path, CompileOptions(target_devices=("vulkan", "local")))
    assert _names(cm).count("attention:flash") == 1 and "softmax:row" not in _names(cm) \
        and "transpose" not in _names(cm)
    bundle = tmp_path / f"{kind}.hbx"
    cm.write(bundle)
    ref = onnx_reference(path, feeds)
    _check(run_local(bundle, feeds), ref, f"{kind} on local-sync://")
    _check(run_local(bundle, feeds, "vulkan://"), ref, f"{kind} on vulkan://")


def test_a_damaged_attention_step_list_is_refused_by_name() -> None:
    """The local oracle runs the steps a bundle lists: a step naming another kernel, or reading an
    operand the block does not have, fails with a message that says so (a bundle is untrusted)."""
    from halbench.kernels.ops.common import KERNELS

    run = KERNELS["hb.attention"]
    x = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="cannot run kernel 'hb.attention'"):
        run({"steps": [{"kernel": "hb.attention", "op": {}, "inputs": [], "outputs": []}], "result": "y"}, [x])
    with pytest.raises(ValueError, match="does not have.*recompile"):
        run({"steps": [{"kernel": "hb.generic", "op": {}, "inputs": [{"binding": 5}], "outputs": ["y"]}],
             "result": "y"}, [x])
    with pytest.raises(ValueError, match="does not have"):
        run({"steps": [{"kernel": "hb.generic", "op": {}, "inputs": [{"value": "nope", "shape": [4]}],
                        "outputs": ["y"]}], "result": "y"}, [x])
