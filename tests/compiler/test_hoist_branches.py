"""A residual's shallow branch hoisted beside the deep one (passes/hoist_branches.py): in a
torch.onnx-exported ResNet bottleneck with a downsample convolution, the downsample runs next to
the block's first convolution with no barrier between them, the last convolution carries the
residual add and ReLU, and the results are bit-identical to the unhoisted schedule and match
onnxruntime on local-sync:// and vulkan:// (lavapipe); ResNet-50 loses one barrier per
downsample block, and models without such joins keep their schedule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from halbench.compiler import CompileOptions, compile_model
from halbench.compiler.passes import hoist_branches as hb
from tests.compiler.helpers import onnx_reference, same_bits_both_ways

pytest.importorskip("onnxruntime")
pytest.importorskip("iree.compiler")


def _schedule(cm) -> list[str]:
    """The function's steps: dispatch names, ``|`` for a barrier."""
    return ["|" if s.kind == "barrier" else s.name for s in cm.manifest.functions[0].steps
            if s.kind in ("barrier", "dispatch")]


def _compile(path: Path, on: bool, monkeypatch, **options) -> object:
    monkeypatch.setattr(hb, "ENABLED", on)
    return compile_model(path, CompileOptions(tuning_cache="off", **options))


def _bottleneck(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Bottleneck(nn.Module):  # torchvision's, with its downsample: 1x1 / 3x3 / 1x1 + 1x1 side
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(16, 8, 1, bias=False), nn.BatchNorm2d(8)
            self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.conv3, self.bn3 = nn.Conv2d(8, 32, 1, bias=False), nn.BatchNorm2d(32)
            self.downsample = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32))
            self.relu = nn.ReLU()

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + self.downsample(x))

    torch.manual_seed(0)
    m = Bottleneck().eval()
    for bn in (m.bn1, m.bn2, m.bn3, m.downsample[1]):  # statistics that are not the identity
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 16, 12, 12)
    path = tmp / "bottleneck.onnx"
    torch.onnx.export(m, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    return path, {"x": x.numpy()}


def test_bottleneck_downsample_runs_beside_the_first_conv(vk, tmp_path: Path, monkeypatch) -> None:
    path, feeds = _bottleneck(tmp_path)
    ref = onnx_reference(path, feeds)[0]
    opts = {"target_devices": ("vulkan", "local"), "targets": {"vulkan": "lavapipe"}}
    on, off = _compile(path, True, monkeypatch, **opts), _compile(path, False, monkeypatch, **opts)
    s_on, s_off = _schedule(on), _schedule(off)
    # unhoisted: the downsample comes last and takes the add (it waits for conv3);
    # hoisted: it is the first dispatch, beside conv1 + ReLU, and conv3 takes the add + ReLU
    assert s_off[-1] == "conv+elementwise" and s_off[-3:-1] == ["conv", "|"], s_off
    assert s_on[:2] == ["conv", "conv+elementwise"], s_on
    assert s_on[-1] == "conv+elementwise" and "conv" not in s_on[2:], s_on
    assert s_on.count("|") == s_off.count("|") - 1
    assert len([s for s in s_on if s != "|"]) == len([s for s in s_off if s != "|"])
    same_bits_both_ways({"hoisted": on, "unhoisted": off}, feeds, ref, tmp_path)


def test_bottleneck_cuda_kernels_compile(tmp_path: Path, monkeypatch) -> None:
    """The hoisted schedule's CUDA kernels (conv3 with the residual epilogue) compile with NVRTC."""
    pytest.importorskip("cuda.bindings.nvrtc")
    path, _ = _bottleneck(tmp_path)
    cm = _compile(path, True, monkeypatch, target_devices=("cuda",), targets={"cuda": "sm_90"})
    assert _schedule(cm)[:2] == ["conv", "conv+elementwise"]
    formats = {v.format for e in cm.manifest.executables for v in e.variants}
    assert cm.manifest.executables and formats and all(f.startswith("cuda") for f in formats), formats


def test_resnet50_loses_a_barrier_per_downsample_block(tmp_path: Path, monkeypatch) -> None:
    zoo = pytest.importorskip("halbench.bench.zoo")
    for model, downsamples in (("resnet50", 4), ("mobilenetv2", 0)):
        path = tmp_path / f"{model}.onnx"
        zoo.save(model, str(path), batch=1)
        on = _schedule(_compile(path, True, monkeypatch, weights="random"))
        off = _schedule(_compile(path, False, monkeypatch, weights="random"))
        assert on.count("|") == off.count("|") - downsamples, model
        assert sorted(s for s in on if s != "|") == sorted(s for s in off if s != "|"), model
        if not downsamples:
            assert on == off
        else:  # every downsample (a plain conv) now sits beside a conv + ReLU, no barrier between
            pairs = [i for i, s in enumerate(on) if s == "conv" and on[i + 1] == "conv+elementwise"]
            assert len(pairs) == downsamples, on
