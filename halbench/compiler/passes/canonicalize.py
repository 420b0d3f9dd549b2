"""Drop ops whose results nobody reads (ops are pure), and weights nobody reads."""

from __future__ import annotations

from halbench.compiler.ir import Graph

__all__ = ["canonicalize"]


def canonicalize(graph: Graph) -> Graph:
    g = graph.copy()
    changed = True
    while changed:
        uses = g.uses()
        keep = [op for op in g.ops if any(uses.get(v, 0) for v in op.outputs)]
        views = {v: s for v, s in g.views.items() if uses.get(v, 0)}
        changed = len(keep) != len(g.ops) or len(views) != len(g.views)
        g.ops, g.views = keep, views
    uses = g.uses()
    g.weights = {k: w for k, w in g.weights.items() if uses.get(k, 0)}
    live = set(g.weights) | {v for _, v in g.inputs} | set(g.views) | {v for op in g.ops for v in op.inputs + op.outputs}
    g.types = {k: t for k, t in g.types.items() if k in live}
    return g
