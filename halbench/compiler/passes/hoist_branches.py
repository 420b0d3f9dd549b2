"""Hoist side branches: where an element-wise op joins two GEMM-like results (a residual add
of a block's last convolution and its downsample convolution), the shallow one is moved up to
just after its own inputs, so the deep one takes the add as its epilogue and the shallow one has
no dependency on the chain beside it.

ONNX exporters write a ResNet bottleneck as ``conv1, conv2, conv3, downsample, add``: the
downsample comes last, so form_dispatches gives it the add (its epilogue may read only values
computed before its root) and it must wait for conv3. Hoisted, it follows the block input's
producer, next to conv1, which reads the same input: nothing lies between the two, so the
schedule puts no barrier between them and the device runs them at once (CUDA graph nodes without
an edge; one Vulkan barrier less), and conv3 carries the residual add and the ReLU.

A result is a candidate when it is read once, by that op, at the identity index (as an epilogue
reads its root's) and is no function output; the deepest candidate (longest chain of ops from
the function's inputs) stays where it is, and another one that comes after it moves to just
after the last producer of its inputs, when every other input of the join is computed before
the deep one (else the join could not be an epilogue and would cost a dispatch of its own).
Ops only move up past ops they do not depend on, so the order stays topological; results are
bit-identical. ``ENABLED = False`` turns it off (scripts/switch_bundles.py ``nohoist``).
"""

from __future__ import annotations

from halbench.compiler.ir import Graph
from halbench.compiler.passes.form_dispatches import EPILOGUE_ROOTS, epilogue_slot
from halbench.compiler.passes.schedule_levels import dependence_levels

__all__ = ["ENABLED", "hoist_branches"]

ENABLED = True


def _one_hoist(g: Graph, uses: dict[str, int], outputs: set[str]) -> bool:
    """Move one shallow branch up (the first found); whether one moved."""
    level = dependence_levels(g)
    producer = {v: i for i, op in enumerate(g.ops) for v in op.outputs}
    for c in g.ops:
        if c.kind != "generic" or len(c.outputs) != 1:
            continue
        roots = sorted({i for v in c.inputs if (i := producer.get(v)) is not None
                        and g.ops[i].kind in EPILOGUE_ROOTS and len(g.ops[i].outputs) == 1
                        and uses.get(v, 0) == 1 and v not in outputs and epilogue_slot(g.ops[i], c) is not None})
        if len(roots) < 2:
            continue
        deep = max(roots, key=lambda i: (level[i], i))
        others = {g.root(v) for v in c.inputs} - {g.ops[deep].outputs[0]}
        if any(producer.get(v, -1) > deep and producer[v] not in roots for v in others):
            continue  # an input computed after the deep root: the join cannot be its epilogue
        for i in (i for i in reversed(roots) if i > deep):
            to = 1 + max((producer[g.root(v)] for v in g.ops[i].inputs if g.root(v) in producer), default=-1)
            if to <= deep:
                g.ops.insert(to, g.ops.pop(i))
                return True
    return False


def hoist_branches(graph: Graph) -> Graph:
    if not ENABLED:
        return graph
    g = graph.copy()
    uses = g.uses()
    outputs = {v for _, v in g.outputs}
    for _ in range(len(g.ops)):  # each move puts one op before the deep root it joined: finite
        if not _one_hoist(g, uses, outputs):
            break
    return g
