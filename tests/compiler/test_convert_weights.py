"""Weights converted to the staged type at compile time (passes/convert_weights.py).

Under ``--precision f16|bf16`` a GEMM's constant operand is stored in f16 / bf16, rounded to
nearest even once by the compiler, as the GEMM rounds it at run time: the outputs are
bit-identical with the conversion on and off, on local-sync and on lavapipe, for stored and
seeded-random weights; the CUDA mma.sync GEMM copies the 16-bit weight by cp.async, and NVRTC
compiles it for sm_80 and sm_90.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from halbench.compiler import CompileOptions, compile_model
from halbench.errors import UserError
from tests.compiler import codegen_cases as cc
from tests.compiler.helpers import onnx_reference, rel_err, run_local
from tests.compiler.test_precision import _onnx_gemm_conv

CONVERTED = ("f16", "bf16")


@pytest.fixture(scope="module")
def gemmconv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cw")
    path = _onnx_gemm_conv(tmp)
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 8, 10, 10)).astype(np.float32)}
    return tmp, path, feeds


def _ab(tmp: Path, path: Path, precision: str, weights: str, devices=("local",), **kw) -> tuple[Path, Path]:
    """The bundle without (A) and with (B) the conversion."""
    out = []
    for on in (False, True):
        p = tmp / f"{path.stem}-{precision}-{weights}-{'-'.join(devices)}-{int(on)}.hbx"
        compile_model(path, CompileOptions(target_devices=devices, precision=precision, weights=weights,
                                           convert_weights=on, **kw)).write(p)
        out.append(p)
    return out[0], out[1]


def _manifest(path: Path) -> dict:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("manifest.json"))


@pytest.mark.parametrize("weights", ["file", "random"])
@pytest.mark.parametrize("precision", CONVERTED)
def test_local_sync_bit_identical_and_the_manifest_shows_the_weights(gemmconv, precision, weights):
    tmp, path, feeds = gemmconv
    a, b = _ab(tmp, path, precision, weights)
    ws = {w["name"]: w for w in _manifest(b)["weights"]}
    # the conv filter and the matmul weight are stored in the staged type; the bias stays f32
    assert ws["w"]["dtype"] == ws["m"]["dtype"] == precision and ws["b"]["dtype"] == "f32"
    assert {w["dtype"] for w in _manifest(a)["weights"]} == {"f32"}
    if weights == "random":  # drawn as f32 from the f32 weight's seed, then rounded
        wa = {w["name"]: w for w in _manifest(a)["weights"]}
        assert ws["w"]["random_dtype"] == "f32" and ws["w"]["seed"] == wa["w"]["seed"]
        assert "random_dtype" not in ws["b"]
    else:  # half the bytes in the bundle
        assert b.stat().st_size < 0.6 * a.stat().st_size
    got_a, got_b = run_local(a, feeds)[0], run_local(b, feeds)[0]
    assert np.array_equal(got_a, got_b)
    if weights == "file":  # and the rounding happened (the error is the format's)
        ref = onnx_reference(path, feeds)[0]
        assert 1e-5 < rel_err(got_b, ref) < 5e-2


@pytest.mark.parametrize("weights", ["file", "random"])
@pytest.mark.parametrize("precision", CONVERTED)
def test_lavapipe_bit_identical(vk, gemmconv, precision, weights):
    """The rounded scalar GEMM reads the 16-bit weight (16-bit storage buffers) and stages it as
    it is: the same bits as rounding the f32 weight as it is staged."""
    tmp, path, feeds = gemmconv
    a, b = _ab(tmp, path, precision, weights, devices=("vulkan",))
    assert "storageBuffer16BitAccess" in json.dumps(_manifest(b)["executables"])
    got_a, got_b = run_local(a, feeds, "vulkan://")[0], run_local(b, feeds, "vulkan://")[0]
    assert np.array_equal(got_a, got_b)


def test_random_weight_regenerated_as_f32_then_rounded(gemmconv):
    """The runtime's values of a converted random weight are those of its f32 declaration,
    rounded to nearest even: what the GEMM would have staged."""
    from halbench.bundle import read_bundle

    tmp, path, _ = gemmconv
    a, b = _ab(tmp, path, "bf16", "random")
    wa = {w.name: read_bundle(a).weight(w) for w in read_bundle(a).manifest.weights}
    wb = {w.name: read_bundle(b).weight(w) for w in read_bundle(b).manifest.weights}
    assert wb["w"].dtype == np.uint16 and wa["w"].dtype == np.float32
    bits = wa["w"].view(np.uint32)
    want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    assert np.array_equal(wb["w"], want)
    assert np.array_equal(wa["b"], wb["b"])


def test_manifest_refuses_random_dtype_where_it_means_nothing(gemmconv):
    from halbench.bundle import Manifest

    tmp, path, _ = gemmconv
    _, b = _ab(tmp, path, "f16", "random")
    doc = _manifest(b)
    Manifest.from_dict(doc)  # as written: valid
    for w in doc["weights"]:
        if w["name"] == "b":
            w["random_dtype"] = "f32"  # an f32 weight drawn as f32 "then rounded": nonsense
    with pytest.raises(UserError, match="random_dtype is for random f16 / bf16 weights") as e:
        Manifest.from_dict(doc)
    assert "\n" not in str(e.value)
    for w in doc["weights"]:
        w.pop("random_dtype", None)
        if w["name"] == "w":
            w["random_dtype"] = "f64"
    with pytest.raises(UserError, match="random_dtype"):
        Manifest.from_dict(doc)


def _shared_weight_model(tmp: Path) -> Path:
    """y = x @ W (a GEMM) and z = W * x2 (an element-wise op reading the same W)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(7).standard_normal((16, 16)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Mul", ["W", "x2"], ["z"])]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "shared", [vi("x", TensorProto.FLOAT, [4, 16]), vi("x2", TensorProto.FLOAT, [16, 16])],
                              [vi("y", TensorProto.FLOAT, [4, 16]), vi("z", TensorProto.FLOAT, [16, 16])],
                              [numpy_helper.from_array(w, "W")])
    path = tmp / "shared.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("weights", ["file", "random"])
def test_a_weight_read_elsewhere_keeps_its_f32_copy(tmp_path, weights):
    path = _shared_weight_model(tmp_path)
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32),
             "x2": np.random.default_rng(2).standard_normal((16, 16)).astype(np.float32)}
    a, b = _ab(tmp_path, path, "f16", weights)
    ws = {w["name"]: w for w in _manifest(b)["weights"]}
    assert ws["W"]["dtype"] == "f32" and ws["W.f16"]["dtype"] == "f16"
    if weights == "random":  # the copy is drawn from the original's seed
        assert ws["W.f16"]["seed"] == ws["W"]["seed"] and ws["W.f16"]["random_dtype"] == "f32"
    got_a, got_b = run_local(a, feeds), run_local(b, feeds)
    assert all(np.array_equal(x, y) for x, y in zip(got_a, got_b))


def test_off_switch_tf32_and_cache_key(gemmconv, monkeypatch):
    _, path, _ = gemmconv
    on = CompileOptions(precision="f16")
    assert on.convert_weights is True
    monkeypatch.setenv("HALBENCH_NO_CONVERT_WEIGHTS", "1")
    off = CompileOptions(precision="f16")
    assert off.convert_weights is False and off.cache_key() != on.cache_key()
    assert {w.dtype for w in compile_model(path, off).manifest.weights} == {"f32"}
    monkeypatch.delenv("HALBENCH_NO_CONVERT_WEIGHTS")
    # tf32 is staged as f32 and fp32 rounds nothing: no conversion of the type
    for p in ("fp32", "tf32"):
        assert {w.dtype for w in compile_model(path, CompileOptions(precision=p)).manifest.weights} == {"f32"}
    # tf32 rounds the values (``round``) unless switched off; fp32 never
    rounds = [{w.name: w.round for w in compile_model(path, CompileOptions(precision=p, convert_weights=on))
               .manifest.weights} for p, on in (("tf32", True), ("tf32", False), ("fp32", True))]
    assert rounds == [{"w": "tf32", "m": "tf32", "b": None}, {"w": None, "m": None, "b": None},
                      {"w": None, "m": None, "b": None}]


@pytest.mark.parametrize("weights", ["random", "file"])
def test_zoo_model_bit_identical_local_and_lavapipe(vk, tmp_path, weights):
    """MobileNetV2 b1 (1x1 and strided convolutions, the classifier GEMM) with seeded-random
    weights, as the benchmarks run it, and stored: the same bits with the conversion on and off."""
    import onnx

    from halbench.bench import zoo
    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

    m = zoo.build("mobilenetv2", batch=1)
    randomize_onnx(m, RANDOM_SEED)
    path = tmp_path / "mobilenetv2.onnx"
    onnx.save(m, path)
    feeds = zoo.make_inputs("mobilenetv2", batch=1)
    a, b = _ab(tmp_path, path, "f16", weights, devices=("vulkan", "local"))
    conv = [w for w in _manifest(b)["weights"] if w["dtype"] == "f16"]
    # random: regenerated from their seeds, except those the compiler derived (stored as computed)
    assert len(conv) >= 30 and sum(w["storage"] == "random" for w in conv) >= (30 if weights == "random" else 0)
    storage = {w["name"]: w["storage"] for w in _manifest(a)["weights"]}
    assert all(storage[w["name"]] == w["storage"] for w in conv)
    for uri in ("local-sync://", "vulkan://"):
        got_a, got_b = run_local(a, feeds, uri), run_local(b, feeds, uri)
        assert all(np.array_equal(x, y) for x, y in zip(got_a, got_b)), uri


@pytest.mark.parametrize("precision", CONVERTED)
@pytest.mark.parametrize("target,arch", [("a100", "sm_80"), ("h100", "sm_90")])
def test_nvrtc_mma_sync_copies_the_16bit_weight(gemmconv, precision, target, arch):
    """NVRTC compiles the mma.sync GEMMs with the 16-bit weight operand to cubins for sm_80 and
    sm_90; the conv's filter (A) and the matmul's weight (B) come in by 16-byte cp.async (MODE
    "cp") from a 16-bit binding, where without the conversion they are f32 loaded as float4 and
    converted in registers (MODE "v4")."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.drivers.cuda.cubin import cubin_arch

    _, path, _ = gemmconv
    modes = {}
    for on in (False, True):
        cm = compile_model(path, CompileOptions(target_devices=("cuda",), targets={"cuda": target},
                                                backend_options={"cuda-formats": "cubin"}, precision=precision,
                                                convert_weights=on))
        g = cm.graph
        for e, d in zip(cm.manifest.executables, g.ops):
            root = d.attrs["root"]
            if root.kind not in ("conv2d", "matmul"):
                continue
            plan, src = cuda_source(d, g, arch)
            assert plan.template == "gemm_mma_sync.j2"
            modes[(root.kind, on)] = (plan.ctx["MODE"]["a"], plan.ctx["MODE"]["b"])
            (v,) = e.variants
            assert cubin_arch(cm.members[v.member]) == arch
            if on:
                wtype = "__half" if precision == "f16" else "unsigned short"
                i = d.inputs.index(root.inputs[1])
                assert re.search(rf"const {wtype}\* __restrict__ B{i},", src)
                assert re.search(rf"cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16, %2;.*\(B{i} \+ \(", src)
    assert modes == {("conv2d", False): ("v4", "im2col"), ("conv2d", True): ("cp", "im2col"),
                     ("matmul", False): ("v4", "v4"), ("matmul", True): ("v4", "cp")}


@pytest.mark.parametrize("precision", CONVERTED)
def test_webgpu_bit_identical(gemmconv, precision):
    """WGSL reads the 16-bit weight (f16 natively, bf16 through its u32 words) and widens it."""
    from tests.compiler.helpers import device_or_skip

    uri = device_or_skip("webgpu://")
    tmp, path, feeds = gemmconv
    a, b = _ab(tmp, path, precision, "random", devices=("webgpu",))
    assert np.array_equal(run_local(a, feeds, uri)[0], run_local(b, feeds, uri)[0])


def test_wmma_and_cooperative_matrix_load_the_f16_filter_8_at_a_time(gemmconv):
    """sm_75 WMMA and Vulkan cooperative matrix (NVIDIA targets): the converted f16 filter comes
    in 16-byte vectors of 8 (uint4 / uvec4), where the f32 one came in float4 / vec4 of 4; glslang
    compiles the shader (compile_model would fail otherwise)."""
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.compiler.codegen.glsl import generate_vulkan
    from halbench.compiler.targets import resolve_target

    _, path, _ = gemmconv
    seen = {}
    for on in (False, True):
        cm = compile_model(path, CompileOptions(target_devices=("vulkan",), targets={"vulkan": "h100"},
                                                precision="f16", convert_weights=on))
        g = cm.graph
        (d,) = [d for d in g.ops if d.attrs["root"].kind == "conv2d"]
        i = d.inputs.index(d.attrs["root"].inputs[1])
        (v, *_) = generate_vulkan(d, g, resolve_target("vulkan", "h100"), "descriptors")
        plan, src = cuda_source(d, g, "sm_75")
        assert plan.template == "gemm_mma.j2"
        seen[on] = (re.search(rf"q = V{i}\[\(m \* 72 \+ k\) / (\d)\]", v.source).group(1),
                    re.search(rf"q = reinterpret_cast<const (\w+)\*>\(B{i}\)\[\(m \* 72 \+ k\) / (\d)\]", src).groups())
    assert seen == {False: ("4", ("float4", "4")), True: ("8", ("uint4", "8"))}


@pytest.mark.gpu
@pytest.mark.parametrize("precision", CONVERTED)
@pytest.mark.parametrize("case", ["conv", "conv1x1", "matmul_big"])
@pytest.mark.parametrize("api", ["cuda", "vulkan"])
def test_gpu_bit_identical(api, case, precision):
    """On the GPU's own target (mma.sync on sm_80+ CUDA, cooperative matrix on NVIDIA Vulkan):
    a GEMM given its weight operand already rounded and stored in f16 / bf16 (what the pass
    hands it) gives the same bits as the GEMM rounding the f32 weight as it stages it. Built
    from IR graphs (the GPU machine has no ONNX front end)."""
    import copy

    import halbench
    from halbench.bundle.weights import round_to
    from halbench.compiler.codegen.cuda import generate_cuda
    from halbench.compiler.codegen.glsl import generate_vulkan
    from halbench.compiler.ir import TensorType
    from halbench.compiler.targets import target_from_device
    from tests.compiler.test_codegen_vulkan import run_variant
    from tests.compiler.test_precision import GPU_PRECISION_CASES, _with_precision

    with halbench.create_device(f"{api}://") as dev:
        g, d = _with_precision(GPU_PRECISION_CASES[case](), precision)
        xs = cc.random_inputs(g, d, seed=7)
        w = d.attrs["root"].inputs[1]  # the matmul's B, the conv's filter
        k = d.inputs.index(w)
        g2, d2 = copy.deepcopy((g, d))
        g2.types[w] = TensorType(g.types[w].shape, precision)
        xs2 = list(xs)
        xs2[k] = round_to(xs[k], precision)
        outs = [(g.types[o].shape, np.float32) for o in d.outputs]
        got = []
        for gg, dd, inputs in ((g, d, xs), (g2, d2, xs2)):
            if api == "cuda":
                (v,) = generate_cuda(dd, gg, dev.info.identity.arch, formats=("cubin",))
            else:
                (v,) = generate_vulkan(dd, gg, target_from_device(dev.info, "vulkan"), "bda")
            got.append(run_variant(dev, v, inputs, outs)[0])
    assert np.isfinite(got[0]).all()
    assert np.array_equal(got[0], got[1])
    assert rel_err(got[1], cc.reference(g, d, xs)[0]) < 1e-5


# -- tf32: weights rounded, kept as f32 --------------------------------------------------------


@pytest.mark.parametrize("weights", ["file", "random"])
def test_tf32_weights_rounded_and_local_sync_bit_identical(gemmconv, weights):
    """Under tf32 the GEMMs' weights stay f32 with their values rounded to nearest even to tf32
    (low 13 mantissa bits zero; manifest ``round``), the same values the unconverted bundle's
    GEMMs round them to, so local-sync computes the same bits; the bias (an epilogue's) is left."""
    from halbench.bundle import read_bundle
    from halbench.precision import round_operand

    tmp, path, feeds = gemmconv
    a, b = _ab(tmp, path, "tf32", weights)
    ws = {w["name"]: w for w in _manifest(b)["weights"]}
    assert ws["w"]["round"] == ws["m"]["round"] == "tf32" and "round" not in ws["b"]
    assert {w["dtype"] for w in ws.values()} == {"f32"} and "round" not in json.dumps(_manifest(a)["weights"])
    if weights == "random":  # regenerated from the f32 weight's seed, then rounded
        wa = {w["name"]: w for w in _manifest(a)["weights"]}
        assert ws["w"]["seed"] == wa["w"]["seed"] and "random_dtype" not in ws["w"]
    ra, rb = read_bundle(a), read_bundle(b)
    va = {w.name: ra.weight(w) for w in ra.manifest.weights}
    vb = {w.name: rb.weight(w) for w in rb.manifest.weights}
    for name in ("w", "m"):
        assert vb[name].dtype == np.float32 and not (vb[name].view(np.uint32) & 0x1FFF).any()
        assert np.array_equal(vb[name], round_operand(va[name], "tf32"))
        assert not np.array_equal(vb[name], va[name])  # it did round something
    assert np.array_equal(va["b"], vb["b"])
    got_a, got_b = run_local(a, feeds)[0], run_local(b, feeds)[0]
    assert np.array_equal(got_a, got_b)


def test_tf32_lavapipe_bit_identical(vk, gemmconv):
    """Vulkan's tf32 rounding of an operand rounded already leaves it as it is."""
    tmp, path, feeds = gemmconv
    a, b = _ab(tmp, path, "tf32", "random", devices=("vulkan",))
    assert np.array_equal(run_local(a, feeds, "vulkan://")[0], run_local(b, feeds, "vulkan://")[0])


def test_tf32_stored_weight_is_rounded_on_load(gemmconv, tmp_path):
    """A stored weight declared ``round: tf32`` whose member holds unrounded values (a bundle
    edited by hand) is rounded as it is read: the GEMMs that skip the rounding get what the
    declaration promises."""
    from halbench.bundle import Manifest
    from halbench.bundle.manifest import WeightDecl
    from halbench.bundle.weights import weight_array

    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    decl = WeightDecl("w", 0, "f32", (64,), "file", member="weights/w.bin", round="tf32")
    got = weight_array(decl, x.tobytes())
    assert not (got.view(np.uint32) & 0x1FFF).any() and np.allclose(got, x, rtol=2 ** -11)
    tmp, path, _ = gemmconv
    _, b = _ab(tmp, path, "tf32", "file")
    doc = _manifest(b)
    Manifest.from_dict(doc)
    for w in doc["weights"]:
        if w["name"] == "w":
            w["round"] = "bf16"
    with pytest.raises(UserError, match="round") as e:
        Manifest.from_dict(doc)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("target,arch", [("a100", "sm_80"), ("h100", "sm_90")])
def test_nvrtc_mma_sync_reads_the_tf32_filter_without_rounding(gemmconv, target, arch):
    """The tf32 mma.sync convolution's A fragments (its filter, rounded at compile time) go to
    the tensor cores as they are: four cvt.rna per A fragment fewer, B's kept; NVRTC compiles
    both to cubins."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.drivers.cuda.cubin import cubin_arch

    _, path, _ = gemmconv
    seen = {}
    for on in (False, True):
        cm = compile_model(path, CompileOptions(target_devices=("cuda",), targets={"cuda": target},
                                                backend_options={"cuda-formats": "cubin"}, precision="tf32",
                                                convert_weights=on))
        g = cm.graph
        for e, d in zip(cm.manifest.executables, g.ops):
            if d.attrs["root"].kind != "conv2d":
                continue
            plan, src = cuda_source(d, g, arch)
            assert plan.template == "gemm_mma_sync.j2"
            (v,) = e.variants
            assert cubin_arch(cm.members[v.member]) == arch
            seen[on] = (plan.ctx["RAW"], src.count("cvt.rna.tf32.f32"), "__float_as_uint(p[0])" in src,
                        v.matrix.get("rounded"))
    assert seen == {False: ({"a": False, "b": False}, 6, False, None), True: ({"a": True, "b": False}, 2, True, "a")}


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["conv", "conv1x1", "matmul_big"])
def test_gpu_tf32_rounded_weight_bit_identical(case):
    """On the GPU's CUDA target: the tf32 mma.sync GEMM reading a weight marked rounded (no
    cvt.rna) gives the same bits as the GEMM rounding the same, already rounded, values itself;
    and both are the rounding oracle's result up to summation order."""
    import copy

    import halbench
    from halbench.compiler.codegen.cuda import generate_cuda
    from halbench.compiler.ir import Weight
    from halbench.precision import round_operand
    from tests.compiler.test_codegen_vulkan import run_variant
    from tests.compiler.test_precision import GPU_PRECISION_CASES, _with_precision

    with halbench.create_device("cuda://") as dev:
        g, d = _with_precision(GPU_PRECISION_CASES[case](), "tf32")
        xs = cc.random_inputs(g, d, seed=7)
        root = d.attrs["root"]
        w = root.inputs[1]  # the conv's filter (its A), the matmul's B
        k = d.inputs.index(w)
        xs[k] = round_operand(xs[k], "tf32")
        g2, d2 = copy.deepcopy((g, d))
        g2.weights[w] = Weight(w, g2.types[w], xs[k], rounded="tf32")
        outs = [(g.types[o].shape, np.float32) for o in d.outputs]
        got, raws = [], []
        for gg, dd in ((g, d), (g2, d2)):
            (v,) = generate_cuda(dd, gg, dev.info.identity.arch, formats=("cubin",))
            raws.append("__float_as_uint(p[0])" in v.source)
            got.append(run_variant(dev, v, xs, outs)[0])
    assert raws == [False, True]
    assert np.isfinite(got[0]).all() and np.array_equal(got[0], got[1])
    assert rel_err(got[1], cc.reference(g, d, xs)[0]) < 1e-5
