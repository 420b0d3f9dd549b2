"""Flops and bytes of every dispatch (the reports' rooflines): flops count multiply-adds as 2,
element-wise nodes as 1 each per point; bytes are what the bindings read and write once."""

from __future__ import annotations

from math import prod

from halbench.compiler.ir import Graph, Op

__all__ = ["cost", "op_flops"]


def op_flops(op: Op, g: Graph) -> int:
    a = op.attrs
    if op.kind == "generic":
        return prod(a["dims"]) * max(1, a["body"].count_ops())
    if op.kind == "row":  # a fused softmax / layer norm: its members' work
        return sum(op_flops(m, g) for m in a["ops"])
    if op.kind == "attention":  # a fused attention block: its links' work
        return sum(op_flops(m, g) for m in (a["qk"], *a["pre"], a["row"], a["pv"]))
    out = g.types[op.outputs[0]]
    n_out = out.size
    if op.kind == "conv2d":
        w = g.types[op.inputs[1]].shape
        per = prod(w[-3:]) if a["layout"] in ("nchw", "ngchw", "nhwc_fhwc") else prod(w[:3])
        return 2 * n_out * per
    if op.kind == "depthwise_conv2d":
        w = g.types[op.inputs[1]].shape
        return 2 * n_out * (w[1] * w[2] if a["layout"] == "nchw" else w[0] * w[1])
    if op.kind in ("matmul", "batch_matmul"):
        x = g.types[op.inputs[0]].shape
        k = x[-2] if a.get("transpose_a") else x[-1]
        return 2 * n_out * k
    if op.kind == "winograd_input":  # B^T d B: 32 adds per 4x4 tile (16 results) and channel
        return 2 * n_out
    if op.kind == "winograd_output":  # A^T m A: 24 adds per tile (16 operands) and channel
        return 3 * g.types[op.inputs[0]].size // 2
    if op.kind == "pool":
        return n_out * prod(a["kernel"])
    return 0


def cost(graph: Graph) -> Graph:
    g = graph.copy()
    costs = {}
    for i, d in enumerate(g.ops):
        flops = op_flops(d.attrs["root"], g)
        ep = d.attrs["epilogue"]
        if ep is not None:
            flops += op_flops(ep, g)
        pro = d.attrs.get("prologue")  # a fused depthwise convolution (passes/fuse_depthwise.py)
        if pro is not None:
            flops += sum(op_flops(op, g) for op in (pro["root"], pro["epilogue"]) if op is not None)
        nbytes = sum(g.types[v].nbytes for v in d.inputs + d.outputs)
        costs[i] = (int(flops), int(nbytes))
    g.costs = costs
    return g
