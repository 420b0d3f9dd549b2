"""The classic ONNX model-zoo CNNs, as the zoo's Caffe2-converted files are laid out.

The ONNX model zoo's AlexNet, ZFNet-512, GoogLeNet, Inception-v2, ShuffleNet, SqueezeNet,
ResNet-50, DenseNet-121 and VGG-19 were converted from Caffe/Caffe2 in 2017-2019. Their files
cannot be downloaded here (the zoo keeps them in Git LFS), so this module builds replicas in
their format, with seeded weights:

* IR version 3 and an old opset (6 to 9; each model has the default its zoo file has);
* every weight an initializer AND a graph input, as IR 3 required;
* the old attribute forms of that opset: BatchNormalization with ``spatial`` / ``is_test``,
  Dropout with ``is_test`` (opset 6), Gemm with ``broadcast`` (opset 6), Reshape by a shape
  initializer, Softmax on axis 1 of a 2-D (or [N, C, 1, 1]) tensor;
* Caffe's layers: LRN (AlexNet, ZFNet, GoogLeNet), ceil-mode pools written as an extra end pad
  (opset < 10 has no ``ceil_mode``), convolutions with biases, grouped convolutions (AlexNet),
  channel shuffle as Reshape/Transpose/Reshape (ShuffleNet), BN-Inception's BatchNormalization
  nodes, SqueezeNet's fire modules, DenseNet's concatenations;
* Caffe2's names: input ``data_0``, weights ``conv1_w_0``, the softmax output ``prob_1``.

Layer shapes follow the papers and the Caffe model definitions (bvlc_alexnet, bvlc_googlenet,
SqueezeNet 1.0/1.1, ResNet-50 v1 with the stride on the first 1x1, DenseNet-121 with a 1x1
convolution as classifier, ShuffleNet v1 with 3 groups, Zeiler & Fergus's widened 512/1024/512
variant). Weights are drawn as cnn.py draws them (He for convolutions, small non-zero biases,
near-identity BatchNorm, a smaller last BN scale on residual branches).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper

from halbench.bench.zoo.graph import GraphBuilder
from halbench.bench.zoo.spec import InputSpec
from halbench.errors import UserError

__all__ = [
    "CLASSIC_OPSETS",
    "IR_VERSION",
    "LegacyGraphBuilder",
    "build_alexnet",
    "build_densenet121",
    "build_googlenet",
    "build_inception_v2",
    "build_resnet50_v1",
    "build_shufflenet",
    "build_squeezenet",
    "build_vgg19",
    "build_zfnet512",
    "classic_inputs",
]

#: The IR version of the zoo's old files (ONNX 1.0-1.1): initializers must also be inputs.
IR_VERSION = 3
#: The opsets this family emits (the attribute forms of each are written below).
CLASSIC_OPSETS = (6, 9)
#: Caffe2's SpatialBN epsilon, which its converted files carry.
BN_EPS = 1e-5


def classic_inputs(batch: int, seq: int, *, resolution: int = 224, **_) -> list[InputSpec]:
    return [InputSpec("data_0", (batch, 3, resolution, resolution), "float32", "normal")]


def _pool_out(n: int, k: int, s: int, pad: int = 0, ceil: bool = False) -> tuple[int, int]:
    """Output size and extra end pad of a Caffe pool (Caffe rounds up, ONNX < 10 down)."""
    span = n + 2 * pad - k
    out = -(-span // s) + 1 if ceil else span // s + 1
    extra = max(0, (out - 1) * s + k - (n + 2 * pad))
    return out, extra


class LegacyGraphBuilder(GraphBuilder):
    """A GraphBuilder that writes IR 3 files: weights listed among the inputs, old attributes."""

    def __init__(self, name: str, opset: int, seed: int, batch: int):
        if not CLASSIC_OPSETS[0] <= opset <= CLASSIC_OPSETS[1]:
            raise UserError(f"opset {opset} is outside what the classic zoo family emits "
                            f"({CLASSIC_OPSETS[0]} to {CLASSIC_OPSETS[1]})")
        super().__init__(name, opset, seed)
        self.batch = batch

    # -- weights, Caffe2-named -------------------------------------------------------------

    def conv(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, pad: int | None = None,
             group: int = 1, bias: bool = True, prefix: str = "conv", dilation: int = 1) -> str:
        pad = (kernel - 1) // 2 * dilation if pad is None else pad
        w = self.he_normal((cout, cin // group, kernel, kernel), cin // group * kernel * kernel)
        ins = [x, self.weight(f"{prefix}_w_0", w)]
        if bias:
            ins.append(self.weight(f"{prefix}_b_0", self.small(cout)))
        attrs: dict = {"kernel_shape": [kernel, kernel], "strides": [stride, stride], "pads": [pad] * 4}
        if group != 1:
            attrs["group"] = group
        if dilation != 1:
            attrs["dilations"] = [dilation, dilation]
        return self.node("Conv", ins, name=self.fresh(f"{prefix}_1"), **attrs)

    def bn(self, x: str, channels: int, prefix: str, gamma_scale: float = 1.0) -> str:
        gamma, beta, mean, var = self.bn_params(channels, gamma_scale)
        ins = [x] + [self.weight(f"{prefix}_{k}_0", v) for k, v in
                     zip(("s", "b", "rm", "riv"), (gamma, beta, mean, var), strict=True)]
        # The attribute set of each opset's BatchNormalization, as converters wrote it.
        attrs: dict = {"epsilon": BN_EPS, "momentum": 0.9}
        if self.opset <= 8:
            attrs["spatial"] = 1
        if self.opset <= 6:
            attrs["is_test"] = 1
        return self.node("BatchNormalization", ins, name=self.fresh(f"{prefix}_1"), **attrs)

    def conv_bn_relu(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1,
                     pad: int | None = None, prefix: str = "conv", relu: bool = True,
                     gamma_scale: float = 1.0, group: int = 1) -> str:
        y = self.bn(self.conv(x, cin, cout, kernel, stride, pad, group=group, bias=False, prefix=prefix),
                    cout, f"{prefix}_bn", gamma_scale)
        return self.node("Relu", [y]) if relu else y

    def relu_conv(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1,
                  pad: int | None = None, group: int = 1, prefix: str = "conv") -> str:
        return self.node("Relu", [self.conv(x, cin, cout, kernel, stride, pad, group, prefix=prefix)])

    # -- Caffe layers ------------------------------------------------------------------------

    def max_pool(self, x: str, size: int, k: int, s: int, pad: int = 0, ceil: bool = True) -> tuple[str, int]:
        out, extra = _pool_out(size, k, s, pad, ceil)
        y = self.node("MaxPool", [x], kernel_shape=[k, k], strides=[s, s],
                      pads=[pad, pad, pad + extra, pad + extra])
        return y, out

    def avg_pool(self, x: str, size: int, k: int, s: int, pad: int = 0) -> tuple[str, int]:
        out, extra = _pool_out(size, k, s, pad, False)
        # Padding is excluded from the average in every opset (count_include_pad's default).
        return self.node("AveragePool", [x], kernel_shape=[k, k], strides=[s, s],
                         pads=[pad, pad, pad + extra, pad + extra]), out

    def lrn(self, x: str) -> str:
        # Caffe's LRN across channels: local_size 5, alpha 1e-4, beta 0.75, k 1.
        return self.node("LRN", [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)

    def dropout(self, x: str, ratio: float) -> str:
        if self.opset <= 6:
            return self.node("Dropout", [x], ratio=ratio, is_test=1)
        return self.node("Dropout", [x], ratio=ratio)

    def flatten(self, x: str) -> str:
        """Caffe2's FC flattens its input: a Reshape by a shape initializer (opset 5 and later)."""
        return self.node("Reshape", [x, self.const("OC2_DUMMY_shape", [self.batch, -1], np.int64)])

    def fc(self, x: str, fin: int, fout: int, prefix: str, last: bool = True) -> str:
        # He for a hidden FC (a ReLU follows), Xavier for the classifier: logits of a few units.
        w = self.xavier_normal((fout, fin), fin, fout) if last else self.he_normal((fout, fin), fin)
        ins = [x, self.weight(f"{prefix}_w_0", w), self.weight(f"{prefix}_b_0", self.small(fout))]
        attrs: dict = {"transB": 1}
        if self.opset <= 6:
            attrs["broadcast"] = 1
        return self.node("Gemm", ins, name=self.fresh(f"{prefix}_1"), **attrs)

    def concat(self, xs: Sequence[str]) -> str:
        return self.node("Concat", list(xs), axis=1)

    def channel_shuffle(self, x: str, channels: int, groups: int, size: int) -> str:
        """ShuffleNet's channel shuffle: [N, g, C/g, H, W], swap the group axes, back to 4-D."""
        split = self.const("shuffle_split", [self.batch, groups, channels // groups, size, size], np.int64)
        merge = self.const("shuffle_merge", [self.batch, channels, size, size], np.int64)
        y = self.node("Transpose", [self.node("Reshape", [x, split])], perm=[0, 2, 1, 3, 4])
        return self.node("Reshape", [y, merge])

    def softmax_output(self, x: str, shape: Sequence[int], name: str = "prob_1") -> None:
        self.node("Softmax", [x], name=name, axis=1)
        self.outputs.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape)))

    def plain_output(self, x: str, shape: Sequence[int], name: str) -> None:
        if x != name:
            self.node("Identity", [x], name=name)
        self.outputs.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape)))

    # -- result ------------------------------------------------------------------------------

    def finish(self, doc: str, metadata: dict[str, str]) -> onnx.ModelProto:
        # IR 3: every initializer is also a graph input, with its type and shape.
        weights = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.initializers]
        graph = helper.make_graph(self.nodes, self.name, self.inputs + weights, self.outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="halbench.zoo.classic", doc_string=doc)
        model.ir_version = IR_VERSION
        helper.set_model_props(model, metadata)
        onnx.checker.check_model(model)
        return model


def _g(g: GraphBuilder) -> LegacyGraphBuilder:
    if not isinstance(g, LegacyGraphBuilder):
        raise TypeError("the classic zoo family builds with a LegacyGraphBuilder")
    return g


def _start(g: GraphBuilder, inputs: list[InputSpec]) -> tuple[LegacyGraphBuilder, str, int]:
    lg = _g(g)
    spec = inputs[0]
    return lg, lg.input(spec.name, spec.shape, "float32"), spec.shape[-1]


def _conv_out(n: int, k: int, s: int, pad: int) -> int:
    return (n + 2 * pad - k) // s + 1


def _classifier_fc(g: LegacyGraphBuilder, x: str, fin: int, num_classes: int, batch: int,
                   hidden: int | None = 4096, dropout: float = 0.5) -> None:
    """AlexNet / ZFNet / VGG's classifier: fc6, fc7 (ReLU, Dropout), fc8, Softmax."""
    x = g.flatten(x)
    if hidden:
        x = g.dropout(g.node("Relu", [g.fc(x, fin, hidden, "fc6", last=False)]), dropout)
        x = g.dropout(g.node("Relu", [g.fc(x, hidden, hidden, "fc7", last=False)]), dropout)
        fin = hidden
    g.softmax_output(g.fc(x, fin, num_classes, "fc8"), (batch, num_classes))


# -- AlexNet, ZFNet-512, VGG-19 --------------------------------------------------------------


def build_alexnet(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                  num_classes: int = 1000, resolution: int = 224) -> None:
    """bvlc_alexnet: Caffe's AlexNet with LRN and two-group convolutions 2, 4 and 5."""
    g, x, n = _start(g, inputs)
    x = g.lrn(g.relu_conv(x, 3, 96, 11, stride=4, pad=0, prefix="conv1"))
    n = _conv_out(n, 11, 4, 0)
    x, n = g.max_pool(x, n, 3, 2)
    x = g.lrn(g.relu_conv(x, 96, 256, 5, pad=2, group=2, prefix="conv2"))
    x, n = g.max_pool(x, n, 3, 2)
    x = g.relu_conv(x, 256, 384, 3, prefix="conv3")
    x = g.relu_conv(x, 384, 384, 3, group=2, prefix="conv4")
    x = g.relu_conv(x, 384, 256, 3, group=2, prefix="conv5")
    x, n = g.max_pool(x, n, 3, 2)
    _classifier_fc(g, x, 256 * n * n, num_classes, batch)


def build_zfnet512(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                   num_classes: int = 1000, resolution: int = 224) -> None:
    """ZFNet-512: Zeiler & Fergus's net (7x7/2 first layer, LRN) with layers 3-5 widened to
    512, 1024 and 512 channels, the variant of their paper the Caffe2 zoo ships."""
    g, x, n = _start(g, inputs)
    x = g.lrn(g.relu_conv(x, 3, 96, 7, stride=2, pad=1, prefix="conv1"))
    n = _conv_out(n, 7, 2, 1)
    x, n = g.max_pool(x, n, 3, 2, pad=1, ceil=False)
    x = g.lrn(g.relu_conv(x, 96, 256, 5, stride=2, pad=0, prefix="conv2"))
    n = _conv_out(n, 5, 2, 0)
    x, n = g.max_pool(x, n, 3, 2)
    x = g.relu_conv(x, 256, 512, 3, prefix="conv3")
    x = g.relu_conv(x, 512, 1024, 3, prefix="conv4")
    x = g.relu_conv(x, 1024, 512, 3, prefix="conv5")
    x, n = g.max_pool(x, n, 3, 2)
    _classifier_fc(g, x, 512 * n * n, num_classes, batch)


_VGG19 = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
          512, 512, 512, 512, "M")


def build_vgg19(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                num_classes: int = 1000, resolution: int = 224) -> None:
    """VGG-19 (configuration E): sixteen 3x3 convolutions, five 2x2 max pools, three FCs."""
    g, x, n = _start(g, inputs)
    cin, block, i = 3, 1, 1
    for v in _VGG19:
        if v == "M":
            x, n = g.max_pool(x, n, 2, 2, ceil=False)
            block, i = block + 1, 1
            continue
        x = g.relu_conv(x, cin, int(v), 3, prefix=f"conv{block}_{i}")
        cin, i = int(v), i + 1
    _classifier_fc(g, x, 512 * n * n, num_classes, batch)


# -- GoogLeNet, Inception-v2 -----------------------------------------------------------------

#: GoogLeNet's inception modules: 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection.
_GOOGLENET = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}


def build_googlenet(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                    num_classes: int = 1000, resolution: int = 224) -> None:
    """bvlc_googlenet (Inception v1) without the training-only auxiliary heads: LRN after the
    stem, nine inception modules, 7x7 average pool, Dropout 0.4, FC, Softmax."""
    g, x, n = _start(g, inputs)
    x = g.relu_conv(x, 3, 64, 7, stride=2, prefix="conv1/7x7_s2")
    n = _conv_out(n, 7, 2, 3)
    x, n = g.max_pool(x, n, 3, 2)
    x = g.lrn(x)
    x = g.relu_conv(x, 64, 64, 1, prefix="conv2/3x3_reduce")
    x = g.lrn(g.relu_conv(x, 64, 192, 3, prefix="conv2/3x3"))
    x, n = g.max_pool(x, n, 3, 2)
    cin = 192
    for name, (c1, r3, c3, r5, c5, pp) in _GOOGLENET.items():
        if name in ("4a", "5a"):
            x, n = g.max_pool(x, n, 3, 2)
        p = f"inception_{name}"
        b1 = g.relu_conv(x, cin, c1, 1, prefix=f"{p}/1x1")
        b3 = g.relu_conv(g.relu_conv(x, cin, r3, 1, prefix=f"{p}/3x3_reduce"), r3, c3, 3, prefix=f"{p}/3x3")
        b5 = g.relu_conv(g.relu_conv(x, cin, r5, 1, prefix=f"{p}/5x5_reduce"), r5, c5, 5, prefix=f"{p}/5x5")
        pool = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
        bp = g.relu_conv(pool, cin, pp, 1, prefix=f"{p}/pool_proj")
        x = g.concat([b1, b3, b5, bp])
        cin = c1 + c3 + c5 + pp
    x, n = g.avg_pool(x, n, n, 1)
    x = g.dropout(x, 0.4)
    g.softmax_output(g.fc(g.flatten(x), cin * n * n, num_classes, "loss3/classifier"), (batch, num_classes))


#: BN-Inception's modules: 1x1, 3x3 reduce, 3x3, double-3x3 reduce, double 3x3, pool kind,
#: pool projection (0: none, a stride-2 module passes the pooled input through).
_INCEPTION_V2 = (
    ("3a", 64, 64, 64, 64, 96, "avg", 32), ("3b", 64, 64, 96, 64, 96, "avg", 64),
    ("3c", 0, 128, 160, 64, 96, "max", 0),
    ("4a", 224, 64, 96, 96, 128, "avg", 128), ("4b", 192, 96, 128, 96, 128, "avg", 128),
    ("4c", 160, 128, 160, 128, 160, "avg", 128), ("4d", 96, 128, 192, 160, 192, "avg", 128),
    ("4e", 0, 128, 192, 192, 256, "max", 0),
    ("5a", 352, 192, 320, 160, 224, "avg", 128), ("5b", 352, 192, 320, 192, 224, "max", 128),
)


def build_inception_v2(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                       num_classes: int = 1000, resolution: int = 224) -> None:
    """Inception-v2 (BN-Inception, Ioffe & Szegedy 2015): BatchNormalization after every
    convolution, the 5x5 branches as two 3x3s, stride-2 modules 3c and 4e."""
    g, x, n = _start(g, inputs)
    x = g.conv_bn_relu(x, 3, 64, 7, stride=2, prefix="conv1")
    n = _conv_out(n, 7, 2, 3)
    x, n = g.max_pool(x, n, 3, 2)
    x = g.conv_bn_relu(x, 64, 64, 1, prefix="conv2_red")
    x = g.conv_bn_relu(x, 64, 192, 3, prefix="conv2")
    x, n = g.max_pool(x, n, 3, 2)
    cin = 192
    for name, c1, r3, c3, rd, cd, pool_kind, pp in _INCEPTION_V2:
        p = f"inception_{name}"
        s = 1 if c1 else 2
        branches = []
        if c1:
            branches.append(g.conv_bn_relu(x, cin, c1, 1, prefix=f"{p}_1x1"))
        branches.append(g.conv_bn_relu(g.conv_bn_relu(x, cin, r3, 1, prefix=f"{p}_3x3_reduce"),
                                       r3, c3, 3, stride=s, prefix=f"{p}_3x3"))
        d = g.conv_bn_relu(x, cin, rd, 1, prefix=f"{p}_double_3x3_reduce")
        d = g.conv_bn_relu(d, rd, cd, 3, prefix=f"{p}_double_3x3_1")
        branches.append(g.conv_bn_relu(d, cd, cd, 3, stride=s, prefix=f"{p}_double_3x3_2"))
        if s == 2:
            pooled, n = g.max_pool(x, n, 3, 2)
            branches.append(pooled)
            cin = c3 + cd + cin
        else:
            if pool_kind == "avg":
                pooled = g.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
            else:
                pooled = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
            branches.append(g.conv_bn_relu(pooled, cin, pp, 1, prefix=f"{p}_pool_proj"))
            cin = c1 + c3 + cd + pp
        x = g.concat(branches)
    x, n = g.avg_pool(x, n, n, 1)
    g.softmax_output(g.fc(g.flatten(x), cin * n * n, num_classes, "fc"), (batch, num_classes))


# -- ShuffleNet, SqueezeNet ------------------------------------------------------------------

#: ShuffleNet v1 (1x, 3 groups): stage output channels and repeats.
_SHUFFLENET_G3 = ((240, 4), (480, 8), (960, 4))


def build_shufflenet(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                     num_classes: int = 1000, resolution: int = 224, groups: int = 3) -> None:
    """ShuffleNet v1 (Zhang et al. 2017), 1x with 3 groups: grouped 1x1 convolutions, a
    channel shuffle, depthwise 3x3; stride-2 units concatenate a 3x3 average-pooled shortcut."""
    if groups != 3:
        raise UserError(f"ShuffleNet is built with 3 groups (the zoo's model), not {groups}")
    g, x, n = _start(g, inputs)
    x = g.conv_bn_relu(x, 3, 24, 3, stride=2, prefix="conv1")
    n = _conv_out(n, 3, 2, 1)
    x, n = g.max_pool(x, n, 3, 2, pad=1, ceil=False)
    cin = 24
    for stage, (cout, repeats) in enumerate(_SHUFFLENET_G3, start=2):
        for i in range(repeats):
            p = f"stage{stage}_{i}"
            stride = 2 if i == 0 else 1
            mid = cout // 4
            branch_out = cout - cin if stride == 2 else cout
            first_groups = 1 if cin == 24 else groups  # stage 2's first 1x1 sees only 24 channels
            y = g.conv_bn_relu(x, cin, mid, 1, group=first_groups, prefix=f"{p}_gconv1")
            y = g.channel_shuffle(y, mid, groups, n)
            n_out = _conv_out(n, 3, stride, 1)
            y = g.conv_bn_relu(y, mid, mid, 3, stride=stride, group=mid, relu=False, prefix=f"{p}_dw")
            y = g.conv_bn_relu(y, mid, branch_out, 1, group=groups, relu=False, prefix=f"{p}_gconv2",
                               gamma_scale=1.0 if stride == 2 else 0.2)
            if stride == 2:
                shortcut, _ = g.avg_pool(x, n, 3, 2, pad=1)
                x = g.node("Relu", [g.concat([shortcut, y])])
            else:
                x = g.node("Relu", [g.node("Add", [x, y])])
            cin, n = cout, n_out
    x = g.node("GlobalAveragePool", [x])
    g.softmax_output(g.fc(g.flatten(x), cin, num_classes, "fc"), (batch, num_classes))


#: Fire modules (squeeze, expand 1x1, expand 3x3) and where the max pools sit, per version.
_SQUEEZENET = {
    "1.0": (96, 7, ((16, 64), (16, 64), (32, 128), "M", (32, 128), (48, 192), (48, 192), (64, 256), "M",
                    (64, 256))),
    "1.1": (64, 3, ((16, 64), (16, 64), "M", (32, 128), (32, 128), "M", (48, 192), (48, 192), (64, 256),
                    (64, 256))),
}


def build_squeezenet(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                     num_classes: int = 1000, resolution: int = 224, version: str = "1.0") -> None:
    """SqueezeNet 1.0 or 1.1 (Iandola et al. 2016): fire modules (1x1 squeeze, concatenated
    1x1 and 3x3 expands), Dropout, a 1x1 convolution classifier, global average pool, Softmax
    over [N, 1000, 1, 1]."""
    if version not in _SQUEEZENET:
        raise UserError(f"SqueezeNet version must be one of {', '.join(_SQUEEZENET)}, not {version!r}")
    stem, k, fires = _SQUEEZENET[version]
    g, x, n = _start(g, inputs)
    x = g.relu_conv(x, 3, stem, k, stride=2, pad=0, prefix="conv1")
    n = _conv_out(n, k, 2, 0)
    x, n = g.max_pool(x, n, 3, 2)
    cin, fire = stem, 2
    for f in fires:
        if f == "M":
            x, n = g.max_pool(x, n, 3, 2)
            continue
        s, e = f
        p = f"fire{fire}"
        sq = g.relu_conv(x, cin, s, 1, prefix=f"{p}/squeeze1x1")
        x = g.concat([g.relu_conv(sq, s, e, 1, prefix=f"{p}/expand1x1"),
                      g.relu_conv(sq, s, e, 3, prefix=f"{p}/expand3x3")])
        cin, fire = 2 * e, fire + 1
    x = g.dropout(x, 0.5)
    x = g.node("GlobalAveragePool", [g.relu_conv(x, cin, num_classes, 1, prefix="conv10")])
    g.softmax_output(x, (batch, num_classes, 1, 1), "softmaxout_1")


# -- ResNet-50 v1, DenseNet-121 --------------------------------------------------------------


def build_resnet50_v1(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                      num_classes: int = 1000, resolution: int = 224) -> None:
    """Caffe2's ResNet-50 (He et al. 2015, v1: the stride on the first 1x1 of a bottleneck),
    BatchNormalization nodes kept, 7x7 average pool, FC, Softmax."""
    g, x, n = _start(g, inputs)
    x = g.conv_bn_relu(x, 3, 64, 7, stride=2, prefix="conv1")
    n = _conv_out(n, 7, 2, 3)
    x, n = g.max_pool(x, n, 3, 2)
    inplanes = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3), strict=True)):
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            p = f"res{stage + 2}_{i}"
            y = g.conv_bn_relu(x, inplanes, planes, 1, stride=stride, prefix=f"{p}_branch2a")
            y = g.conv_bn_relu(y, planes, planes, 3, prefix=f"{p}_branch2b")
            y = g.conv_bn_relu(y, planes, planes * 4, 1, relu=False, prefix=f"{p}_branch2c", gamma_scale=0.3)
            short = x
            if i == 0:
                short = g.conv_bn_relu(x, inplanes, planes * 4, 1, stride=stride, relu=False,
                                       prefix=f"{p}_branch1")
            x = g.node("Relu", [g.node("Add", [y, short])])
            inplanes = planes * 4
            n = _conv_out(n, 1, stride, 0)
    x, n = g.avg_pool(x, n, n, 1)
    g.softmax_output(g.fc(g.flatten(x), inplanes * n * n, num_classes, "pred"), (batch, num_classes))


def build_densenet121(g: GraphBuilder, inputs: list[InputSpec], batch: int, seq: int, *,
                      num_classes: int = 1000, resolution: int = 224) -> None:
    """DenseNet-121 (Huang et al. 2017): blocks of 6, 12, 24, 16 layers (BN-ReLU-1x1-BN-ReLU-3x3,
    growth 32, each concatenated to its input), transitions halving channels and size, final
    BN-ReLU, global average pool, and the Caffe2 zoo's classifier: a 1x1 convolution."""
    g, x, n = _start(g, inputs)
    x = g.conv_bn_relu(x, 3, 64, 7, stride=2, prefix="conv1")
    n = _conv_out(n, 7, 2, 3)
    x, n = g.max_pool(x, n, 3, 2, pad=1, ceil=False)
    c = 64
    for b, layers in enumerate((6, 12, 24, 16), start=2):
        for i in range(layers):
            p = f"conv{b}_{i + 1}"
            y = g.node("Relu", [g.bn(x, c, f"{p}_x1_bn")])
            y = g.conv(y, c, 128, 1, bias=False, prefix=f"{p}_x1")
            y = g.node("Relu", [g.bn(y, 128, f"{p}_x2_bn")])
            y = g.conv(y, 128, 32, 3, bias=False, prefix=f"{p}_x2")
            x = g.concat([x, y])
            c += 32
        if b < 5:
            p = f"conv{b}_blk"
            y = g.node("Relu", [g.bn(x, c, f"{p}_bn")])
            x = g.conv(y, c, c // 2, 1, bias=False, prefix=p)
            x, n = g.avg_pool(x, n, 2, 2)
            c //= 2
    x = g.node("Relu", [g.bn(x, c, "conv5_blk_bn")])
    x = g.node("GlobalAveragePool", [x])
    x = g.conv(x, c, num_classes, 1, prefix="fc6")
    g.plain_output(x, (batch, num_classes, 1, 1), "fc6_1")
