"""A depthwise convolution computed inside the 1x1 convolution that reads it
(passes/fuse_depthwise.py, gemm.j2 DW, the local kernels' ``prologue``): in torch.onnx-exported
MobileNetV2 inverted-residual blocks (stride 1 with the residual add, stride 2 with padding at
an odd size) the fused schedule has one dispatch and one barrier less per block, and its
results match onnxruntime on local-sync://, vulkan:// (lavapipe) and webgpu:// as the unfused
schedule's do; the fused CUDA kernels compile with NVRTC; what the pass must not fuse stays
apart; the fusion is off unless asked for; a damaged prologue in a bundle is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from halbench.compiler import CompileOptions, compile_model
from tests.compiler.helpers import device_or_skip, onnx_reference, rel_err, run_local

pytest.importorskip("onnxruntime")
pytest.importorskip("iree.compiler")


def _steps(cm) -> list[str]:
    return ["|" if s.kind == "barrier" else s.name for s in cm.manifest.functions[0].steps
            if s.kind in ("barrier", "dispatch")]


def _blocks(tmp: Path, mid_readers: bool = False) -> tuple[Path, dict[str, np.ndarray]]:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class InvertedResidual(nn.Module):  # torchvision's MobileNetV2 block
        def __init__(self, cin: int, mid: int, cout: int, stride: int) -> None:
            super().__init__()
            self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6())
            self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                                    nn.BatchNorm2d(mid), nn.ReLU6())
            self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            d = self.dw(self.expand(x))
            y = self.project(d)
            if mid_readers:  # the depthwise result read twice: it must stay a dispatch
                y = y + d[:, : y.shape[1]]
            return x + y if self.residual else y

    torch.manual_seed(0)
    m = nn.Sequential(InvertedResidual(8, 24, 8, 1), InvertedResidual(8, 40, 12, 2)).eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):  # statistics that are not the identity
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 8, 13, 11)
    path = tmp / ("blocks2.onnx" if mid_readers else "blocks.onnx")
    torch.onnx.export(m, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    return path, {"x": x.numpy()}


def _compile(path: Path, fuse: bool, **options) -> object:
    return compile_model(path, CompileOptions(tuning_cache="off", fuse_depthwise=fuse, **options))


def test_inverted_residuals_fuse_and_match_onnxruntime(vk, tmp_path: Path) -> None:
    path, feeds = _blocks(tmp_path)
    ref = onnx_reference(path, feeds)[0]
    opts = {"target_devices": ("vulkan", "webgpu", "local"), "targets": {"vulkan": "lavapipe"}}
    on, off = _compile(path, True, **opts), _compile(path, False, **opts)
    s_on, s_off = _steps(on), _steps(off)
    fused = [s for s in s_on if ">" in s]
    assert fused == ["depthwise_conv+elementwise>conv+elementwise"] * 2, s_on
    assert "depthwise_conv+elementwise" in s_off and not any(">" in s for s in s_off), s_off
    assert len([s for s in s_on if s != "|"]) == len([s for s in s_off if s != "|"]) - 2
    assert s_on.count("|") == s_off.count("|") - 2
    uris = ["local-sync://", "vulkan://"]
    try:
        uris.append(device_or_skip("webgpu://"))
    except pytest.skip.Exception:
        pass  # no wgpu here: the other two devices still check the fused kernels
    for what, cm in (("fused", on), ("unfused", off)):
        bundle = tmp_path / f"{what}.hbx"
        cm.write(bundle)
        for uri in uris:
            y = run_local(bundle, feeds, uri)[0]
            assert y.shape == ref.shape and rel_err(y, ref) < 1e-5, (what, uri, rel_err(y, ref))


def test_fused_cuda_kernels_compile(tmp_path: Path) -> None:
    """The fused GEMMs' CUDA C (register-staged, the window's taps a step ahead) compiles with
    NVRTC for the H100 and keeps the fused schedule."""
    pytest.importorskip("cuda.bindings.nvrtc")
    path, _ = _blocks(tmp_path)
    cm = _compile(path, True, target_devices=("cuda",), targets={"cuda": "sm_90"})
    assert sum(">" in s for s in _steps(cm)) == 2
    formats = {v.format for e in cm.manifest.executables for v in e.variants}
    assert formats and all(f.startswith("cuda") for f in formats), formats


def test_what_must_stay_apart(tmp_path: Path) -> None:
    """A depthwise result read by a second op, and any compile at another precision, keep the
    depthwise convolution a dispatch of its own; off is the default."""
    path, feeds = _blocks(tmp_path, mid_readers=True)
    cm = _compile(path, True, target_devices=("local",))
    assert not any(">" in s for s in _steps(cm)), _steps(cm)
    y = run_local(_write(cm, tmp_path / "shared.hbx"), feeds)[0]
    assert rel_err(y, onnx_reference(path, feeds)[0]) < 1e-5
    path1, _ = _blocks(tmp_path)
    assert not any(">" in s for s in _steps(_compile(path1, True, target_devices=("local",), precision="tf32")))
    assert CompileOptions(target_devices=("local",)).fuse_depthwise is False
    assert not any(">" in s for s in _steps(compile_model(path1, CompileOptions(target_devices=("local",)))))


def test_pass_leaves_a_strided_pointwise_conv(tmp_path: Path) -> None:
    """A 1x1 convolution of stride 2 after the depthwise one is no plain GEMM over its pixels:
    the pass leaves the pair as it is."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    m = nn.Sequential(nn.Conv2d(6, 6, 3, 1, 1, groups=6), nn.ReLU6(), nn.Conv2d(6, 4, 1, stride=2)).eval()
    x = torch.randn(1, 6, 9, 9)
    path = tmp_path / "strided.onnx"
    torch.onnx.export(m, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    cm = _compile(path, True, target_devices=("local",))
    assert not any(">" in s for s in _steps(cm)), _steps(cm)
    y = run_local(_write(cm, tmp_path / "strided.hbx"), {"x": x.numpy()})[0]
    assert rel_err(y, onnx_reference(path, {"x": x.numpy()})[0]) < 1e-5


def _write(cm, path: Path) -> Path:
    cm.write(path)
    return path


def test_damaged_prologue_is_refused() -> None:
    """The local kernels take a bundle's prologue as untrusted: another kernel in it, or an
    operand index the dispatch does not have, is a one-line error, not a read of another array."""
    import halbench.kernels.ops  # noqa: F401  (registers the hb.* kernels)
    from halbench.kernels.ops.common import _operand, _prologue

    x = np.ones((1, 2, 3, 3), np.float32)
    w = np.ones((2, 3, 3), np.float32)
    op = {"layout": "nchw", "pads": [1, 1, 1, 1], "pad_value": 0.0, "strides": [1, 1], "dilations": [1, 1]}
    r = _prologue({"kernel": "hb.depthwise_conv2d", "op": op, "root_inputs": [0, 1]}, [x, w])
    assert r.shape == (1, 2, 3, 3) and r[0, 0, 1, 1] == 9.0 and r[0, 0, 0, 0] == 4.0
    with pytest.raises(ValueError, match="cannot run kernel 'hb.attention'"):
        _prologue({"kernel": "hb.attention", "op": {}, "root_inputs": []}, [x, w])
    with pytest.raises(ValueError, match="does not have"):
        _prologue({"kernel": "hb.depthwise_conv2d", "op": op, "root_inputs": [0, 5]}, [x, w])
    with pytest.raises(ValueError, match="does not have"):
        _operand([x, w], -1, None)  # -1 without a prologue
    with pytest.raises(ValueError, match="does not have"):
        _operand([x, w], -2, r)
