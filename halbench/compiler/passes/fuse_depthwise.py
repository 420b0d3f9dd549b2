"""Fuse a depthwise convolution into the pointwise (1x1) convolution that reads it.

MobileNet-style blocks run ``depthwise 3x3 -> (bias, ReLU6) -> pointwise 1x1``. As two
dispatches, the depthwise result makes a round trip through memory and the pointwise GEMM waits
for it behind a barrier (about 2.4 µs on NVIDIA's Vulkan driver, one per block). Fused, the
pointwise GEMM computes each element of its B operand (channel k, pixel n) as it stages it: the
depthwise window at (k, n) and the depthwise dispatch's own epilogue, in registers. Each element
is computed once per workgroup row of output channels that needs it (F / BM times), a few
multiply-adds each, instead of being stored and read back.

A depthwise dispatch D1 is fused into dispatch D2 when:
- D1's root is an NCHW f32 ``depthwise_conv2d``; its epilogue (if any) is element-wise without
  computed indices; D1 writes exactly one value ``r``;
- ``r`` is read by nothing but D2's root, as its input (no view, no function output);
- D2's root is an NCHW f32 ``conv2d`` with a 1x1 filter, stride 1, no padding, one group;
- the compile's precision is ``fp32`` (the rounded and matrix-unit GEMMs stage their operands
  by copies, which cannot compute).

D2 then carries ``prologue`` = {root, epilogue, value: r, name}; its inputs lose ``r`` and gain
D1's. Every backend reads it: the GPU GEMM (codegen/kernels.py ``_dw_prologue``, gemm.j2 ``DW``:
register staging, the window's taps loaded a step ahead, summed and the epilogue run as the
tile is stored to shared memory), the local NumPy kernels (codegen/local.py: attrs
``prologue``), the cost pass and the IR printer.

Off by default: ``CompileOptions.fuse_depthwise=True`` or ``$HALBENCH_FUSE_DEPTHWISE=1`` turns it
on (scripts/switch_bundles.py ``dwfuse``). Measured on the H200 (fp32, MobileNetV2, timed whole,
interleaved A/B, docs/examples/h200-dwfuse.txt): 54 -> 37 dispatches and 53 -> 36 barriers, but
b1 0.186 -> 0.278 ms on CUDA and 0.328 -> 0.432 on Vulkan, b8 0.498 -> 0.971 and 0.781 -> 1.150.
Each B element costs nine loads instead of one, repeated for every BM-row tile of the GEMM, and
the GEMM loses cp.async; the barriers saved (about 2.4 µs each on Vulkan) do not pay for that.
A version that stages the depthwise input tile (with its halo) in shared memory once per
workgroup would be the next thing to try.
"""

from __future__ import annotations

from halbench.compiler.ir import Graph, Op, merge_locs

__all__ = ["fusable_pair", "fuse_depthwise"]


def _f32(g: Graph, values: list[str]) -> bool:
    return all(g.types[v].dtype == "f32" for v in values)


def fusable_pair(g: Graph, d1: Op, d2: Op, uses: dict[str, int], outputs: set[str]) -> bool:
    """Whether depthwise dispatch ``d1`` may become the prologue of dispatch ``d2``."""
    a1, a2 = d1.attrs, d2.attrs
    dw, pw = a1.get("root"), a2.get("root")
    if dw is None or pw is None or dw.kind != "depthwise_conv2d" or pw.kind != "conv2d":
        return False
    if a1.get("prologue") is not None or a2.get("prologue") is not None or len(d1.outputs) != 1:
        return False
    r = d1.outputs[0]
    if uses.get(r, 0) != 1 or r in outputs or r in g.views.values() or pw.inputs[0] != r:
        return False
    ep1, ep2 = a1.get("epilogue"), a2.get("epilogue")
    if ep2 is not None and r in ep2.inputs:
        return False
    if ep1 is not None and (any(n.op == "extract" for n in ep1.attrs["body"].nodes) or len(ep1.outputs) != 1):
        return False
    if dw.attrs.get("layout") != "nchw" or pw.attrs.get("layout") != "nchw":
        return False
    if not _f32(g, [*dw.inputs, *dw.outputs, r, *pw.inputs[:2], *pw.outputs]):
        return False
    ws = g.types[pw.inputs[1]].shape
    if len(ws) != 4 or tuple(ws[2:]) != (1, 1):
        return False
    if [int(s) for s in pw.attrs.get("strides", [1, 1])] != [1, 1] or any(int(p) for p in pw.attrs.get("pads", [0] * 4)):
        return False
    return len(g.types[r].shape) == 4


def fuse_depthwise(graph: Graph, enabled: bool = False, precision: str = "fp32") -> Graph:
    if not enabled or precision != "fp32":
        return graph
    g = graph.copy()
    uses = g.uses()
    outputs = {v for _, v in g.outputs}
    reader: dict[str, list[int]] = {}
    for i, d in enumerate(g.ops):
        for v in d.inputs:
            reader.setdefault(v, []).append(i)
    drop: set[int] = set()
    for i, d1 in enumerate(g.ops):
        if d1.kind != "dispatch" or len(d1.outputs) != 1:
            continue
        rs = reader.get(d1.outputs[0], [])
        if len(rs) != 1 or rs[0] in drop:
            continue
        d2 = g.ops[rs[0]]
        if d2.kind != "dispatch" or not fusable_pair(g, d1, d2, uses, outputs):
            continue
        r = d1.outputs[0]
        a1, a2 = d1.attrs, d2.attrs
        ins = [v for v in d2.inputs if v != r]
        ins += [v for v in d1.inputs if v not in ins]
        d2.inputs = ins
        a2["prologue"] = {"root": a1["root"], "epilogue": a1["epilogue"], "value": r, "name": a1["name"]}
        a2["name"] = f"{a1['name']}>{a2['name']}"
        a2["nodes"] = list(dict.fromkeys([*a1.get("nodes", []), *a2.get("nodes", [])]))
        d2.loc = merge_locs(d1.loc, d2.loc)
        drop.add(i)
    if drop:
        g.ops = [d for i, d in enumerate(g.ops) if i not in drop]
    return g
