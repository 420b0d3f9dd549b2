"""Tiny one-op ONNX graphs (onnx.helper) used by the op tests: name -> (model, feeds).

Every input is random and never zero; shapes vary per case so that broadcasting, strides and
odd sizes are exercised.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Case = tuple[onnx.ModelProto, dict[str, np.ndarray]]

_F = TensorProto.FLOAT


def _rand(rng: np.random.Generator, shape: tuple[int, ...], lo: float = 0.1) -> np.ndarray:
    """Random float32 away from zero (a zero hides a missing bias or a wrong mask)."""
    x = rng.uniform(lo, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return x.astype(np.float32)


def model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
          weights: dict[str, np.ndarray] | None = None, opset: int = 17) -> Case:
    """A single-graph model; output shapes are left to shape inference."""
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
          for n, a in inputs.items()]
    outs = [helper.make_tensor_value_info(n, _F, None) for n in outputs]
    inits = [numpy_helper.from_array(a, n) for n, a in (weights or {}).items()]
    g = helper.make_graph(nodes, "g", vi, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what every onnxruntime since 1.14 reads
    m = onnx.shape_inference.infer_shapes(m)
    # Real element types on the outputs (onnxruntime wants them).
    known = {v.name: v for v in list(m.graph.value_info)}
    for o in m.graph.output:
        if o.name in known:
            o.type.CopyFrom(known[o.name].type)
    return m, dict(inputs)


def unary(op: str, shape: tuple[int, ...], lo: float = 0.1, **attrs: Any) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        x = _rand(rng, shape, lo)
        if op in ("Sqrt", "Log"):
            x = np.abs(x)
        return model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"])
    return build


def binary(op: str, a: tuple[int, ...], b: tuple[int, ...]) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        x, y = _rand(rng, a), _rand(rng, b)
        if op == "Pow":
            x = np.abs(x) + 0.5
        return model([helper.make_node(op, ["x", "w"], ["y"])], {"x": x, "w": y}, ["y"])
    return build


def conv(n: int, c: int, h: int, w: int, oc: int, k: int, stride: int = 1, pad: int = 0,
         dil: int = 1, group: int = 1, bias: bool = True) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        x = _rand(rng, (n, c, h, w))
        wts = {"W": _rand(rng, (oc, c // group, k, k))}
        ins = ["x", "W"]
        if bias:
            wts["B"] = _rand(rng, (oc,))
            ins.append("B")
        node = helper.make_node("Conv", ins, ["y"], strides=[stride, stride], pads=[pad] * 4,
                                dilations=[dil, dil], group=group, kernel_shape=[k, k])
        return model([node], {"x": x}, ["y"], wts)
    return build


def conv_relu6(rng: np.random.Generator) -> Case:
    x = _rand(rng, (1, 8, 10, 10))
    wts = {"W": _rand(rng, (8, 1, 3, 3)), "B": _rand(rng, (8,)),
           "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1] * 4, group=8),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    return model(nodes, {"x": x}, ["y"], wts)


def pool(op: str, shape: tuple[int, ...], **attrs: Any) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        return model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": _rand(rng, shape)}, ["y"])
    return build


def matmul(a: tuple[int, ...], b: tuple[int, ...], weight: bool = True) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        x, w = _rand(rng, a), _rand(rng, b)
        if weight:
            return model([helper.make_node("MatMul", ["x", "W"], ["y"])], {"x": x}, ["y"], {"W": w})
        return model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x, "w": w}, ["y"])
    return build


def gemm(m: int, k: int, n: int, trans_b: int) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        w = _rand(rng, (n, k) if trans_b else (k, n))
        node = helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=trans_b, alpha=1.0, beta=1.0)
        return model([node], {"x": _rand(rng, (m, k))}, ["y"], {"W": w, "B": _rand(rng, (n,))})
    return build


def softmax(shape: tuple[int, ...], axis: int) -> Callable[[np.random.Generator], Case]:
    return unary("Softmax", shape, axis=axis)


def layernorm(shape: tuple[int, ...]) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        d = shape[-1]
        node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)
        return model([node], {"x": _rand(rng, shape)}, ["y"], {"g": _rand(rng, (d,)), "b": _rand(rng, (d,))})
    return build


def reduce(op: str, shape: tuple[int, ...], axes: list[int], keepdims: int) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        ax = {"axes": np.array(axes, np.int64)}
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
        return model([node], {"x": _rand(rng, shape)}, ["y"], ax, opset=18)
    return build


def transpose(shape: tuple[int, ...], perm: list[int]) -> Callable[[np.random.Generator], Case]:
    return unary("Transpose", shape, perm=perm)


def reshape(shape: tuple[int, ...], to: list[int]) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
        return model(nodes, {"x": _rand(rng, shape)}, ["y"], {"s": np.array(to, np.int64)})
    return build


def concat(shapes: list[tuple[int, ...]], axis: int) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        ins = {f"x{i}": _rand(rng, s) for i, s in enumerate(shapes)}
        return model([helper.make_node("Concat", list(ins), ["y"], axis=axis)], ins, ["y"])
    return build


def gather(vocab: int, dim: int, idx_shape: tuple[int, ...]) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        idx = rng.integers(0, vocab, size=idx_shape).astype(np.int64)
        node = helper.make_node("Gather", ["E", "ids"], ["y"], axis=0)
        return model([node], {"ids": idx}, ["y"], {"E": _rand(rng, (vocab, dim))})
    return build


def pad(shape: tuple[int, ...], pads: list[int], mode: str = "constant") -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        node = helper.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)
        return model([node], {"x": _rand(rng, shape)}, ["y"],
                     {"p": np.array(pads, np.int64), "v": np.array(0.5, np.float32)})
    return build


def cast_where_equal(shape: tuple[int, ...]) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        a = rng.integers(0, 3, size=shape).astype(np.float32)
        nodes = [helper.make_node("Cast", ["a"], ["ai"], to=TensorProto.INT32),
                 helper.make_node("Cast", ["ai"], ["af"], to=TensorProto.FLOAT),
                 helper.make_node("Equal", ["af", "one"], ["m"]),
                 helper.make_node("Where", ["m", "x", "af"], ["y"])]
        return model(nodes, {"a": a, "x": _rand(rng, shape)}, ["y"], {"one": np.array(1.0, np.float32)})
    return build


def flatten(shape: tuple[int, ...], axis: int) -> Callable[[np.random.Generator], Case]:
    def build(rng: np.random.Generator) -> Case:
        nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=axis), helper.make_node("Neg", ["f"], ["y"])]
        return model(nodes, {"x": _rand(rng, shape)}, ["y"])
    return build


def attention(b: int, s: int, d: int, heads: int) -> Callable[[np.random.Generator], Case]:
    """One BERT self-attention block: QKV projections, scaled softmax, output, GELU(erf)."""
    def build(rng: np.random.Generator) -> Case:
        hd = d // heads
        w = {n: _rand(rng, (d, d)) * 0.3 for n in ("Wq", "Wk", "Wv")}
        w.update({"shape": np.array([b, s, heads, hd], np.int64), "back": np.array([b, s, d], np.int64),
                  "scale": np.array(1.0 / np.sqrt(hd), np.float32), "half": np.array(0.5, np.float32),
                  "one": np.array(1.0, np.float32), "rs2": np.array(1 / np.sqrt(2), np.float32)})
        nodes = []
        for n in ("q", "k", "v"):
            nodes += [helper.make_node("MatMul", ["x", f"W{n}"], [f"{n}0"]),
                      helper.make_node("Reshape", [f"{n}0", "shape"], [f"{n}1"]),
                      helper.make_node("Transpose", [f"{n}1"], [f"{n}2"],
                                       perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
        nodes += [helper.make_node("MatMul", ["q2", "k2"], ["s0"]),
                  helper.make_node("Mul", ["s0", "scale"], ["s1"]),
                  helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
                  helper.make_node("MatMul", ["p", "v2"], ["o0"]),
                  helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["o1", "back"], ["o2"]),
                  helper.make_node("Mul", ["o2", "rs2"], ["g0"]),
                  helper.make_node("Erf", ["g0"], ["g1"]),
                  helper.make_node("Add", ["g1", "one"], ["g2"]),
                  helper.make_node("Mul", ["o2", "g2"], ["g3"]),
                  helper.make_node("Mul", ["g3", "half"], ["y"])]
        return model(nodes, {"x": _rand(rng, (b, s, d))}, ["y"], w)
    return build


CASES: dict[str, Callable[[np.random.Generator], Case]] = {
    "conv_3x3_pad": conv(1, 3, 16, 16, 8, 3, pad=1),
    "conv_stride2": conv(2, 4, 15, 13, 6, 3, stride=2, pad=1),
    "conv_dilation": conv(1, 4, 14, 14, 5, 3, pad=2, dil=2),
    "conv_1x1_nobias": conv(1, 16, 7, 7, 24, 1, bias=False),
    "conv_groups": conv(1, 8, 9, 9, 12, 3, pad=1, group=4),
    "conv_depthwise": conv(1, 16, 12, 12, 16, 3, stride=2, pad=1, group=16),
    "conv_relu6": conv_relu6,
    "maxpool": pool("MaxPool", (1, 4, 12, 12), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "maxpool_nopad": pool("MaxPool", (2, 3, 9, 8), kernel_shape=[2, 2], strides=[2, 2]),
    "avgpool": pool("AveragePool", (1, 4, 10, 10), kernel_shape=[3, 3], strides=[1, 1]),
    "avgpool_pad": pool("AveragePool", (1, 3, 8, 8), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                        count_include_pad=1),
    "global_avgpool": pool("GlobalAveragePool", (2, 6, 7, 7)),
    "matmul_2d": matmul((5, 7), (7, 3)),
    "matmul_3d_weight": matmul((2, 6, 8), (8, 10)),
    "matmul_batched": matmul((3, 4, 5), (3, 5, 6), weight=False),
    "matmul_4d": matmul((2, 3, 4, 5), (2, 3, 5, 4), weight=False),
    "gemm": gemm(3, 16, 10, 0),
    "gemm_transb": gemm(4, 12, 9, 1),
    "add_bcast": binary("Add", (2, 3, 4), (4,)),
    "mul_bcast": binary("Mul", (2, 3, 4), (3, 1)),
    "sub_bcast": binary("Sub", (1, 5), (4, 1)),
    "div": binary("Div", (3, 4), (3, 4)),
    "pow": binary("Pow", (6,), (6,)),
    "relu": unary("Relu", (2, 3, 5)),
    "sigmoid": unary("Sigmoid", (4, 7)),
    "tanh": unary("Tanh", (3, 9)),
    "erf": unary("Erf", (2, 11)),
    "exp": unary("Exp", (5, 5)),
    "sqrt": unary("Sqrt", (13,)),
    "reciprocal": unary("Reciprocal", (3, 4)),
    "softmax_last": softmax((2, 3, 10), -1),
    "softmax_axis1": softmax((2, 5, 3), 1),
    "layernorm": layernorm((2, 6, 16)),
    "reduce_mean": reduce("ReduceMean", (2, 3, 8), [-1], 1),
    "reduce_sum": reduce("ReduceSum", (4, 5, 6), [1], 0),
    "reduce_max": reduce("ReduceMax", (3, 7, 2), [0, 2], 1),
    "transpose": transpose((2, 3, 4, 5), [0, 2, 3, 1]),
    "transpose_2d": transpose((7, 3), [1, 0]),
    "reshape": reshape((2, 3, 4), [6, 4]),
    "reshape_expand": reshape((2, 12), [2, 3, 4]),
    "flatten": flatten((2, 3, 4, 5), 1),
    "concat_channels": concat([(1, 2, 4, 4), (1, 3, 4, 4), (1, 1, 4, 4)], 1),
    "concat_last": concat([(2, 3), (2, 5)], -1),
    "gather_embedding": gather(30, 8, (2, 5)),
    "pad_constant": pad((1, 2, 5, 5), [0, 0, 1, 2, 0, 0, 2, 1]),
    "cast_where_equal": cast_where_equal((3, 5)),
    "attention": attention(1, 8, 16, 2),
    # second shapes of the same ops
    "conv_5x5_batch3": conv(3, 2, 11, 9, 4, 5, stride=1, pad=2),
    "conv_depthwise_s1": conv(2, 6, 7, 9, 6, 3, pad=1, group=6),
    "maxpool_3x3_s1": pool("MaxPool", (1, 5, 7, 7), kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    "global_avgpool_1x1": pool("GlobalAveragePool", (3, 4, 1, 1)),
    "matmul_vec": matmul((1, 64), (64, 33)),
    "matmul_batched_bcast": matmul((2, 3, 4, 5), (5, 7), weight=False),
    "add_4d_bcast": binary("Add", (2, 3, 4, 5), (3, 1, 5)),
    "div_scalar": binary("Div", (4, 6), (1,)),
    "relu_4d": unary("Relu", (2, 3, 4, 5)),
    "sigmoid_3d": unary("Sigmoid", (2, 3, 33)),
    "tanh_big": unary("Tanh", (257,), lo=0.5),
    "erf_3d": unary("Erf", (2, 3, 4)),
    "exp_4d": unary("Exp", (1, 2, 3, 4)),
    "softmax_2d": softmax((7, 33), 1),
    "layernorm_2d": layernorm((5, 32)),
    "reduce_mean_2axes": reduce("ReduceMean", (2, 3, 4, 5), [2, 3], 1),
    "reduce_sum_keep": reduce("ReduceSum", (6, 7), [0], 1),
    "transpose_3d": transpose((3, 5, 7), [2, 0, 1]),
    "concat_axis0": concat([(2, 3), (4, 3), (1, 3)], 0),
    "gather_1d": gather(50, 16, (7,)),
    "pad_2d": pad((3, 4), [1, 0, 2, 3]),
    "cast_where_equal_3d": cast_where_equal((2, 3, 4)),
    "attention_2heads_b2": attention(2, 6, 8, 2),
}
