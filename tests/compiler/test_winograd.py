"""Winograd F(2x2, 3x3) for 3x3 convolutions (passes/winograd.py).

The filter transform against the definition (a 2x2 output tile of a correlation), the rewrite
on real exporter output (torch.onnx) checked against onnxruntime on local-sync and lavapipe (odd
sizes, a fused bias / ReLU / residual epilogue, reduced precisions), the convolutions it must
leave alone, seeded-random weights the runtime regenerates through the same transform, and the
bundle schema refusing a transform that does not fit.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from halbench.bundle.manifest import WeightDecl
from halbench.bundle.weights import weight_array, winograd_filter
from halbench.compiler import CompileOptions, compile_model
from halbench.errors import UserError
from tests.compiler.helpers import onnx_reference, rel_err, run_local

torch = pytest.importorskip("torch")

_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def test_filter_transform_gives_the_correlation_of_a_tile() -> None:
    rng = np.random.default_rng(0)
    g = rng.standard_normal((5, 3, 3, 3))  # Co, C, 3, 3
    d = rng.standard_normal((3, 4, 4))     # C, 4x4 input tile
    u = winograd_filter(g.astype(np.float32)).astype(np.float64).reshape(4, 4, 5, 3)
    v = np.einsum("ia,cab,jb->ijc", _BT, d, _BT)
    m = np.einsum("ijoc,ijc->ijo", u, v)
    y = np.einsum("ri,ijo,sj->ors", _AT, m, _AT)
    direct = np.array([[[np.sum(g[o] * d[:, r:r + 3, s:s + 3]) for s in range(2)] for r in range(2)]
                       for o in range(5)])
    np.testing.assert_allclose(y, direct, rtol=1e-5, atol=1e-6)
    with pytest.raises(UserError, match="needs a \\[Co, C, 3, 3\\] filter"):
        winograd_filter(np.zeros((2, 2, 5, 5), np.float32))


class _Net(torch.nn.Module):
    """Two 3x3 convolutions (bias + ReLU; no bias + a residual add + ReLU) and the kinds the
    rewrite must leave alone: a stride-2 3x3, a 1x1, a grouped 3x3 and a dilated 3x3."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(12, 20, 3, padding=1)
        self.b = torch.nn.Conv2d(20, 12, 3, padding=1, bias=False)
        self.s2 = torch.nn.Conv2d(12, 8, 3, stride=2, padding=1)
        self.p = torch.nn.Conv2d(8, 8, 1)
        self.gr = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.dl = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2)

    def forward(self, x):
        y = torch.relu(self.a(x))
        y = torch.relu(self.b(y) + x)
        z = self.p(self.s2(y))
        return y, self.dl(self.gr(z))


@pytest.fixture(scope="module")
def net(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    pytest.importorskip("iree.compiler", reason="the ONNX front end (halbench[compiler]) is not installed")
    tmp = tmp_path_factory.mktemp("winograd")
    torch.manual_seed(0)
    path = tmp / "net.onnx"
    x = torch.randn(2, 12, 7, 9)  # odd H and W: the last tiles overhang
    torch.onnx.export(_Net().eval(), (x,), str(path), input_names=["x"], opset_version=17, dynamo=False)
    return path, {"x": np.random.default_rng(1).standard_normal((2, 12, 7, 9)).astype(np.float32)}


def _compile(path: Path, out: Path, **kw) -> tuple[Path, dict]:
    cm = compile_model(path, CompileOptions(**kw))
    cm.write(out)
    with zipfile.ZipFile(out) as z:
        return out, json.loads(z.read("manifest.json"))


def test_only_qualifying_convolutions_are_rewritten(net, tmp_path) -> None:
    path, _ = net
    _, on = _compile(path, tmp_path / "on.hbx", winograd="on")
    _, off = _compile(path, tmp_path / "off.hbx", winograd="off")
    names = {w["name"] for w in on["weights"]}
    # the two stride-1 3x3 filters are stored transformed ([16, Co, C]), the others as they were
    assert {n for n in names if n.endswith(".winograd")} == {"a.weight.winograd", "b.weight.winograd"}
    shapes = {w["name"]: w["shape"] for w in on["weights"]}
    assert shapes["a.weight.winograd"] == [16, 20, 12] and shapes["b.weight.winograd"] == [16, 12, 20]
    assert {"s2.weight", "p.weight", "dl.weight"} <= names and "a.weight" not in names
    # two convolutions became three dispatches each; the epilogues joined the output transform
    steps = lambda m: sum(1 for s in m["functions"][0]["steps"] if s["kind"] == "dispatch")
    assert steps(on) == steps(off) + 4


@pytest.mark.parametrize("device", ["local-sync://", "vulkan://"])
@pytest.mark.parametrize("precision", ["fp32", "f16"])
def test_outputs_match_onnxruntime(net, tmp_path, device, precision) -> None:
    path, feeds = net
    api = device.split(":")[0].replace("local-sync", "local")
    ref = onnx_reference(path, feeds)
    bundle, _ = _compile(path, tmp_path / "on.hbx", winograd="on", target_devices=(api,), precision=precision)
    out = run_local(bundle, feeds, device)
    tol = 1e-4 if precision == "fp32" else 1e-2  # precision.TOLERANCE
    for o, r in zip(out, ref):
        assert rel_err(o, r) < tol
    if precision == "fp32":
        assert max(float(np.abs(o - r).max()) for o, r in zip(out, ref)) < 1e-5


def test_random_weights_are_declared_transformed_and_regenerated(net, tmp_path) -> None:
    path, feeds = net
    a, _ = _compile(path, tmp_path / "off.hbx", winograd="off", weights="random")
    b, man = _compile(path, tmp_path / "on.hbx", winograd="on", weights="random")
    w = next(w for w in man["weights"] if w["name"] == "a.weight.winograd")
    assert w["storage"] == "random" and w["transform"] == "winograd-f2x3" and w["random_shape"] == [20, 12, 3, 3]
    assert not any(m.startswith("weights/a.weight") for m in man.get("members", {}))
    # the same seeded filter either way: the two bundles compute the same function
    for x, y in zip(run_local(a, feeds), run_local(b, feeds)):
        assert rel_err(x, y) < 1e-5
    # f16: the transformed filter is drawn as f32, transformed, then rounded
    _, man16 = _compile(path, tmp_path / "on16.hbx", winograd="on", weights="random", precision="f16")
    w16 = next(w for w in man16["weights"] if w["name"].startswith("a.weight.winograd"))
    assert w16["dtype"] == "f16" and w16["random_dtype"] == "f32" and w16["transform"] == "winograd-f2x3"


def test_a_regenerated_transform_is_the_compile_time_one() -> None:
    decl = WeightDecl("u", 0, "f32", (16, 6, 4), "random", seed=7, init={"distribution": "normal", "scale": 0.02},
                      transform="winograd-f2x3", random_shape=(6, 4, 3, 3))
    from halbench.bundle.weights import random_weight

    expect = winograd_filter(random_weight("f32", (6, 4, 3, 3), 7, decl.init))
    np.testing.assert_array_equal(weight_array(decl), expect)


@pytest.mark.parametrize(("patch", "match"), [
    ({"shape": [16, 6, 5]}, "winograd-f2x3 of a random \\[6, 4, 3, 3\\] weight gives \\[16, 6, 4\\]"),
    ({"random_shape": [6, 4, 5, 5]}, "gives nothing"),
    ({"transform": "fft"}, "transform"),
    ({"random_shape": None}, "transform and random_shape go together"),
])
def test_the_schema_refuses_a_transform_that_does_not_fit(patch, match) -> None:
    from pydantic import ValidationError

    from halbench.bundle.manifest_schema import WeightDoc

    doc = {"name": "u", "buffer": 0, "dtype": "f32", "shape": [16, 6, 4], "storage": "random", "seed": 7,
           "transform": "winograd-f2x3", "random_shape": [6, 4, 3, 3]}
    WeightDoc.model_validate(doc)
    with pytest.raises(ValidationError, match=match):
        WeightDoc.model_validate({**doc, **patch})


@pytest.mark.parametrize("kernel", ["hb.winograd_input", "hb.winograd_output"])
def test_a_damaged_tiles_attribute_is_refused_before_anything_is_sized_from_it(kernel) -> None:
    """A crafted bundle's local kernel attrs: ``tiles`` that do not fit the image is a one-line
    error, not a huge allocation or a crash."""
    from halbench.kernels.ops.common import KERNELS

    x = np.zeros((1, 4, 6, 5), np.float32) if kernel.endswith("input") else np.zeros((16, 4, 9), np.float32)
    op = {"tiles": [1 << 30, 3], "out_shape": [1, 4, 6, 5]}
    with pytest.raises(UserError, match="tiles \\[1073741824, 3\\] do not fit its 6x5 image") as e:
        KERNELS[kernel](op, [x])
    assert "\n" not in str(e.value)
    if kernel.endswith("output"):  # right tiles, but the GEMM result is not what they make
        with pytest.raises(UserError, match="reads \\[16, 4, 12\\], not the \\[16, 4, 9\\]"):
            KERNELS[kernel]({"tiles": [3, 3], "out_shape": [1, 4, 6, 5]}, [np.zeros((16, 4, 12), np.float32)])
        assert KERNELS[kernel]({"tiles": [3, 3], "out_shape": [1, 4, 6, 5]}, [x])[0].shape == (1, 4, 6, 5)


def test_bad_mode_is_a_one_line_error() -> None:
    with pytest.raises(UserError, match="winograd must be one of auto, on, off, got 'maybe'"):
        CompileOptions(winograd="maybe")


def _conv_graph(n: int, c: int, h: int, w: int, co: int, seed: int = 3):
    """One 3x3 convolution (padding 1) with a stored filter, then bias + ReLU: an IR graph (the
    GPU machine has no ONNX front end)."""
    from halbench.compiler.ir import Body, Graph, Node, Op, TensorType, Weight

    rng = np.random.default_rng(seed)
    g = Graph(name="wconv")
    g.types = {"x": TensorType((n, c, h, w), "f32"), "w": TensorType((co, c, 3, 3), "f32"),
               "bias": TensorType((co,), "f32"), "r": TensorType((n, co, h, w), "f32"),
               "y": TensorType((n, co, h, w), "f32")}
    wd = (rng.standard_normal((co, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    bd = rng.standard_normal(co).astype(np.float32)
    g.weights = {"w": Weight("w", g.types["w"], wd), "bias": Weight("bias", g.types["bias"], bd)}
    body = Body()
    a, b = body.add(Node("arg", (), "f32", 0)), body.add(Node("arg", (), "f32", 1))
    s = body.add(Node("addf", (a, b), "f32"))
    zero = body.add(Node("const", (), "f32", 0.0))
    body.yields = [body.add(Node("maximumf", (s, zero), "f32"))]
    ident = tuple(("d", i) for i in range(4))
    g.ops = [Op("conv2d", ["x", "w"], ["r"], {"layout": "nchw", "strides": [1, 1], "dilations": [1, 1],
                                              "pads": [1, 1, 1, 1], "pad_value": 0.0}),
             Op("generic", ["r", "bias"], ["y"], {"dims": [n, co, h, w], "iterators": ["parallel"] * 4,
                                                  "maps": [ident, (("d", 1),), ident], "body": body,
                                                  "reduce": [None], "inits": [None], "init_consts": [None]})]
    g.inputs, g.outputs = [("x", "x")], [("y", "y")]
    return g, wd, bd


def _direct(x: np.ndarray, wd: np.ndarray, bd: np.ndarray) -> np.ndarray:
    _, c, h, w = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, a:a + h, b:b + w] for a in range(3) for b in range(3)], axis=2)  # n c 9 h w
    y = np.einsum("nckhw,ock->nohw", cols, wd.reshape(wd.shape[0], c, 9).astype(np.float64))
    return np.maximum(y + bd[None, :, None, None], 0.0)


@pytest.mark.parametrize(("precision", "c", "taken"), [("fp32", 64, True), ("fp32", 32, False), ("tf32", 128, False),
                                                       ("f16", 256, True), ("bf16", 256, True)])
def test_auto_takes_what_the_h100_measured_faster(precision, c, taken) -> None:
    from halbench.compiler.passes.winograd import auto_takes, winograd

    g, _, _ = _conv_graph(1, c, 14, 14, c)
    assert auto_takes(g.ops[0], g, precision) is taken
    rewritten = winograd(g, "auto", precision)
    assert any(op.kind == "winograd_input" for op in rewritten.ops) is taken
    # fp32 wants enough 2x2 tiles as well: 1 x 7 x 7 / 4 -> 16 tiles is too few
    small, _, _ = _conv_graph(1, 512, 7, 7, 512)
    assert not auto_takes(small.ops[0], small, "fp32") and auto_takes(small.ops[0], small, "f16")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "f16"])
@pytest.mark.parametrize("api", ["cuda", "vulkan"])
def test_gpu_matches_the_direct_convolution(api, precision, tmp_path) -> None:
    """On the GPU (CUDA, NVIDIA's Vulkan): odd H and W, the bias + ReLU epilogue in the output
    transform, at each precision, against a float64 direct convolution."""
    from halbench.compiler.compile import compile_graph
    from halbench.precision import TOLERANCE
    from tests.compiler.helpers import device_or_skip

    uri = device_or_skip(f"{api}://")
    g, wd, bd = _conv_graph(2, 64, 15, 13, 48)
    cm = compile_graph(g, CompileOptions(target_devices=(api,), targets={api: "auto"}, winograd="on",
                                         precision=precision))
    kinds = [d.attrs["root"].kind for d in cm.graph.ops if d.kind == "dispatch"]
    assert kinds == ["winograd_input", "batch_matmul", "winograd_output"]
    path = tmp_path / "w.hbx"
    cm.write(path)
    x = np.random.default_rng(5).standard_normal((2, 64, 15, 13)).astype(np.float32)
    (y,) = run_local(path, {"x": x}, uri)
    assert rel_err(y, _direct(x, wd, bd)) < (1e-5 if precision == "fp32" else TOLERANCE[precision])
