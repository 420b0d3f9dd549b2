"""Reshapes (collapse/expand/cast) move no data: turn them into views of their source.

A view shares its source's storage and bytes (row-major layout is unchanged by a reshape), so
buffer assignment gives it the source's buffer and offset and no dispatch is emitted.
"""

from __future__ import annotations

from halbench.compiler.ir import Graph

__all__ = ["fold_reshapes"]


def fold_reshapes(graph: Graph) -> Graph:
    g = graph.copy()
    keep = []
    for op in g.ops:
        if op.kind == "reshape":
            g.views[op.outputs[0]] = op.inputs[0]
        else:
            keep.append(op)
    g.ops = keep
    return g
