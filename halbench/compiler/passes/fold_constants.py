"""Evaluate at compile time the generics that read only weights (a transposed Gemm/MatMul
weight, a cast of a constant): one dispatch and one launch fewer per layer at run time.

Only when the result is no larger than its inputs, so a broadcast bias is not blown up into a
full activation-sized weight. Evaluated with the same NumPy kernel the local driver runs.
"""

from __future__ import annotations

import numpy as np

from halbench.compiler.ir import Graph, Weight
from halbench.kernels.ops.generic import eval_generic

__all__ = ["fold_constants"]


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
        results = eval_generic(op.generic_attrs(), [g.weights[v].data for v in ins])
        for v, r in zip(op.outputs, results):
            t = g.types[v]
            g.weights[v] = Weight(v, t, np.ascontiguousarray(r).reshape(t.shape))
    g.ops = keep
    return g
