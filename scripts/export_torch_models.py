#!/usr/bin/env python3
"""Export small real PyTorch models to ONNX (opset 17) for tests/compiler/test_exported_models.py.

PyTorch is not a halbench dependency: run this from a throwaway environment,

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 onnx numpy
    /tmp/torchenv/bin/python scripts/export_torch_models.py [OUT_DIR]

OUT_DIR defaults to tests/data/onnx. Seeds are fixed, so a rerun with the same torch version
gives the same weights. The exporter is the TorchScript one (``dynamo=False``): it emits opset 17
directly, with constant folding, and in eval mode folds BatchNorm into the preceding Conv, as
files exported by users for inference usually are.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

OPSET = 17


class ResidualCNN(nn.Module):
    """Conv/BatchNorm/ReLU stem, MaxPool, one residual basic block, a strided conv, global pool, Linear.

    The exporter folds a BatchNorm that follows a Conv into the Conv; the one after the residual
    add (pre-activation style) stays a BatchNormalization node."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16))
        self.post = nn.BatchNorm2d(16)
        self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stem(x))
        x = torch.relu(self.post(x + self.block(x)))
        return self.head(self.down(x))


class TinyTransformer(nn.Module):
    """Token embedding + learned positions, two post-norm encoder layers (GELU), mean pool, Linear."""

    def __init__(self, vocab: int = 64, seq: int = 16, d_model: int = 64, heads: int = 4,
                 ffn: int = 64, num_classes: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(1, seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(ids) + self.pos)
        return self.head(h.mean(dim=1))


class NormMLP(nn.Module):
    """Linear, LayerNorm, GELU (twice), Linear, Softmax over the classes."""

    def __init__(self, features: int = 32, hidden: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.LayerNorm(hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.GELU(),
                                 nn.Linear(hidden, num_classes), nn.Softmax(dim=-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MobileBlock(nn.Module):
    """MobileNet style: hardswish stem, depthwise-separable conv (ReLU6), an inverted residual."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()

        def cbn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]

        self.stem = nn.Sequential(*cbn(3, 16, 3, 2), nn.Hardswish())
        self.separable = nn.Sequential(*cbn(16, 16, 3, groups=16), nn.ReLU6(), *cbn(16, 24, 1))
        self.inverted = nn.Sequential(*cbn(24, 72, 1), nn.ReLU6(), *cbn(72, 72, 3, groups=72), nn.ReLU6(),
                                      *cbn(72, 24, 1))
        self.head = nn.Sequential(nn.Hardswish(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.separable(self.stem(x))
        return self.head(x + self.inverted(x))


def _randomize_batchnorm(model: nn.Module) -> None:
    """Non-trivial running statistics and affine parameters, so a folded BatchNorm shows."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


#: file stem -> (model factory, example inputs factory, input names, output names)
MODELS = {
    "torch_resnet_cnn": (ResidualCNN, lambda: (torch.randn(1, 3, 32, 32),), ["input"], ["logits"]),
    "torch_transformer": (TinyTransformer, lambda: (torch.randint(0, 64, (1, 16)),), ["input_ids"], ["logits"]),
    "torch_mlp_layernorm": (NormMLP, lambda: (torch.randn(4, 32),), ["input"], ["probs"]),
    "torch_mobile_block": (MobileBlock, lambda: (torch.randn(1, 3, 32, 32),), ["input"], ["logits"]),
}


def export(stem: str, out_dir: Path, seed: int = 0) -> Path:
    factory, example, input_names, output_names = MODELS[stem]
    torch.manual_seed(seed)
    model = factory()
    _randomize_batchnorm(model)
    model.eval()
    path = out_dir / f"{stem}.onnx"
    # Not under no_grad: with grad enabled, nn.TransformerEncoderLayer skips its fused fast path
    # (aten::_transformer_encoder_layer_fwd, which has no ONNX export) and traces the plain ops.
    torch.onnx.export(model, example(), str(path), dynamo=False, opset_version=OPSET,
                      input_names=input_names, output_names=output_names, do_constant_folding=True)
    return path


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "tests/data/onnx"
    out_dir.mkdir(parents=True, exist_ok=True)
    for stem in MODELS:
        path = export(stem, out_dir)
        print(f"{path}  {path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
