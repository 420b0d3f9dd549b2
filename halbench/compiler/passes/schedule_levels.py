"""Schedule dispatches by level: each dispatch as early as what it depends on allows, so the
dispatches that do not depend on one another sit between the same two barriers.

A dispatch's level is 0 where it depends on no other dispatch, else one more than the deepest one
it depends on. Dependence is on storage roots (a reshape view is its source): a later dispatch
depends on an earlier one that writes a root it reads (read after write), or reads or writes a
root it writes (write after read / write). The order becomes a stable sort by level, which keeps
every dependent pair in order, so results are bit-identical.

The schedule then puts a barrier only where a dispatch reads what one since the last barrier
wrote (compile.py), which is at each level's start: a model costs as many barriers as its
longest chain of dispatches, not as its dispatch count. An exporter writes branches one after the
other (GoogLeNet's four inception branches, MobileBERT's bottleneck and attention inputs); on
the GPU each barrier is a wait for idle (about 2.3 us through NVIDIA's Vulkan driver, 1 us as a
CUDA graph edge) and dispatches between the same two barriers share the device.

assign_buffers frees a tensor for reuse only at a level after every reader's (``op_levels``), so
reuse never puts a hazard, and a barrier, inside a level. ``ENABLED = False`` keeps the exporter's
order (scripts/switch_bundles.py ``nolevels``).
"""

from __future__ import annotations

from halbench.compiler.ir import Graph

__all__ = ["ENABLED", "dependence_levels", "op_levels", "schedule_levels"]

ENABLED = True


def op_levels(g: Graph) -> list[int]:
    """Each dispatch's level in the current order (its index where scheduling is off)."""
    return dependence_levels(g) if ENABLED else list(range(len(g.ops)))


def dependence_levels(g: Graph) -> list[int]:
    """Each op's level: 0 where it depends on no earlier op, else one more than the deepest one it
    depends on (through storage roots: read after write, write after read or write)."""
    written: dict[str, int] = {}  # root -> level of its last writer
    read: dict[str, int] = {}  # root -> deepest level that read it
    out: list[int] = []
    for op in g.ops:
        ins, outs = {g.root(v) for v in op.inputs}, {g.root(v) for v in op.outputs}
        level = 1 + max([written[r] for r in ins | outs if r in written] + [read[r] for r in outs if r in read],
                        default=-1)
        out.append(level)
        for r in ins:
            read[r] = max(read.get(r, -1), level)
        for r in outs:
            written[r] = level
    return out


def schedule_levels(graph: Graph) -> Graph:
    if not ENABLED:
        return graph
    g = graph.copy()
    level = op_levels(g)
    g.ops = [g.ops[i] for i in sorted(range(len(g.ops)), key=lambda i: (level[i], i))]
    return g
