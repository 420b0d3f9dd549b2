"""Evaluate at compile time the generics that read only weights (a transposed Gemm/MatMul
weight, a cast of a constant): one dispatch and one launch fewer per layer at run time.

Only when the result is no larger than its inputs, so a broadcast bias is not blown up into a
full activation-sized weight. Evaluated with the same NumPy kernel the local driver runs.
"""

from __future__ import annotations

import numpy as np

from halbench.compiler.ir import Graph, Weight
from halbench.kernels.ops.generic import eval_generic

__all__ = ["copy_recipe", "fold_constants"]


def fold_constants(graph: Graph) -> Graph:
    g = graph.copy()
    keep = []
    for op in g.ops:
        ins = op.inputs
        foldable = (op.kind == "generic" and ins and all(v in g.weights and g.weights[v].data is not None for v in ins)
                    and sum(g.types[v].size for v in op.outputs) <= sum(g.types[v].size for v in ins))
        if not foldable:
            keep.append(op)
            continue
        attrs = op.generic_attrs()
        results = eval_generic(attrs, [g.weights[v].data for v in ins])
        recipe = copy_recipe(attrs, [g.weights[v] for v in ins])
        for v, r in zip(op.outputs, results):
            t = g.types[v]
            g.weights[v] = Weight(v, t, np.ascontiguousarray(r).reshape(t.shape), recipe=recipe)
    g.ops = keep
    return g


def copy_recipe(attrs: dict, ins: list[Weight]) -> tuple | None:
    """("map", (w,), {dims, axes}) where the generic copies its one input, read through a map of
    distinct loop dims, to an output written in loop order (a transposed Gemm weight; the loop
    dims it does not read broadcast it): bundle.weights.derive_values remakes it; None for
    anything that computes."""
    maps, dims = attrs["maps"], list(attrs["dims"])
    if (len(ins) != 1 or len(maps) != 2 or any(r is not None for r in attrs["reduce"]) or None in maps
            or attrs["body"] != {"nodes": [["arg", [], ins[0].type.dtype, 0]], "yields": [0]}
            or [tuple(r) for r in maps[1]] != [("d", k) for k in range(len(dims))]
            or any(len(r) != 2 or r[0] != "d" for r in maps[0])):
        return None
    axes = [int(r[1]) for r in maps[0]]
    if len(set(axes)) != len(axes):
        return None
    return ("map", (ins[0],), {"dims": dims, "axes": axes})
