"""The Khronos webinar's mobile models: MobileBERT, DeepLabV3 (MobileNetV2) and PoseNet.

They are the graphs of the TensorFlow Lite models the webinar runs, in ONNX's NCHW layout:

* **MobileBERT** (Sun et al. 2020; google/mobilebert-uncased): 24 layers of a 512-wide body
  with a 128-wide bottleneck, 4 heads, four stacked 128->512->128 feed-forward networks per
  layer, NoNorm (an elementwise scale and shift) instead of LayerNorm, ReLU, shared query/key
  bottleneck, and 128-wide embeddings widened by a trigram convolution (concatenated left,
  centre and right neighbours, then a 384->512 linear).
* **DeepLabV3** as TFLite's ``deeplabv3_257_mv_gpu``: a MobileNetV2 backbone at depth
  multiplier 0.5 (DeepLab's mobilenetv2_dm05 checkpoint, whose 2.7 MB file that model is;
  ``width_mult=1.0`` gives the full one), ReLU6, no final 1280 conv, with atrous convolutions after output stride 8 (or 16), the mobile ASPP head
  (image pooling branch + 1x1 branch, concatenated and projected to 256), 21 PASCAL VOC logits,
  bilinear upsampling (align corners) to the 257x257 input.
* **PoseNet** as TFLite's ``posenet_mobilenet_v1_100_257x257_multi_kpt``: MobileNetV1 1.0
  (output stride 32 at 257x257, so 9x9 maps) and four 1x1 heads: 17 keypoint heatmaps,
  34 offsets, 32 forward and 32 backward displacements.

Convolution weights are He-normal with BatchNorm folded in (TFLite models are folded);
linear layers Xavier; NoNorm scales near identity, smaller where a residual sum follows so
that activations stay in range through 24 layers.
"""

from __future__ import annotations

import math

import numpy as np

from halbench.bench.zoo.bert import MASK_VALUE, bert_inputs
from halbench.bench.zoo.cnn import _make_divisible
from halbench.bench.zoo.graph import BN_EPS, GraphBuilder
from halbench.bench.zoo.spec import InputSpec
from halbench.errors import UserError

__all__ = [
    "build_deeplabv3",
    "build_mobilebert",
    "build_posenet",
    "mobile_image_inputs",
    "mobilebert_inputs",
]


def mobile_image_inputs(batch: int, seq: int, *, resolution: int = 257, **_) -> list[InputSpec]:
    return [InputSpec("input", (batch, 3, resolution, resolution), "float32", "normal")]


def _conv(g: GraphBuilder, x: str, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
          dilation: int = 1, act: str | None = "relu6", bn: bool = True, prefix: str = "conv",
          gamma_scale: float = 1.0) -> str:
    """A TFLite conv: SAME padding (symmetric here: odd kernels), folded BN, ReLU6 or ReLU."""
    pad = (kernel - 1) // 2 * dilation
    w = g.he_normal((cout, cin // groups, kernel, kernel), cin // groups * kernel * kernel)
    if bn:
        gamma, beta, mean, var = g.bn_params(cout, gamma_scale)
        scale = gamma / np.sqrt(var + BN_EPS)
        w = (w * scale[:, None, None, None]).astype(np.float32)
        b = (beta - mean * scale).astype(np.float32)
    else:
        # A head without BN (logits): Xavier-sized, so its outputs are a few units.
        w = g.xavier_normal((cout, cin // groups, kernel, kernel), cin // groups, cout)
        b = g.small(cout, 0.1)
    attrs: dict = {"kernel_shape": [kernel, kernel], "strides": [stride, stride], "pads": [pad] * 4,
                   "group": groups}
    if dilation != 1:
        attrs["dilations"] = [dilation, dilation]
    y = g.node("Conv", [x, g.weight(f"{prefix}.weight", w), g.weight(f"{prefix}.bias", b)], **attrs)
    if act == "relu6":
        return g.relu6(y)
    if act == "relu":
        return g.node("Relu", [y])
    return y


def _out(n: int, stride: int) -> int:
    return (n - 1) // stride + 1  # a 3x3 (or 1x1) conv with SAME padding


# -- DeepLabV3 -------------------------------------------------------------------------------

_MNV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
         (6, 320, 1, 1))


def build_deeplabv3(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                    num_classes: int = 21, resolution: int = 257, output_stride: int = 8,
                    width_mult: float = 0.5, aspp_channels: int = 256) -> None:
    if output_stride not in (8, 16, 32):
        raise UserError(f"output_stride must be 8, 16 or 32, not {output_stride}")
    x = g.input("input", inputs[0].shape, "float32")
    n = _out(resolution, 2)
    cin = _make_divisible(32 * width_mult)
    x = _conv(g, x, 3, cin, 3, stride=2, prefix="MobilenetV2.Conv")
    current, rate, block = 2, 1, 0
    for t, c, reps, s in _MNV2:
        c = _make_divisible(c * width_mult)
        for i in range(reps):
            stride = s if i == 0 else 1
            if current == output_stride:
                # TF-slim's atrous MobileNet: past the output stride, a layer's stride becomes
                # the dilation rate of the layers after it.
                stride, layer_rate, rate = 1, rate, rate * stride
            else:
                layer_rate, current = 1, current * stride
            p = f"MobilenetV2.expanded_conv_{block}"
            hidden = _make_divisible(cin * t)
            y = x
            if t != 1:
                y = _conv(g, y, cin, hidden, 1, prefix=f"{p}.expand")
            y = _conv(g, y, hidden, hidden, 3, stride=stride, groups=hidden, dilation=layer_rate,
                      prefix=f"{p}.depthwise")
            residual = stride == 1 and cin == c
            y = _conv(g, y, hidden, c, 1, act=None, prefix=f"{p}.project", gamma_scale=0.5 if residual else 1.0)
            x = g.node("Add", [x, y]) if residual else y
            n = _out(n, stride)
            cin = c
            block += 1
    # The mobile ASPP: image pooling and a 1x1 branch (DeepLab's MobileNet configs use no
    # atrous 3x3 branches), concatenated, projected, then the logits.
    pooled = _conv(g, g.node("GlobalAveragePool", [x]), cin, aspp_channels, 1, act="relu",
                   prefix="image_pooling")
    pooled = g.node("Expand", [pooled, g.const("aspp_shape", [batch, aspp_channels, n, n], np.int64)])
    aspp0 = _conv(g, x, cin, aspp_channels, 1, act="relu", prefix="aspp0")
    y = _conv(g, g.node("Concat", [pooled, aspp0], axis=1), 2 * aspp_channels, aspp_channels, 1,
              act="relu", prefix="concat_projection")
    logits = _conv(g, y, aspp_channels, num_classes, 1, act=None, bn=False, prefix="logits.semantic")
    # TF1's ResizeBilinear(align_corners=True) back to the input size.
    sizes = g.const("output_size", [batch, num_classes, resolution, resolution], np.int64)
    up = g.node("Resize", [logits, "", "", sizes], mode="linear",
                coordinate_transformation_mode="align_corners")
    g.output(up, "logits", (batch, num_classes, resolution, resolution))


# -- PoseNet ---------------------------------------------------------------------------------

#: MobileNetV1's depthwise-separable layers: output channels and stride.
_MNV1 = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1),
         (512, 1), (512, 1), (1024, 2), (1024, 1))


def build_posenet(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                  resolution: int = 257, keypoints: int = 17, edges: int = 16) -> None:
    x = g.input("input", inputs[0].shape, "float32")
    x = _conv(g, x, 3, 32, 3, stride=2, prefix="MobilenetV1.Conv2d_0")
    n, cin = _out(resolution, 2), 32
    for i, (c, s) in enumerate(_MNV1, start=1):
        p = f"MobilenetV1.Conv2d_{i}"
        x = _conv(g, x, cin, cin, 3, stride=s, groups=cin, prefix=f"{p}_depthwise")
        x = _conv(g, x, cin, c, 1, prefix=f"{p}_pointwise")
        n, cin = _out(n, s), c
    heads = (("heatmaps", keypoints), ("offsets", 2 * keypoints), ("displacement_fwd", 2 * edges),
             ("displacement_bwd", 2 * edges))
    for name, channels in heads:
        y = _conv(g, x, cin, channels, 1, act=None, bn=False, prefix=f"{name}_2")
        g.output(y, name, (batch, channels, n, n))


# -- MobileBERT ------------------------------------------------------------------------------


def mobilebert_inputs(batch: int, seq: int, *, vocab_size: int = 30522, max_position: int = 512,
                      **_) -> list[InputSpec]:
    return bert_inputs(batch, seq, vocab_size=vocab_size, max_position=max_position)


def _no_norm(g: GraphBuilder, x: str, width: int, prefix: str, scale: float = 1.0) -> str:
    """MobileBERT's NoNorm: x * weight + bias, elementwise."""
    gamma = (scale * g.rng.uniform(0.9, 1.1, width)).astype(np.float32)
    y = g.node("Mul", [x, g.weight(f"{prefix}.weight", gamma)])
    return g.node("Add", [y, g.weight(f"{prefix}.bias", g.small(width))])


def build_mobilebert(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                     vocab_size: int = 30522, layers: int = 24, hidden: int = 512, embedding: int = 128,
                     bottleneck: int = 128, heads: int = 4, intermediate: int = 512, ffns: int = 4,
                     max_position: int = 512, type_vocab_size: int = 2) -> None:
    if bottleneck % heads:
        raise UserError(f"bottleneck size {bottleneck} is not a multiple of {heads} heads")
    head_dim = bottleneck // heads
    ids, mask, types = (g.input(s.name, s.shape, s.dtype) for s in inputs)
    residual_scale = 0.82  # NoNorm after a residual sum: below 1 so that 24 layers of sums stay near unit scale

    # Embeddings: 128-wide words, the trigram (right neighbour, self, left neighbour; zero
    # padded at the ends) widened to 512, plus positions and token types, then NoNorm.
    words = g.weight("embeddings.word_embeddings.weight", g.small((vocab_size, embedding)))
    e = g.node("Gather", [words, ids])  # [B, S, E]
    zero = g.const("zero_row", np.zeros((batch, 1, embedding)))
    starts, ends, axis = (g.const(k, [v], np.int64) for k, v in (("one", 1), ("big", seq), ("axis1", 1)))
    stop = g.const("last", [seq - 1], np.int64)
    right = g.node("Concat", [g.node("Slice", [e, starts, ends, axis]), zero], axis=1)
    left = g.node("Concat", [zero, g.node("Slice", [e, g.const("zero_idx", [0], np.int64), stop, axis])], axis=1)
    e = g.linear(g.node("Concat", [right, e, left], axis=2), 3 * embedding, hidden,
                 "embeddings.embedding_transformation")
    positions = g.weight("embeddings.position_embeddings.weight", g.small((max_position, hidden)))
    token_types = g.weight("embeddings.token_type_embeddings.weight", g.small((type_vocab_size, hidden)))
    position_ids = g.const("position_ids", np.arange(seq)[None, :], np.int64)
    e = g.node("Add", [e, g.node("Gather", [positions, position_ids])])
    e = g.node("Add", [e, g.node("Gather", [token_types, types])])
    # Trained embedding NoNorm weights bring the ~0.03-sized sum to unit scale.
    x = _no_norm(g, e, hidden, "embeddings.LayerNorm", scale=30.0)

    m = g.node("Cast", [g.unsqueeze(mask, [1, 2])], to=1)
    m = g.node("Mul", [g.node("Sub", [g.const("one", 1.0), m]), g.const("mask_value", MASK_VALUE)])
    split_shape = g.const("split_heads", [batch, seq, heads, head_dim], np.int64)
    merge_shape = g.const("merge_heads", [batch, seq, bottleneck], np.int64)
    scale = g.const("sqrt_head_dim", math.sqrt(head_dim))

    def heads_of(v: str, fin: int, prefix: str, perm: list[int]) -> str:
        y = g.linear(v, fin, bottleneck, prefix)
        return g.node("Transpose", [g.node("Reshape", [y, split_shape])], perm=perm)

    for layer in range(layers):
        p = f"encoder.layer.{layer}"
        layer_input = _no_norm(g, g.linear(x, hidden, bottleneck, f"{p}.bottleneck.input.dense"),
                               bottleneck, f"{p}.bottleneck.input.LayerNorm")
        shared = _no_norm(g, g.linear(x, hidden, bottleneck, f"{p}.bottleneck.attention.dense"),
                          bottleneck, f"{p}.bottleneck.attention.LayerNorm")
        q = heads_of(shared, bottleneck, f"{p}.attention.self.query", [0, 2, 1, 3])
        k = heads_of(shared, bottleneck, f"{p}.attention.self.key", [0, 2, 3, 1])
        v = heads_of(x, hidden, f"{p}.attention.self.value", [0, 2, 1, 3])
        probs = g.node("Softmax", [g.node("Add", [g.node("Div", [g.node("MatMul", [q, k]), scale]), m])],
                       axis=-1)
        ctx = g.node("Reshape", [g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3]),
                                 merge_shape])
        a = g.linear(ctx, bottleneck, bottleneck, f"{p}.attention.output.dense")
        a = _no_norm(g, g.node("Add", [a, layer_input]), bottleneck, f"{p}.attention.output.LayerNorm",
                     residual_scale)
        for f in range(ffns):
            last = f == ffns - 1
            fp = f"{p}.intermediate" if last else f"{p}.ffn.{f}.intermediate"
            h = g.node("Relu", [g.linear(a, bottleneck, intermediate, f"{fp}.dense")])
            op = f"{p}.output" if last else f"{p}.ffn.{f}.output"
            h = g.linear(h, intermediate, bottleneck, f"{op}.dense")
            a = _no_norm(g, g.node("Add", [h, a]), bottleneck, f"{op}.LayerNorm", residual_scale)
        out = g.linear(a, bottleneck, hidden, f"{p}.output.bottleneck.dense")
        x = _no_norm(g, g.node("Add", [out, x]), hidden, f"{p}.output.bottleneck.LayerNorm", residual_scale)

    g.output(x, "last_hidden_state", (batch, seq, hidden))
    # mobilebert-uncased has classifier_activation false: the pooled output is the first token.
    first = g.node("Gather", [x, g.const("first_token", 0, np.int64)], axis=1)
    g.output(first, "pooler_output", (batch, hidden))
