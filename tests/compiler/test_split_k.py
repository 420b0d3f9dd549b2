"""Split-K GEMMs: a small-output, deep matmul or convolution is split along K on GPUs; the last
slice of each tile adds the partial sums in slice order and runs the epilogue.

Checked on lavapipe (the real Vulkan driver) against onnxruntime: the result is right, the same
on every run (the per-tile counters go back to zero, the order of the sum is fixed), and the
bundle reserves the scratch range the kernels use. WebGPU has no device-scope fence, so its
variant runs unsplit over the same schedule. CUDA's source is compiled by NVRTC.

A low-wave GEMM reserves scratch for more slices than the rule picks (tuning.split_k_room): a
tuned configuration may split it deeper, while without one it compiles and computes as before.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from halbench.bundle import read_bundle
from halbench.compiler.codegen import tuning
from halbench.compiler.codegen.kernels import gemm_split
from halbench.compiler.codegen.tuning import GemmConfig, split_k, split_k_room
from tests.compiler import codegen_cases as cc
from tests.compiler.helpers import device_or_skip, onnx_reference

RNG = np.random.default_rng(7)


def _model(tmp: Path, name: str, nodes, x_shape, inits) -> Path:
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp / f"{name}.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(m), path)
    return path


def _linear(tmp: Path, m: int, k: int, n: int) -> Path:
    """MatMul + bias + ReLU: the epilogue must run once, on the summed result."""
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    return _model(tmp, f"linear_{m}x{k}x{n}", nodes, [m, k], {"w": w, "b": b})


def _conv(tmp: Path) -> Path:
    """ResNet's last stage at batch 1: 7x7 pixels, 3x3 x 256 channels in, 128 out."""
    w = (RNG.standard_normal((128, 256, 3, 3)) * np.sqrt(2 / (256 * 9))).astype(np.float32)
    b = RNG.standard_normal(128).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    return _model(tmp, "conv_7x7", nodes, [1, 256, 7, 7], {"w": w, "b": b})


def _compile(path: Path, *apis: str, configs=None, out: Path | None = None) -> Path:
    """``configs``: {api: GemmConfig} forced for the model's one GEMM (what a tuning cache gives)."""
    from halbench.compiler.compile import CompileOptions, compile_model

    out = out or path.with_suffix(".hbx")
    forced = {}
    if configs:
        key = _gemm_key(path)
        forced = {(api, key): cfg for api, cfg in configs.items()}
    compile_model(path, CompileOptions(target_devices=apis, tuning_cache="off", gemm_configs=forced)).write(out)
    return out


def _gemm_key(path: Path) -> str:
    """The tuning-cache key of the model's GEMM, as the compiler records it."""
    from halbench.compiler.compile import CompileOptions, compile_model

    cm = compile_model(path, CompileOptions(target_devices=("vulkan",), tuning_cache="off"))
    return next(v.gemm["key"] for e in cm.manifest.executables for v in e.variants if v.gemm)


def _gemm(bundle: Path) -> tuple[dict, tuple[int, int, int]]:
    """The scalar GEMM record and workgroups of the bundle's first GEMM variant."""
    man = read_bundle(bundle).manifest
    v = next(v for e in man.executables for v in e.variants if v.gemm)
    return dict(v.gemm), tuple(v.workgroups)


def _invoke(bundle: Path, uri: str, feeds: dict, times: int = 1) -> list[np.ndarray]:
    import halbench
    from halbench.runtime.module import Module

    with halbench.create_device(uri) as dev, Module.load(bundle, dev) as mod:
        return [mod.invoke(None, feeds)[0] for _ in range(times)]


def test_split_rule_keeps_big_and_shallow_gemms_whole() -> None:
    assert split_k(128, 384, 1536) == (6, 256)  # BERT's FFN down-projection at batch 1
    assert split_k(512, 49, 4608)[0] == 8  # ResNet-50's last 3x3 convolutions at batch 1
    assert split_k(1024, 384, 384) == (1, 384)  # enough tiles already
    assert split_k(128, 128, 64) == (1, 64)  # too shallow to split
    for m, n, k in [(37, 45, 700), (1, 1000, 2048), (64, 3136, 576)]:
        s, depth = split_k(m, n, k)
        assert s >= 2 and depth % 16 == 0 and (s - 1) * depth < k <= s * depth


@pytest.mark.parametrize("shape", [(37, 700, 45), (128, 1536, 384)])
def test_split_matmul_matches_onnxruntime_on_lavapipe_every_run(tmp_path: Path, shape) -> None:
    uri = device_or_skip("vulkan://")
    path = _linear(tmp_path, *shape)
    bundle = _compile(path, "vulkan", "local")
    man = read_bundle(bundle).manifest
    scratch = [b for b in man.buffers if b.kind == "scratch"]
    assert len(scratch) == 1
    step = man.functions[0].dispatches[0]
    assert any(r.buffer == scratch[0].id for r in step.bindings)
    feeds = {"x": RNG.standard_normal(shape[:2]).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    import halbench
    from halbench.runtime.module import Module

    for dev_uri in ("local-sync://", uri):
        with halbench.create_device(dev_uri) as dev, Module.load(bundle, dev) as mod:
            outs = [mod.invoke(None, feeds)[0] for _ in range(3)]
        np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
        for o in outs[1:]:  # counters back at zero, partials added in slice order
            np.testing.assert_array_equal(o, outs[0])


def test_split_convolution_matches_onnxruntime_on_lavapipe(tmp_path: Path) -> None:
    uri = device_or_skip("vulkan://")
    path = _conv(tmp_path)
    bundle = _compile(path, "vulkan")
    exe = read_bundle(bundle).manifest.executables[0]
    assert all(v.workgroups[2] > 1 for v in exe.variants)  # z = slices
    feeds = {"x": RNG.standard_normal((1, 256, 7, 7)).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    import halbench
    from halbench.runtime.module import Module

    with halbench.create_device(uri) as dev, Module.load(bundle, dev) as mod:
        out = mod.invoke(None, feeds)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_webgpu_runs_a_split_dispatch_unsplit(tmp_path: Path) -> None:
    uri = device_or_skip("webgpu://")
    path = _linear(tmp_path, 37, 700, 45)
    bundle = _compile(path, "webgpu")
    variant = read_bundle(bundle).manifest.executables[0].variants[0]
    assert variant.workgroups[2] == 1 and variant.entry.bindings == 5  # x, w, b, y + scratch
    feeds = {"x": RNG.standard_normal((37, 700)).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    import halbench
    from halbench.runtime.module import Module

    with halbench.create_device(uri) as dev, Module.load(bundle, dev) as mod:
        out = mod.invoke(None, feeds)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_cuda_source_of_a_split_gemm_compiles_with_nvrtc(tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.compile import CompileOptions, compile_model

    path = _linear(tmp_path, 128, 1536, 384)
    cm = compile_model(path, CompileOptions(target_devices=("cuda",), targets={"cuda": "h100"}))
    d = cm.graph.ops[0]
    sp = gemm_split(d, cm.graph)
    assert sp is not None and sp.slices == 6
    variants = cm.manifest.executables[0].variants
    assert {v.format for v in variants} == {"cuda-cubin-v1", "cuda-ptx-v1"}
    assert all(v.workgroups[2] == 6 for v in variants)


# -- room for deeper tuned splits ----------------------------------------------------------------

def test_room_reserves_deeper_splits_only_for_low_wave_gemms() -> None:
    # ResNet-50 b8: the 256 -> 256 3x3 convolutions at 14x14 (unsplit by the rule), the 512 -> 512
    # ones at 7x7 (2 slices by the rule) may be split deeper; the rule's choice stays.
    assert split_k(256, 1568, 2304) == (1, 2304) and split_k_room(256, 1568, 2304) == 10
    assert split_k(512, 392, 4608)[0] == 2 and split_k_room(512, 392, 4608) == 16
    assert split_k_room(128, 128, 64) == 1  # too shallow to split at all: no scratch
    assert split_k_room(1024, 1568, 512) == 1  # a few waves of tiles already: no scratch
    for m, n, k, b in [(37, 45, 700, 1), (128, 384, 1536, 1), (512, 49, 4608, 1), (64, 3136, 576, 1),
                       (256, 1568, 1024, 1), (128, 6272, 1152, 1), (64, 64, 4096, 12), (2048, 392, 1024, 1)]:
        rule, room = split_k(m, n, k, b)[0], split_k_room(m, n, k, b)
        assert rule <= room <= tuning.SPLIT_K_MAX and (room == 1 or k // room >= tuning.SPLIT_K_DEPTH)
        assert 4 * room * b * m * n <= min(tuning.SPLIT_K_BYTES, 16 << 20)


def test_a_tuned_deeper_split_matches_onnxruntime_on_lavapipe(tmp_path: Path) -> None:
    """256 x 512 outputs, K = 1024: the rule takes 2 slices and the schedule reserves 8; a tuned
    6-slice configuration is compiled as given, every run gives the same right result, and one
    of 16 slices (beyond the reservation) falls back to the rule."""
    uri = device_or_skip("vulkan://")
    path = _linear(tmp_path, 256, 1024, 512)
    assert (split_k(256, 512, 1024)[0], split_k_room(256, 512, 1024)) == (2, 8)
    deep = GemmConfig(32, 32, 16, 4, 2, 6, False)  # 128 threads: the default Vulkan target's limit
    bundle = _compile(path, "vulkan", configs={"vulkan": deep})
    gemm, groups = _gemm(bundle)
    assert gemm["source"] == "tuned" and gemm["config"] == deep.to_dict()
    assert groups[2] == 6  # z = slices
    man = read_bundle(bundle).manifest
    scratch = next(b for b in man.buffers if b.kind == "scratch")
    assert scratch.nbytes >= 4 * 8 * 256 * 512  # the room, not the 2 slices of the rule
    feeds = {"x": RNG.standard_normal((256, 1024)).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    outs = _invoke(bundle, uri, feeds, times=3)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    for o in outs[1:]:  # counters back at zero, the six partials added in slice order
        np.testing.assert_array_equal(o, outs[0])
    too_deep = _compile(path, "vulkan", configs={"vulkan": GemmConfig(32, 32, 16, 4, 2, 16, False)},
                        out=tmp_path / "too_deep.hbx")
    gemm, groups = _gemm(too_deep)
    assert gemm["source"] == "rule" and gemm["config"]["split"] == 2 and groups[2] == 2


def test_without_a_tuning_entry_a_room_only_gemm_runs_as_before(tmp_path: Path, monkeypatch) -> None:
    """512 x 512 outputs, K = 256: the rule does not split it, the schedule reserves 2 slices.
    Without a tuning entry it compiles to the rule's unsplit kernel, and its output is
    byte-identical to the bundle compiled without the reservation (today's compile)."""
    uri = device_or_skip("vulkan://")
    path = _linear(tmp_path, 512, 256, 512)
    assert split_k(512, 512, 256)[0] == 1 and split_k_room(512, 512, 256) == 2
    bundle = _compile(path, "vulkan")
    gemm, groups = _gemm(bundle)
    assert gemm["source"] == "rule" and gemm["config"]["split"] == 1 and groups[2] == 1
    assert any(b.kind == "scratch" for b in read_bundle(bundle).manifest.buffers)
    monkeypatch.setattr(tuning, "SPLIT_K_ROOM_BELOW", 0)  # no room: the schedule as it was
    before = _compile(path, "vulkan", out=tmp_path / "before.hbx")
    assert not any(b.kind == "scratch" for b in read_bundle(before).manifest.buffers)
    assert _gemm(before) == (gemm, groups)
    feeds = {"x": RNG.standard_normal((512, 256)).astype(np.float32)}
    out, old = _invoke(bundle, uri, feeds)[0], _invoke(before, uri, feeds)[0]
    assert out.tobytes() == old.tobytes()
    ref = onnx_reference(path, feeds)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_room_leaves_the_precision_paths_and_unsplit_bindings_alone() -> None:
    """ResNet-50 b8's 256 -> 256 3x3 convolution at 14x14 now has scratch (the room) but the rule
    does not split it: under --precision tf32 / f16 it stays on the (unsplit) mma.sync GEMM, in
    fp32 on the rule's unsplit scalar GEMM; a GEMM too shallow to split takes no scratch binding."""
    from halbench.compiler.codegen.cuda import cuda_source

    for precision in ("tf32", "f16", "fp32"):
        g, d = cc.conv("nchw", 8, 256, 14, 14, 256, (3, 3), 1, 1, (1, 1, 1, 1))
        d.attrs["root"].attrs["precision"] = precision
        sp = gemm_split(d, g)
        assert sp is not None and sp.slices == 1 and sp.room == 10
        plan, _ = cuda_source(d, g, "h100")
        if precision == "fp32":
            assert plan.template == "gemm.j2" and plan.ctx["SPLIT"] == 1 and plan.gemm["source"] == "rule"
        else:
            assert plan.template == "gemm_mma_sync.j2", precision
    g, d = cc.matmul(128, 128, 64)
    assert gemm_split(d, g) is None
    plan, _ = cuda_source(d, g, "h100")
    assert not plan.scratch


def test_split_dispatches_share_scratch_slots_safely(tmp_path: Path) -> None:
    """Two split GEMMs in a chain, the second with more tile counters and fewer partial sums than
    the first: after the barrier between them they share one scratch slot, laid out so that
    every counter word is only ever a counter (a layout that let the second's counters start on
    the first's partial sums gave garbage: zoo SqueezeNet on Vulkan). Both ranges end their
    partial sums where the slot's counters begin; the chain matches onnxruntime, run after run."""
    uri = device_or_skip("vulkan://")
    w1 = (RNG.standard_normal((4096, 512)) / np.sqrt(4096)).astype(np.float32)
    w2 = (RNG.standard_normal((512, 1024)) / np.sqrt(512)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])]
    path = _model(tmp_path, "chain", nodes, [8, 4096], {"w1": w1, "w2": w2})
    bundle = _compile(path, "vulkan")
    man = read_bundle(bundle).manifest
    scratch = next(b for b in man.buffers if b.kind == "scratch")
    ranges = [r for st in man.functions[0].dispatches for r in st.bindings if r.buffer == scratch.id]
    assert len(ranges) == 2 and ranges[0].length != ranges[1].length
    # one slot: the buffer holds the larger partial sums and the larger counters, not both ranges
    assert max(r.offset + r.length for r in ranges) <= scratch.nbytes < ranges[0].length + ranges[1].length
    # both ranges end at the slot's end or before, and the shorter one starts later
    short, long_ = sorted(ranges, key=lambda r: r.length)
    assert short.offset > long_.offset
    feeds = {"x": RNG.standard_normal((8, 4096)).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    outs = _invoke(bundle, uri, feeds, times=2)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    np.testing.assert_array_equal(outs[1], outs[0])


def test_cuda_source_of_a_tuned_deeper_split_compiles_with_nvrtc(tmp_path: Path) -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.compile import CompileOptions, compile_model

    path = _linear(tmp_path, 256, 1024, 512)
    deep = GemmConfig(64, 32, 16, 4, 2, 8, False)
    cm = compile_model(path, CompileOptions(target_devices=("cuda",), targets={"cuda": "h100"}, tuning_cache="off",
                                            gemm_configs={("cuda", _gemm_key(path)): deep}))
    variants = cm.manifest.executables[0].variants
    assert {v.format for v in variants} == {"cuda-cubin-v1", "cuda-ptx-v1"}
    assert all(v.workgroups[2] == 8 and v.gemm["source"] == "tuned" and v.gemm["config"]["split"] == 8
               for v in variants)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.one_of(st.none(), st.tuples(st.integers(1, 64), st.integers(1, 8)))),
                max_size=40))
def test_scratch_layout_keeps_counter_words_counters(raw) -> None:
    """For any order of split dispatches and barriers: ranges fit the buffer and are aligned,
    dispatches between two barriers never overlap, and no dispatch's counter words are any
    dispatch's partial-sum words (what broke zoo SqueezeNet when counters came first)."""
    from halbench.compiler.compile import scratch_layout

    align = 256
    seq = [(b, (sp[0] * align, sp[1] * align) if sp is not None else None) for b, sp in raw]
    starts, total = scratch_layout(seq, align)
    assert set(starts) == {i for i, (_, sp) in enumerate(seq) if sp is not None}
    partials, counters = {}, {}
    for i, at in starts.items():
        p, c = seq[i][1]
        assert at % align == 0 and 0 <= at and at + p + c <= total
        partials[i], counters[i] = (at, at + p), (at + p, at + p + c)
    for i in starts:
        for j in starts:
            assert not (counters[i][0] < partials[j][1] and partials[j][0] < counters[i][1])
    group = 0
    groups: dict[int, int] = {}
    for i, (barrier, _) in enumerate(seq):
        group += barrier
        groups[i] = group
    for i in starts:
        for j in starts:
            if i < j and groups[i] == groups[j]:
                assert starts[i] + sum(seq[i][1]) <= starts[j] or starts[j] + sum(seq[j][1]) <= starts[i]


def test_skinny_gemms_stream_their_weights_on_gemv_tiles_with_deep_splits() -> None:
    """A GEMM of a few rows over a large weight (a batch-1 CNN's fully connected layers) takes the
    skinny tiles and enough K slices for a few waves; a convolution, a narrow or a shallow GEMM
    and one of more rows keep the other rule, and the reservation never shrinks."""
    assert tuning.skinny_tiles(1, 4096, 25088) == tuning.GemmTiles(2, 256, 16, 1, 2)  # VGG-19's first FC
    assert tuning.skinny_tiles(8, 4096, 9216) == tuning.GemmTiles(8, 128, 16, 1, 4)  # AlexNet's at batch 8
    for m, n, k, conv in [(9, 4096, 9216, False), (1, 384, 384, False), (1, 1000, 512, False),
                          (4, 4096, 4608, True)]:
        assert tuning.skinny_tiles(m, n, k, conv) is None
    assert split_k(1, 4096, 25088) == (16, 1568) and split_k(1, 4096, 9216) == (16, 576)
    assert split_k(8, 4096, 9216)[0] == 8
    assert split_k(4, 4096, 4608, conv=True)[0] < 16  # counted in 32x32 tiles, as before
    for m, n, k in [(1, 4096, 25088), (8, 4096, 9216), (1, 1000, 1280), (2, 1000, 2048)]:
        assert split_k_room(m, n, k) >= split_k(m, n, k)[0]


@pytest.mark.parametrize("shape", [(1, 2048, 640), (5, 1536, 600)])
@pytest.mark.parametrize("target", ["h100", None])
def test_skinny_rule_matches_onnxruntime_on_lavapipe(tmp_path: Path, shape, target) -> None:
    """The skinny rule's GEMMs, as the h100 target compiles them (2x256 or 8x128 tiles, 16 or 8
    slices) and on the generic target, whose 128 invocations do not fit them (32x32 tiles, the
    same slices): equal to onnxruntime on lavapipe, the same on every run."""
    uri = device_or_skip("vulkan://")
    from halbench.compiler.compile import CompileOptions, compile_model

    path = _linear(tmp_path, *shape)
    bundle = tmp_path / "s.hbx"
    compile_model(path, CompileOptions(target_devices=("vulkan",), tuning_cache="off",
                                       targets={"vulkan": target} if target else {})).write(bundle)
    gemm, _ = _gemm(bundle)
    m, k, n = shape
    want = tuning.skinny_tiles(m, n, k) if target else None
    assert gemm["source"] == "rule" and gemm["config"]["split"] == split_k(m, n, k)[0] > 1
    if want is not None:
        assert (gemm["config"]["bm"], gemm["config"]["bn"]) == (want.bm, want.bn)
    else:
        assert gemm["config"]["bm"] >= 8 and gemm["config"]["bm"] * gemm["config"]["bn"] <= 128 * 128
    feeds = {"x": RNG.standard_normal(shape[:2]).astype(np.float32)}
    ref = onnx_reference(path, feeds)[0]
    outs = _invoke(bundle, uri, feeds, times=3)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
