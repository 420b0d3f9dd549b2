"""A batch matmul against a weight broadcast over the batch reads the 2-D weight in place.

torch-mlir lowers ``MatMul([B, M, K], [K, N])`` to a ``generic`` that copies the [K, N] weight B
times into a [B, K, N] tensor, then a ``batch_matmul``. On a GPU that copy is a dispatch of its
own on every run (MiniLM-L6 at batch 8: 36 of them, each writing up to 19 MB). Here the batch
matmul takes the 2-D operand directly and records which operand it shares across the batch
(``attrs["shared"]``: "b" or "a"); the copy then has no reader and ``canonicalize`` drops it.
Kernels index a shared operand without the batch coordinate; NumPy's matmul broadcasts it.
"""

from __future__ import annotations

from halbench.compiler.ir import Graph, Op

__all__ = ["share_batch_operands"]

_BROADCAST_MAPS = ((("d", 1), ("d", 2)), (("d", 0), ("d", 1), ("d", 2)))


def _broadcast_source(p: Op | None) -> str | None:
    """The 2-D value ``p`` copies over a leading batch dim, if ``p`` is exactly such a copy."""
    if p is None or p.kind != "generic" or len(p.inputs) != 1 or len(p.outputs) != 1:
        return None
    a = p.attrs
    if tuple(tuple(m) for m in a.get("maps") or ()) != _BROADCAST_MAPS:
        return None
    if any(it != "parallel" for it in a.get("iterators") or ()) or any(r for r in a.get("reduce") or ()):
        return None
    body = a["body"]
    if len(body.yields) != 1 or body.nodes[body.yields[0]].op != "arg" or body.nodes[body.yields[0]].value != 0:
        return None
    return p.inputs[0]


def share_batch_operands(graph: Graph) -> Graph:
    g = graph.copy()
    producer = {v: op for op in g.ops for v in op.outputs}
    for op in g.ops:
        if op.kind != "batch_matmul" or op.attrs.get("shared"):
            continue
        for k, side in ((1, "b"), (0, "a")):
            src = _broadcast_source(producer.get(op.inputs[k]))
            if src is not None and g.types[src].dtype == g.types[op.inputs[k]].dtype:
                op.inputs = [*op.inputs[:k], src, *op.inputs[k + 1:]]
                op.attrs = {**op.attrs, "shared": side}
                break  # one shared operand per batch matmul (both shared is a plain matmul)
    return g
