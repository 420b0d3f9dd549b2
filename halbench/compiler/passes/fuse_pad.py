"""Fold a constant spatial pad into the conv or pooling op that reads it.

The conv then reads its input with bounds checks instead of a padded copy: one dispatch and
one intermediate tensor fewer per padded conv (most of a CNN's convs).
"""

from __future__ import annotations

from halbench.compiler.ir import Graph

__all__ = ["fuse_pad"]

_SPATIAL = {"nchw": (2, 3), "ngchw": (3, 4), "nhwc_hwcf": (1, 2), "nhwc_fhwc": (1, 2), "nhwc": (1, 2)}


def fuse_pad(graph: Graph) -> Graph:
    g = graph.copy()
    producers = g.producers()
    uses = g.uses()
    dead = set()
    for op in g.ops:
        if op.kind not in ("conv2d", "depthwise_conv2d", "pool") or op.inputs[0] not in producers:
            continue
        p = g.ops[producers[op.inputs[0]]]
        if p.kind != "pad" or uses.get(p.outputs[0], 0) != 1 or any(op.attrs["pads"]):
            continue
        h, w = _SPATIAL[op.attrs["layout"]]
        low, high = p.attrs["low"], p.attrs["high"]
        if any(v for i, v in enumerate(low + high) if i % len(low) not in (h, w)):
            continue  # pads batch or channels: not a conv padding
        if op.kind == "pool" and op.attrs["mode"] == "max":
            if p.attrs["value"] > -3.0e38:
                continue  # a max pool pads with -inf (or the lowest float)
        elif p.attrs["value"] != 0.0:
            continue
        op.attrs["pads"] = [low[h], low[w], high[h], high[w]]
        op.attrs["pad_value"] = float(p.attrs["value"]) if op.kind != "pool" else op.attrs["pad_value"]
        op.inputs[0] = p.inputs[0]
        dead.add(id(p))
    g.ops = [op for op in g.ops if id(op) not in dead]
    return g
