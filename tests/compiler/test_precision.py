"""``compile --precision``: f32 GEMM and convolution operands rounded to tf32 / f16 / bf16.

- the rounding itself (halbench.precision.round_operand) against ml_dtypes / NumPy's f16;
- local-sync runs of small graphs and zoo models against onnxruntime: within the precision's
  tolerance, and different from fp32 (the rounding happens);
- CUDA: NVRTC compiles the matrix GEMM for f32 operands (sm_80+: mma.sync m16n8k16 f16 / bf16,
  m16n8k8 tf32, cp.async stages) for sm_80 and sm_90, matmul, batch matmul and implicit-GEMM
  conv; which operands come in by cp.async;
- Vulkan: glslang compiles the cooperative-matrix f16 variant for an NVIDIA target; targets
  without matrix units for the precision (lavapipe, the generic target, bf16 / tf32 on Vulkan)
  run the scalar GEMM with the operands rounded as staged, and this runs on lavapipe against the
  rounded NumPy oracle;
- the manifest, the cache key and the results record the precision; bad values are one line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from halbench.compiler import CompileOptions, compile_model
from halbench.errors import UserError
from halbench.precision import PRECISIONS, TOLERANCE, round_operand, tolerance
from tests.compiler import codegen_cases as cc
from tests.compiler.helpers import onnx_reference, rel_err, run_local

REDUCED = [p for p in PRECISIONS if p != "fp32"]


def _with_precision(case, precision: str):
    g, d = case
    d.attrs["root"].attrs["precision"] = precision
    return g, d


def _cases():
    return {"matmul": lambda: cc.matmul(100, 72, 40, epilogue=True),
            "batch_matmul": lambda: cc.matmul(33, 50, 24, batch=3, ta=True, tb=True),
            "conv": lambda: cc.conv("nchw", 2, 8, 13, 11, 24, (3, 3), 2, 1, (1, 1, 1, 1), epilogue=True)}


# -- the rounding --------------------------------------------------------------------------

def test_rounding_matches_the_formats():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(200_000) * np.exp(rng.uniform(-20, 20, 200_000))).astype(np.float32)
    assert np.array_equal(round_operand(x, "bf16"), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    with np.errstate(over="ignore"):
        assert np.array_equal(round_operand(x, "f16"), x.astype(np.float16).astype(np.float32))
    t = round_operand(x, "tf32")
    assert np.all(t.view(np.uint32) & 0x1FFF == 0)  # 10 explicit mantissa bits left
    assert np.max(np.abs(t - x) / np.abs(x)) <= 2.0 ** -11  # round to nearest: half an ulp
    assert np.array_equal(round_operand(t, "tf32"), t)
    assert round_operand(x, "fp32") is x


def test_bad_precision_is_one_line(tmp_path):
    with pytest.raises(UserError, match="--precision 'fp64' is unknown; use one of fp32, tf32, f16, bf16"):
        CompileOptions(precision="fp64")
    model = _onnx_gemm_conv(tmp_path)
    r = subprocess.run([sys.executable, "-m", "halbench", "compile", str(model), "-o", str(tmp_path / "x.hbx"),
                        "--precision", "half"], check=False, capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "'half' is unknown" in r.stderr
    assert not (tmp_path / "x.hbx").exists()
    r = subprocess.run([sys.executable, "-m", "halbench", "run-suite", "smoke", "--precision", "fp8",
                        "-o", str(tmp_path / "r.json")], check=False, capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "'fp8' is unknown" in r.stderr


# -- local-sync against onnxruntime ----------------------------------------------------------

def _onnx_gemm_conv(tmp: Path) -> Path:
    """Conv (3x3, pad 1) -> Relu -> Flatten -> MatMul -> Add: an implicit GEMM and a GEMM."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.3
    m = rng.standard_normal((16 * 10 * 10, 40)).astype(np.float32) * 0.05
    b = rng.standard_normal(40).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "m"], ["y0"]),
             helper.make_node("Add", ["y0", "b"], ["y"])]
    graph = helper.make_graph(nodes, "gemmconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 40])],
                              [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (m, "m"), (b, "b"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp / "gemmconv.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def gemmconv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prec")
    path = _onnx_gemm_conv(tmp)
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 8, 10, 10)).astype(np.float32)}
    return tmp, path, feeds, onnx_reference(path, feeds)[0]


def _local(tmp: Path, path: Path, feeds, precision: str) -> np.ndarray:
    out = tmp / f"{path.stem}-{precision}.hbx"
    compile_model(path, CompileOptions(precision=precision)).write(out)
    return run_local(out, feeds)[0]


@pytest.mark.parametrize("precision", REDUCED)
def test_local_sync_rounds_matmul_and_conv(gemmconv, precision):
    tmp, path, feeds, ref = gemmconv
    exact = _local(tmp, path, feeds, "fp32")
    got = _local(tmp, path, feeds, precision)
    assert rel_err(exact, ref) < 1e-5
    err = rel_err(got, ref)
    assert err <= TOLERANCE[precision], f"{precision}: {err:.2e}"
    # the rounding happened: the error is that of the format, far above fp32's
    assert err > 30 * rel_err(exact, ref) and err > {"tf32": 1e-5, "f16": 1e-5, "bf16": 1e-4}[precision]


@pytest.mark.parametrize("model", ["mobilenetv2", "minilm-l6"])
def test_zoo_models_pass_their_precision_tolerance(tmp_path, model):
    """Real networks at batch 1 (seeded random weights, as the benchmarks run them) stay an
    order of magnitude inside each precision's tolerance on local-sync (measured: MobileNetV2
    1.4e-4 tf32 / f16, 1.1e-3 bf16; MiniLM-L6 1.6e-4 / 1.2e-3; ResNet-50 3e-4 / 2.4e-3)."""
    import onnx

    from halbench.bench import zoo
    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

    kw = {"batch": 1, **({"seq": 32} if model.startswith("minilm") else {})}
    m = zoo.build(model, **kw)
    randomize_onnx(m, RANDOM_SEED)
    path = tmp_path / f"{model}.onnx"
    onnx.save(m, path)
    feeds = zoo.make_inputs(model, **kw)
    ref = onnx_reference(path, feeds)
    errs = {}
    for p in ("fp32", "f16", "bf16"):
        out = tmp_path / f"{model}-{p}.hbx"
        compile_model(path, CompileOptions(precision=p)).write(out)
        errs[p] = max(rel_err(g, r) for g, r in zip(run_local(out, feeds), ref))
    assert errs["fp32"] < 1e-5
    for p in ("f16", "bf16"):
        assert 10 * errs["fp32"] < errs[p] <= TOLERANCE[p] / 4, errs


# -- CUDA: NVRTC ------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("precision", REDUCED)
@pytest.mark.parametrize("case", ["matmul", "batch_matmul", "conv"])
def test_cuda_matrix_units_for_f32_operands(case, precision, arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.codegen.cuda import cuda_source, generate_cuda
    from halbench.drivers.cuda.cubin import cubin_arch

    g, d = _with_precision(_cases()[case](), precision)
    plan, src = cuda_source(d, g, arch)
    assert plan.template == "gemm_mma_sync.j2"  # sm_80+: mma.sync, tf32 convolutions included
    assert "const float* __restrict__ B0," in src and "const float* __restrict__ B1," in src  # f32 operands
    cubin, ptx = generate_cuda(d, g, arch)
    assert cubin_arch(cubin.payload) == arch
    text = ptx.payload.decode()
    want = {"f16": r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32",
            "bf16": r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32",
            "tf32": r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32"}[precision]
    assert re.search(want, text), f"{case}/{precision}/{arch}: no {want}"
    # tf32: f32 staged raw and rounded to nearest as fragments are read; f16 / bf16 through ldmatrix
    assert ("cvt.rna.tf32.f32" in text) == (precision == "tf32")
    assert ("ldmatrix" in text) == (precision != "tf32")


def test_cuda_matrix_gemm_stages_operands_by_cp_async_where_they_allow():
    """tf32: contiguous, aligned f32 runs of 4 come in by 16-byte cp.async, zero-filled outside
    the problem from the operand's own first address (never an out-of-range one); f16 rounds them
    in registers from one float4 load; a 1x1 conv's im2col operand is such a run too, a 3x3
    one's is gathered with its pixel coordinates computed once per thread: under tf32 by 4-byte
    cp.async per element that reads the input's first address with size 0 (zero-fill) where the
    tap is padding or outside the problem ("cpi"), under f16 through registers ("im2col"); a
    transposed operand element by element."""
    from halbench.compiler.codegen.cuda import cuda_source

    cases = {"matmul": lambda: cc.matmul(100, 72, 40), "conv1x1": lambda: cc.conv("nchw", 2, 64, 8, 8, 32, (1, 1), 1, 1, (0, 0, 0, 0)),
             "conv3x3": _cases()["conv"], "transposed": _cases()["batch_matmul"]}
    want = {("matmul", "tf32"): ("cp", "cp"), ("matmul", "f16"): ("v4", "v4"),
            ("conv1x1", "tf32"): ("cp", "cp"), ("conv1x1", "f16"): ("v4", "v4"),
            ("conv3x3", "tf32"): ("cp", "cpi"), ("conv3x3", "f16"): ("v4", "im2col"),
            ("transposed", "tf32"): ("el", "el"), ("transposed", "bf16"): ("el", "el")}
    for (case, precision), modes in want.items():
        g, d = _with_precision(cases[case](), precision)
        plan, src = cuda_source(d, g, "sm_90")
        assert (plan.ctx["MODE"]["a"], plan.ctx["MODE"]["b"]) == modes, (case, precision)
        for x, i in zip("ab", (1, 0) if case.startswith("conv") else (0, 1)):
            if modes["ab".index(x)] == "cp":
                assert re.search(rf"\? \(const void\*\)\(\(B{i} \+ \(.*?\)\)\) : \(const void\*\)\(B{i}\)\), "
                                 rf"\"r\"\(\(.*?\) \? 16 : 0\)", src), (case, precision, x)
                assert i in plan.vec4  # the runtime checks the binding's 16-byte alignment
        if modes[1] == "cpi":  # the input x is binding 0: ok ? its element : x itself, 4 or 0 bytes
            assert re.search(r"cp\.async\.ca\.shared\.global \[%0\], \[%1\], 4, %2;.*\(ok\) \? \(const void\*\)"
                             r"\(B0 \+ nb_\[j\] \+ kbase\) : \(const void\*\)\(B0\)\), \"r\"\(\(ok\) \? 4 : 0\)", src)
            assert "bool ok = kv && nv_[j] && uint(ih) <" in src


def test_sm80_rule_puts_convolutions_and_short_split_gemms_on_mma_sync():
    """On sm_80+ every --precision GEMM and convolution runs on mma.sync, tf32 convolutions
    included; a GEMM that split-K would spread over the machine does too where its blocks make
    half a wave or its K loop is short (ResNet-50 b1 stage 2), and stays on the rounded scalar
    split GEMM otherwise (stage 4's 512 x 49 x 4608). sm_75 keeps the older rule."""
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.compiler.codegen.kernels import gemm_split

    stage2 = lambda: cc.conv("nchw", 1, 128, 28, 28, 128, (3, 3), 1, 1, (1, 1, 1, 1))
    stage4 = lambda: cc.conv("nchw", 1, 512, 7, 7, 512, (3, 3), 1, 1, (1, 1, 1, 1))
    for precision in REDUCED:
        g, d = _with_precision(_cases()["conv"](), precision)
        plan, _ = cuda_source(d, g, "h100")
        assert plan.template == "gemm_mma_sync.j2"
        g, d = _with_precision(stage2(), precision)
        assert gemm_split(d, g) is not None
        plan, _ = cuda_source(d, g, "h100")
        assert plan.template == "gemm_mma_sync.j2", precision  # unsplit (its scratch binding unused)
        g, d = _with_precision(stage4(), precision)
        assert gemm_split(d, g) is not None
        plan, _ = cuda_source(d, g, "h100")
        assert plan.template == "gemm.j2" and plan.scratch and plan.ctx["ROUND"] != "{}", precision
    g, d = _with_precision(_cases()["conv"](), "tf32")
    assert cuda_source(d, g, "sm_75")[0].template == "gemm.j2"


@pytest.mark.parametrize("case,operand", [("matmul", "x"), ("conv", "w")])
def test_f32_operands_load_as_float4_from_the_right_binding(case, operand):
    """A 16-byte load per 4 contiguous f32 operand elements: A of a matmul is its first input,
    A of an NCHW conv (implicit GEMM) its filter; either way the vector reads that binding."""
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.compiler.codegen.glsl import glsl_sources

    g, d = {"matmul": lambda: cc.matmul(64, 72, 40), "conv": _cases()["conv"]}[case]()
    d = _with_precision((g, d), "f16")[1]
    names = [v for v in d.inputs if v.startswith(operand)] or [d.inputs[0]]
    want = d.inputs.index(names[0]) if case == "conv" else 0
    _, src = cuda_source(d, g, "sm_90")
    assert re.findall(r"r[ab]\[\d+\] = reinterpret_cast<const float4\*>\(B(\d+)\)", src)[0] == str(want)
    _, srcs = glsl_sources(d, g, "h100", abis=("descriptors",))
    assert re.findall(r"q = V(\d+)\[", srcs["descriptors"])[0] == str(want)


@pytest.mark.parametrize("hw,vector", [(8, True), (7, False)])
@pytest.mark.parametrize("where", ["vulkan", "vulkan-f16-tensors", "sm_75"])
def test_1x1_conv_reads_its_input_in_runs_of_pixels(where, hw, vector):
    """A 1x1 stride-1 convolution's B (its input) is contiguous along n within an image: the
    cooperative-matrix / WMMA GEMM (gemm_mma.j2) loads it as float4 under --precision f16, or 8
    f16 at once from an f16 tensor, where an image's pixels come in whole runs (8x8), and element by
    element where a run would cross into the next image (7x7). sm_75's WMMA kernel compiles (NVRTC)."""
    from halbench.compiler.codegen.cuda import cuda_source, generate_cuda
    from halbench.compiler.codegen.glsl import glsl_sources
    from tests.compiler.test_codegen_matrix import _as_dtype

    g, d = cc.conv("nchw", 2, 64, hw, hw, 48, (1, 1), 1, 1, (0, 0, 0, 0), epilogue=True)
    if where == "vulkan-f16-tensors":
        _as_dtype(g, ["x", "w", "r"], "f16")
        width = 8
    else:
        d = _with_precision((g, d), "f16")[1]
        width = 4
    if where == "sm_75":
        plan, src = cuda_source(d, g, "sm_75")
        generate_cuda(d, g, "sm_75")
        load = rf"reinterpret_cast<const float4\*>\(B{d.inputs.index('x')}\)"
    else:
        plan, srcs = glsl_sources(d, g, "h100", abis=("descriptors",))
        src = srcs["descriptors"]
        load = rf"V{d.inputs.index('x')}"
    assert plan.template == "gemm_mma.j2"
    n = hw * hw
    run = rf"q = {load}\[\(\(n / {n}\) \* {64 * n} \+ k \* {n} \+ n % {n}\) / {width}\]"
    assert bool(re.search(run, src)) is vector
    if where != "sm_75":  # else the pixel of each owned column once, the tap per step (_portable_im2col)
        assert ("int xb = hb_xb0;" in src) is not vector
        assert "hb_im2col(b, k, n)" not in src


def test_cuda_without_tf32_units_rounds_on_the_scalar_gemm():
    """sm_75 has f16 WMMA but neither bf16 nor tf32: those stay scalar, operands rounded."""
    from halbench.compiler.codegen.cuda import cuda_source

    for precision, fn in (("tf32", "hb_round_tf32"), ("bf16", "hb_round_bf16")):
        g, d = _with_precision(cc.matmul(100, 72, 40), precision)
        plan, src = cuda_source(d, g, "sm_75")
        assert plan.template == "gemm.j2" and f"{fn}(pa0)" in src and f"{fn}(pb0)" in src


# -- Vulkan ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["matmul", "batch_matmul", "conv"])
def test_vulkan_cooperative_matrix_f16_for_f32_operands(case):
    from halbench.compiler.codegen.glsl import generate_vulkan
    from tests.compiler.test_codegen_matrix import _COOPERATIVE_MATRIX_KHR, capabilities

    g, d = _with_precision(_cases()[case](), "f16")
    for v in generate_vulkan(d, g, "h100", "all"):  # glslang + spirv-val
        assert _COOPERATIVE_MATRIX_KHR in capabilities(v.payload)
        assert "coopMatMulAdd" in v.source and re.search(r"float16_t\((v|q\.x)\)", v.source)


@pytest.mark.parametrize("target,precision", [("h100", "bf16"), ("h100", "tf32"), ("llvmpipe", "f16"),
                                              (None, "f16"), (None, "tf32")])
def test_vulkan_without_matrix_units_for_it_keeps_the_rounded_scalar_gemm(target, precision):
    from halbench.compiler.codegen.glsl import glsl_sources

    g, d = _with_precision(cc.matmul(100, 72, 40), precision)
    plan, src = glsl_sources(d, g, target, abis=("descriptors",))
    assert plan.template == "gemm.j2"
    # the staged value: a scalar (pa0) or, read 4 along K at once (kernels._glsl_staging), a component
    assert re.search(rf"hb_round_{precision}\((pa0|qa0\.x)\)", src["descriptors"])


@pytest.mark.parametrize("precision", REDUCED)
@pytest.mark.parametrize("case", ["matmul", "batch_matmul", "conv"])
def test_lavapipe_runs_the_rounded_scalar_gemm(vk, case, precision):
    """lavapipe has no cooperative matrix: the scalar GEMM rounds the staged operands, and
    computes what the rounding NumPy oracle computes (up to f32 summation order)."""
    from halbench.compiler.codegen.glsl import generate_vulkan
    from tests.compiler.test_codegen_vulkan import run_variant

    g, d = _cases()[case]()
    xs = cc.random_inputs(g, d, seed=5)
    exact = cc.reference(g, d, xs)[0]
    g, d = _with_precision((g, d), precision)
    want = cc.reference(g, d, xs)[0]
    (v,) = generate_vulkan(d, g, None, "descriptors")
    assert "gemm" in v.source or "As[" in v.source
    got = run_variant(vk, v, xs, [(g.types[o].shape, np.float32) for o in d.outputs])[0]
    assert rel_err(got, want) < 1e-6
    assert rel_err(got, exact) > 1e-5 and rel_err(got, exact) <= TOLERANCE[precision]


def test_lavapipe_refuses_a_cooperative_matrix_bundle_in_one_line(vk, gemmconv):
    """A bundle compiled --precision f16 for an NVIDIA Vulkan target uses cooperative matrix:
    lavapipe has none, and loading says so in one line. Compiled for lavapipe's own target (or
    the generic one) the same model runs there on the rounded scalar GEMM, within tolerance."""
    from halbench.runtime import Module

    tmp, path, feeds, ref = gemmconv
    nv = tmp / "f16-h100.hbx"
    compile_model(path, CompileOptions(target_devices=("vulkan",), targets={"vulkan": "h100"},
                                       precision="f16")).write(nv)
    with pytest.raises(UserError, match="needs cooperativeMatrix") as e:
        Module.load(nv, vk)
    assert "\n" not in str(e.value)
    generic = tmp / "f16-generic.hbx"
    cm = compile_model(path, CompileOptions(target_devices=("vulkan",), precision="f16"))
    cm.write(generic)
    assert any("has no f16 matrix units" in n for n in cm.notes)
    with Module.load(generic, vk) as m:
        got = m.invoke(None, [feeds["x"]])[0]
    assert 1e-5 < rel_err(got, ref) <= TOLERANCE["f16"]


# -- what is recorded -----------------------------------------------------------------------

def test_manifest_cache_key_and_notes(gemmconv):
    tmp, path, _, _ = gemmconv
    from halbench.bundle import read_bundle

    base = CompileOptions()
    assert "precision" not in base.to_dict()  # fp32 cache keys are what they were
    keys = {p: CompileOptions(precision=p).cache_key() for p in PRECISIONS}
    assert len(set(keys.values())) == 4 and keys["fp32"] == base.cache_key()
    cm = compile_model(path, CompileOptions(target_devices=("local", "vulkan"), precision="bf16",
                                            targets={"vulkan": "h100"}))
    out = tmp / "recorded.hbx"
    cm.write(out)
    assert read_bundle(out).manifest.options["precision"] == "bf16"
    assert any("vulkan target h100 has no bf16 matrix units" in n for n in cm.notes)
    roots = [d.attrs["root"] for d in cm.graph.ops if d.attrs["root"].kind in ("conv2d", "matmul")]
    assert roots and all(r.attrs["precision"] == "bf16" for r in roots)


def test_run_suite_records_precision_and_its_tolerance(tmp_path):
    from halbench.bench.results import validate
    from halbench.bench.runner import run_suite
    from halbench.bench.suite import load_suite, with_precision

    suite = tmp_path / "s.yaml"
    suite.write_text("name: p\ndevices: ['local-sync://']\n"
                     "settings: {warmup: 1, min_time_s: 0.0, min_samples: 2, max_samples: 2}\n"
                     "models: [{name: mlp16, zoo: tiny-mlp, precision: f16}, {name: mlp, zoo: tiny-mlp}]\n")
    s = load_suite(str(suite))
    assert [b.params.get("precision") for b in s.benchmarks] == ["f16", None]
    assert {b.params["precision"] for b in with_precision(s, "tf32").benchmarks} == {"tf32"}
    with pytest.raises(UserError, match="unknown"):
        with_precision(s, "int4")
    out = tmp_path / "r.json"
    run_suite(s, out, progress=False)
    doc = json.loads(out.read_text())
    validate(doc)
    by = {b["name"]: b for b in doc["benchmarks"]}
    assert by["mlp16"]["status"] == "ok" and by["mlp"]["status"] == "ok"
    assert by["mlp16"]["correctness"]["precision"] == "f16"
    assert by["mlp16"]["correctness"]["tolerance"] == tolerance("f16")
    assert by["mlp"]["correctness"]["precision"] == "fp32"
    assert by["mlp"]["correctness"]["tolerance"] == 1e-4
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: p\nmodels: [{name: m, zoo: tiny-mlp, precision: fp8}]\n")
    with pytest.raises(UserError, match="precision"):
        load_suite(str(bad))


def test_torch_peer_takes_f16_and_bf16_only_where_it_runs_them():
    from halbench.errors import BadOption
    from halbench.peers import get_peer, parse_peer

    spec = parse_peer({"peer": "torch/cudagraph", "precision": "f16"})
    assert get_peer("torch").runtime(spec, "cuda") == "torch-cudagraph-f16"
    with pytest.raises(BadOption, match="not one this peer runs"):
        parse_peer({"peer": "onnxruntime/cpu", "precision": "bf16"})
    with pytest.raises(BadOption, match="unknown"):
        parse_peer({"peer": "torch/eager", "precision": "f8"})


# -- GPU (--gpu): the matrix GEMM of f32 operands against the rounding oracle ---------------

GPU_PRECISION_CASES = {**_cases(), "matmul_aligned": lambda: cc.matmul(128, 96, 64, epilogue=True),
                       "conv_hwcf": lambda: cc.conv("nhwc_hwcf", 2, 8, 13, 11, 24, (3, 3), 1, 1, (1, 1, 1, 1)),
                       # the mma.sync GEMM's 128x128 tiles (8 warps, several k steps) and a 1x1
                       # conv whose im2col operand comes in by vectors / cp.async
                       "matmul_big": lambda: cc.matmul(300, 520, 200, epilogue=True),
                       "conv1x1": lambda: cc.conv("nchw", 2, 64, 8, 8, 48, (1, 1), 1, 1, (0, 0, 0, 0), epilogue=True)}


def _run_against_oracle(dev, variant, g, d, precision: str) -> None:
    """Products of rounded operands are exact in f32, so the GPU and the rounding NumPy oracle
    differ only in summation order (~1e-7); the unrounded f32 result is far from both."""
    from tests.compiler.test_codegen_vulkan import run_variant

    xs = cc.random_inputs(g, d, seed=7)
    want = cc.reference(g, d, xs)[0]
    root = d.attrs["root"]
    root.attrs.pop("precision")
    exact = cc.reference(g, d, xs)[0]
    root.attrs["precision"] = precision
    got = run_variant(dev, variant, xs, [(g.types[o].shape, np.float32) for o in d.outputs])[0]
    assert np.isfinite(got).all()
    assert rel_err(got, want) < 1e-5, f"{precision}: {rel_err(got, want):.2e} from the rounding oracle"
    assert rel_err(got, exact) > 1e-5  # the operands were rounded


@pytest.mark.gpu
@pytest.mark.parametrize("precision", REDUCED)
@pytest.mark.parametrize("case", sorted(GPU_PRECISION_CASES))
def test_runs_on_cuda_matrix_units(case, precision):
    import halbench
    from halbench.compiler.codegen.cuda import generate_cuda

    with halbench.create_device("cuda://") as dev:
        g, d = _with_precision(GPU_PRECISION_CASES[case](), precision)
        (v,) = generate_cuda(d, g, dev.info.identity.arch, formats=("cubin",))
        assert "mma.sync.aligned" in v.source or "nvcuda::wmma" in v.source  # sm_80+ / earlier
        _run_against_oracle(dev, v, g, d, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", REDUCED)
@pytest.mark.parametrize("case", sorted(GPU_PRECISION_CASES))
def test_runs_on_vulkan(case, precision):
    """f16 on the cooperative matrix where the device has it; tf32 / bf16 on the rounded scalar GEMM."""
    import halbench
    from halbench.compiler.codegen.glsl import generate_vulkan
    from halbench.compiler.targets import target_from_device

    with halbench.create_device("vulkan://") as dev:
        target = target_from_device(dev.info, "vulkan")
        g, d = _with_precision(GPU_PRECISION_CASES[case](), precision)
        (v,) = generate_vulkan(d, g, target, "bda")
        _run_against_oracle(dev, v, g, d, precision)
