"""A small ONNX graph builder the zoo's architectures are written with.

It hides the bookkeeping (unique names, initializers, opset differences) so that a model reads
like its PyTorch definition. Every layer takes its weights from one seeded NumPy generator, in
the order the layers are built, so a model is a pure function of its options and its seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["BN_EPS", "GraphBuilder"]

#: PyTorch's BatchNorm2d default epsilon, which exported models carry.
BN_EPS = 1e-5

_ONNX_DTYPES = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "int32": TensorProto.INT32}


class GraphBuilder:
    """Accumulates nodes and initializers; ``finish()`` returns a checked ``ModelProto``."""

    def __init__(self, name: str, opset: int, seed: int):
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._counts: dict[str, int] = {}
        self._consts: dict[tuple, str] = {}

    # -- names, values -------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        n = self._counts.get(prefix, 0)
        self._counts[prefix] = n + 1
        return f"{prefix}_{n}" if n else prefix

    def input(self, name: str, shape: Sequence[int], dtype: str) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, _ONNX_DTYPES[dtype], list(shape)))
        return name

    def output(self, value: str, name: str, shape: Sequence[int], dtype: str = "float32") -> str:
        # Give graph outputs stable, readable names (``logits``, ``last_hidden_state``).
        self.node("Identity", [value], name=name)
        self.outputs.append(helper.make_tensor_value_info(name, _ONNX_DTYPES[dtype], list(shape)))
        return name

    def weight(self, name: str, array: np.ndarray) -> str:
        name = self.fresh(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def const(self, name: str, value, dtype=np.float32) -> str:
        """A structural constant (a shape, axes, a scalar): not a model parameter. Shared."""
        array = np.asarray(value, dtype=dtype)
        key = (name, array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.weight(f"const_{name}", array)
        return self._consts[key]

    def node(self, op: str, inputs: Sequence[str], name: str | None = None, **attrs) -> str:
        out = name or self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"{out}_{op}", **attrs))
        return out

    # -- initialisation ------------------------------------------------------------------------

    def he_normal(self, shape: Sequence[int], fan_in: int) -> np.ndarray:
        # Kaiming normal, as torchvision initialises convolutions (mode fan_out there; fan_in
        # keeps forward activations at unit scale here, which is what a benchmark model needs).
        return (self.rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)

    def xavier_normal(self, shape: Sequence[int], fan_in: int, fan_out: int) -> np.ndarray:
        return (self.rng.standard_normal(shape) * math.sqrt(2.0 / (fan_in + fan_out))).astype(np.float32)

    def small(self, shape: Sequence[int], scale: float = 0.02) -> np.ndarray:
        """Small non-zero values for biases and shifts: zeros would hide a dropped bias."""
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def bn_params(self, channels: int, gamma_scale: float = 1.0) -> tuple[np.ndarray, ...]:
        """(gamma, beta, mean, var) as a trained network might have them: near identity."""
        gamma = (gamma_scale * self.rng.uniform(0.8, 1.2, channels)).astype(np.float32)
        beta = self.small(channels, 0.05)
        mean = self.small(channels, 0.05)
        var = self.rng.uniform(0.8, 1.2, channels).astype(np.float32)
        return gamma, beta, mean, var

    # -- layers --------------------------------------------------------------------------------

    def conv_bn(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
                fold_bn: bool = True, gamma_scale: float = 1.0, prefix: str = "conv") -> str:
        """Conv2d(bias=False) + BatchNorm2d, folded into the conv's weight and bias (as exporters
        do in eval mode) or kept as a BatchNormalization node."""
        pad = (kernel - 1) // 2
        fan_in = cin // groups * kernel * kernel
        w = self.he_normal((cout, cin // groups, kernel, kernel), fan_in)
        gamma, beta, mean, var = self.bn_params(cout, gamma_scale)
        attrs = {"kernel_shape": [kernel, kernel], "strides": [stride, stride], "pads": [pad] * 4,
                 "group": groups}
        if fold_bn:
            scale = gamma / np.sqrt(var + BN_EPS)
            wf = (w * scale[:, None, None, None]).astype(np.float32)
            bf = (beta - mean * scale).astype(np.float32)
            return self.node("Conv", [x, self.weight(f"{prefix}.weight", wf),
                                      self.weight(f"{prefix}.bias", bf)], **attrs)
        y = self.node("Conv", [x, self.weight(f"{prefix}.weight", w)], **attrs)
        names = ("weight", "bias", "running_mean", "running_var")
        bn = [self.weight(f"{prefix}.bn.{k}", v) for k, v in zip(names, (gamma, beta, mean, var), strict=True)]
        return self.node("BatchNormalization", [y, *bn], epsilon=BN_EPS)

    def relu6(self, x: str) -> str:
        # torch.onnx exports ReLU6 as Clip(0, 6) with min/max as inputs (opset >= 11).
        return self.node("Clip", [x, self.const("zero", 0.0), self.const("six", 6.0)])

    def gemm(self, x: str, fin: int, fout: int, prefix: str = "fc") -> str:
        """nn.Linear as torch.onnx exports it for 2-D inputs: Gemm with a [out, in] weight."""
        w = self.xavier_normal((fout, fin), fin, fout)
        return self.node("Gemm", [x, self.weight(f"{prefix}.weight", w),
                                  self.weight(f"{prefix}.bias", self.small(fout))], transB=1)

    def linear(self, x: str, fin: int, fout: int, prefix: str = "dense") -> str:
        """nn.Linear on a 3-D input as exporters emit it: MatMul by a [in, out] weight, then Add."""
        w = self.xavier_normal((fin, fout), fin, fout)
        y = self.node("MatMul", [x, self.weight(f"{prefix}.weight", w)])
        return self.node("Add", [y, self.weight(f"{prefix}.bias", self.small(fout))])

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.node("Unsqueeze", [x, self.const("axes", list(axes), np.int64)])

    def reduce_mean(self, x: str, axes: Sequence[int]) -> str:
        # ReduceMean took its axes as an attribute until opset 18 and as an input since.
        if self.opset >= 18:
            return self.node("ReduceMean", [x, self.const("axes", list(axes), np.int64)], keepdims=1)
        return self.node("ReduceMean", [x], axes=list(axes), keepdims=1)

    def layer_norm(self, x: str, width: int, eps: float, decomposed: bool, prefix: str = "LayerNorm") -> str:
        gamma = (1.0 + self.small(width, 0.05)).astype(np.float32)
        g = self.weight(f"{prefix}.weight", gamma)
        b = self.weight(f"{prefix}.bias", self.small(width))
        if not decomposed:
            return self.node("LayerNormalization", [x, g, b], axis=-1, epsilon=eps)
        # The form torch.onnx emitted before opset 17 and many exported BERTs still carry.
        mean = self.reduce_mean(x, [-1])
        d = self.node("Sub", [x, mean])
        var = self.reduce_mean(self.node("Pow", [d, self.const("two", 2.0)]), [-1])
        std = self.node("Sqrt", [self.node("Add", [var, self.const("eps", eps)])])
        return self.node("Add", [self.node("Mul", [self.node("Div", [d, std]), g]), b])

    def gelu(self, x: str) -> str:
        """Exact GELU as exporters emit it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
        e = self.node("Erf", [self.node("Div", [x, self.const("sqrt2", math.sqrt(2.0))])])
        one_plus = self.node("Add", [e, self.const("one", 1.0)])
        return self.node("Mul", [self.node("Mul", [x, one_plus]), self.const("half", 0.5)])

    # -- result --------------------------------------------------------------------------------

    def finish(self, doc: str, metadata: dict[str, str]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        opset = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opset, producer_name="halbench.zoo",
                                  doc_string=doc)
        # The oldest IR version that can carry this opset, so that older runtimes load it too.
        model.ir_version = helper.find_min_ir_version_for(opset)
        helper.set_model_props(model, metadata)
        onnx.checker.check_model(model)
        return model
