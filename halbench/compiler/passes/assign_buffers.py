"""Give every value storage: inputs, outputs and weights their own buffers; intermediates one
transient arena, packed by liveness (first fit, offsets aligned to 256 B, the binding
alignment every device accepts), so memory is reused as soon as a tensor is dead.

A view shares its source's storage. A function output whose value cannot live in its output
buffer (an input, a weight, or a value returned twice) is filled by a copy step later.
"""

from __future__ import annotations

from halbench.compiler.ir import Graph
from halbench.compiler.passes.schedule_levels import op_levels

__all__ = ["ALIGNMENT", "assign_buffers"]

ALIGNMENT = 256


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _first_fit(live: list[tuple[int, int]], size: int) -> int:
    offset = 0
    for start, end in sorted(live):
        if start - offset >= size:
            return offset
        offset = max(offset, _align(end))
    return offset


def assign_buffers(graph: Graph) -> Graph:
    g = graph.copy()
    storage: dict[str, tuple[str, int]] = {}
    for user, v in g.inputs:
        storage[v] = (f"input:{user}", 0)
    for name in g.weights:
        storage[name] = (f"weight:{name}", 0)
    produced = {v for op in g.ops for v in op.outputs}
    for user, v in g.outputs:
        r = g.root(v)
        if r in produced and r not in storage:
            storage[r] = (f"output:{user}", 0)
    # Liveness over dispatch indices (a read through a view is a read of its root); a tensor is
    # free once its last reader ran and, where dispatches are scheduled by level, only at a later
    # level than every reader's (and its writer's), so no reuse puts a hazard inside a level.
    level = op_levels(g)
    last_use: dict[str, int] = {}
    last_level: dict[str, int] = {}
    for i, op in enumerate(g.ops):
        for v in op.inputs:
            r = g.root(v)
            last_use[r] = i
            last_level[r] = max(last_level.get(r, -1), level[i])
        for v in op.outputs:
            last_level[v] = max(last_level.get(v, -1), level[i])
    live: dict[str, tuple[int, int]] = {}
    top = 0
    for i, op in enumerate(g.ops):
        for v in [v for v in live if last_use.get(v, -1) < i and last_level[v] < level[i]]:
            del live[v]
        for v in op.outputs:
            if v in storage:
                continue
            size = _align(max(g.types[v].nbytes, 1))
            off = _first_fit(list(live.values()), size)
            live[v] = (off, off + size)
            storage[v] = ("transient", off)
            top = max(top, off + size)
    for v in g.views:
        r = g.root(v)
        if r in storage:
            storage[v] = storage[r]
    g.storage = storage
    g.transient_nbytes = top
    return g
