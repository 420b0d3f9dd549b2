"""Convolutional networks in torchvision's layout: MobileNetV2, ResNet-50, and a tiny CNN and MLP.

Graphs follow what ``torch.onnx.export`` emits for the torchvision models in eval mode:
BatchNorm folded into the convolutions (or kept, with ``fold_bn=False``), ReLU6 as Clip,
adaptive average pooling as GlobalAveragePool, Flatten, and the classifier as Gemm.
"""

from __future__ import annotations

from halbench.bench.zoo.graph import GraphBuilder
from halbench.bench.zoo.spec import InputSpec

__all__ = [
    "build_mobilenet_v2",
    "build_resnet50",
    "build_tiny_cnn",
    "build_tiny_mlp",
    "image_inputs",
    "mlp_inputs",
]

# torchvision's MobileNetV2 inverted-residual settings: expand ratio t, channels c, repeats n,
# first stride s.
_MOBILENET_V2_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def image_inputs(batch: int, seq: int, *, resolution: int = 224, **_) -> list[InputSpec]:
    return [InputSpec("input", (batch, 3, resolution, resolution), "float32", "normal")]


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: to a multiple of 8, never more than 10% down."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _classifier(g: GraphBuilder, x: str, channels: int, num_classes: int, batch: int) -> None:
    pooled = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    g.output(g.gemm(pooled, channels, num_classes, "classifier"), "logits", (batch, num_classes))


def build_mobilenet_v2(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                       width_mult: float = 1.0, num_classes: int = 1000, resolution: int = 224,
                       fold_bn: bool = True) -> None:
    x = g.input("input", inputs[0].shape, "float32")
    cin = _make_divisible(32 * width_mult)
    last = _make_divisible(1280 * max(1.0, width_mult))
    x = g.relu6(g.conv_bn(x, 3, cin, 3, stride=2, fold_bn=fold_bn, prefix="features.0"))
    block = 1
    for t, c, n, s in _MOBILENET_V2_SETTINGS:
        cout = _make_divisible(c * width_mult)
        for i in range(n):
            stride = s if i == 0 else 1
            p = f"features.{block}"
            hidden = round(cin * t)
            y = x
            if t != 1:
                y = g.relu6(g.conv_bn(y, cin, hidden, 1, fold_bn=fold_bn, prefix=f"{p}.expand"))
            y = g.relu6(g.conv_bn(y, hidden, hidden, 3, stride=stride, groups=hidden, fold_bn=fold_bn,
                                  prefix=f"{p}.dw"))
            residual = stride == 1 and cin == cout
            # The projection is linear. On a residual branch its BN scale is smaller, as training
            # leaves it, so that the sum over 10 residual blocks keeps activations in range.
            y = g.conv_bn(y, hidden, cout, 1, fold_bn=fold_bn, prefix=f"{p}.project",
                          gamma_scale=0.5 if residual else 1.0)
            x = g.node("Add", [x, y]) if residual else y
            cin = cout
            block += 1
    x = g.relu6(g.conv_bn(x, cin, last, 1, fold_bn=fold_bn, prefix=f"features.{block}"))
    _classifier(g, x, last, num_classes, batch)


def build_resnet50(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                   num_classes: int = 1000, resolution: int = 224, fold_bn: bool = True,
                   layers: tuple[int, ...] = (3, 4, 6, 3)) -> None:
    x = g.input("input", inputs[0].shape, "float32")
    x = g.node("Relu", [g.conv_bn(x, 3, 64, 7, stride=2, fold_bn=fold_bn, prefix="conv1")])
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    inplanes = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True), start=1):
        for i in range(blocks):
            # torchvision's ResNet v1.5: the stride sits on the 3x3 conv, not the first 1x1.
            stride = 2 if stage > 1 and i == 0 else 1
            p = f"layer{stage}.{i}"
            y = g.node("Relu", [g.conv_bn(x, inplanes, planes, 1, fold_bn=fold_bn, prefix=f"{p}.conv1")])
            y = g.node("Relu", [g.conv_bn(y, planes, planes, 3, stride=stride, fold_bn=fold_bn,
                                          prefix=f"{p}.conv2")])
            # A smaller last-BN scale, as trained ResNets have, keeps the residual sum in range.
            y = g.conv_bn(y, planes, planes * 4, 1, fold_bn=fold_bn, prefix=f"{p}.conv3", gamma_scale=0.3)
            identity = x
            if stride != 1 or inplanes != planes * 4:
                identity = g.conv_bn(x, inplanes, planes * 4, 1, stride=stride, fold_bn=fold_bn,
                                     prefix=f"{p}.downsample")
            x = g.node("Relu", [g.node("Add", [y, identity])])
            inplanes = planes * 4
    _classifier(g, x, inplanes, num_classes, batch)


def build_tiny_cnn(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                   num_classes: int = 10, resolution: int = 32, fold_bn: bool = True) -> None:
    """Every CNN op kind in a few milliseconds: strided conv, depthwise conv, pointwise conv,
    residual add, ReLU and ReLU6, max pool, global average pool, Gemm."""
    x = g.input("input", inputs[0].shape, "float32")
    x = g.node("Relu", [g.conv_bn(x, 3, 16, 3, stride=2, fold_bn=fold_bn, prefix="stem")])
    y = g.relu6(g.conv_bn(x, 16, 16, 3, groups=16, fold_bn=fold_bn, prefix="dw"))
    y = g.conv_bn(y, 16, 16, 1, fold_bn=fold_bn, prefix="pw", gamma_scale=0.5)
    x = g.node("Add", [x, y])
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Relu", [g.conv_bn(x, 16, 32, 3, fold_bn=fold_bn, prefix="conv")])
    _classifier(g, x, 32, num_classes, batch)


def mlp_inputs(batch: int, seq: int, *, features: int = 64, **_) -> list[InputSpec]:
    return [InputSpec("input", (batch, features), "float32", "normal")]


def build_tiny_mlp(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                   features: int = 64, hidden: int = 128, num_classes: int = 10) -> None:
    """Two Gemm layers with a ReLU and a Softmax: the smallest model with a reduction in it."""
    x = g.input("input", inputs[0].shape, "float32")
    x = g.node("Relu", [g.gemm(x, features, hidden, "fc1")])
    x = g.node("Softmax", [g.gemm(x, hidden, num_classes, "fc2")], axis=-1)
    g.output(x, "probabilities", (batch, num_classes))
