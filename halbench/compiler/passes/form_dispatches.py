"""Group ops into dispatches: one root op each, plus an element-wise epilogue where it fits.

A dispatch is an op of kind ``dispatch`` whose attrs hold ``kind`` (what GPU template runs
it), ``root`` (an Op), ``epilogue`` (a generic Op reading the root's result, or None),
``name`` and ``nodes`` (the ONNX nodes it computes, from the ops' locations). Its
inputs/outputs are the values bound to it, inputs first.

Kinds: conv, depthwise_conv, matmul, batch_matmul, pooling, elementwise, reduction,
transpose, gather, pad, concat, slice, insert_slice. An elementwise consumer joins a
conv/matmul/pooling dispatch as its epilogue when it reads the root's result at the same
index it writes (identity maps), and nothing else reads that result: bias, residual add,
ReLU/ReLU6 and GELU then run in the GEMM's registers.
"""

from __future__ import annotations

from halbench.compiler.ir import Graph, Op, is_identity, merge_locs, node_names

__all__ = ["EPILOGUE_ROOTS", "ROOT_KINDS", "epilogue_slot", "form_dispatches", "generic_kind"]

ROOT_KINDS = {"conv2d": "conv", "depthwise_conv2d": "depthwise_conv", "matmul": "matmul",
              "batch_matmul": "batch_matmul", "pool": "pooling", "pad": "pad", "concat": "concat",
              "slice": "slice", "insert_slice": "insert_slice", "copy": "copy", "scan": "scan",
              "sort": "sort", "scatter": "scatter", "winograd_input": "winograd_input",
              "winograd_output": "winograd_output"}
EPILOGUE_ROOTS = {"conv2d", "depthwise_conv2d", "matmul", "batch_matmul", "pool", "winograd_output"}


def generic_kind(op: Op) -> str:
    a = op.attrs
    if "reduction" in a["iterators"]:
        return "reduction"
    nodes = a["body"].nodes
    if any(n.op == "extract" for n in nodes):
        return "gather"
    if len(op.inputs) == 1 and len(nodes) == 1 and nodes[0].op == "arg":
        rank = len(a["dims"])
        if not (is_identity(a["maps"][0], rank) and is_identity(a["maps"][1], rank)):
            return "transpose"  # a pure copy through a permutation (or broadcast)
    return "elementwise"


def epilogue_slot(root: Op, c: Op) -> int | None:
    """The slot at which ``c`` reads ``root``'s result as an epilogue, else None."""
    if c.kind != "generic" or len(c.outputs) != 1 or "reduction" in c.attrs["iterators"]:
        return None
    rank = len(c.attrs["dims"])
    slots = [i for i, v in enumerate(c.inputs) if v == root.outputs[0]]
    if len(slots) != 1:
        return None
    out_map = c.attrs["maps"][len(c.inputs)]
    if not (is_identity(c.attrs["maps"][slots[0]], rank) and is_identity(out_map, rank)):
        return None
    return slots[0]


def _bound(values: list[str]) -> list[str]:
    seen: list[str] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def _source(g: Graph, v: str) -> str:
    """The value ``v`` is a view of (through folded reshapes), or ``v`` itself."""
    while v in g.views:
        v = g.views[v]
    return v


def form_dispatches(graph: Graph) -> Graph:
    g = graph.copy()
    uses = g.uses()
    outputs = {v for _, v in g.outputs}
    consumers: dict[str, list[int]] = {}
    for i, op in enumerate(g.ops):
        for v in op.inputs:
            consumers.setdefault(v, []).append(i)
    taken: set[int] = set()
    dispatches: list[Op] = []
    for i, op in enumerate(g.ops):
        if i in taken:
            continue
        epilogue = None
        if op.kind in EPILOGUE_ROOTS and len(op.outputs) == 1:
            r = op.outputs[0]
            cs = consumers.get(r, [])
            if uses.get(r, 0) == 1 and r not in outputs and len(cs) == 1:
                c = g.ops[cs[0]]
                slot = epilogue_slot(op, c)
                # Every other input of the epilogue must already exist when the root runs.
                # (An input that is a folded reshape of such a value counts as that value: reading
                # the view before its source is computed reads stale memory.)
                produced_later = {v for j in range(i + 1, cs[0]) for v in g.ops[j].outputs}
                if slot is not None and not ({_source(g, v) for v in c.inputs} & produced_later):
                    epilogue = c
                    taken.add(cs[0])
        if op.kind == "generic":
            kind = generic_kind(op)
        elif op.kind in ROOT_KINDS:
            kind = ROOT_KINDS[op.kind]
        else:
            raise AssertionError(f"no dispatch kind for op '{op.kind}'")
        ins = list(op.inputs)
        outs = list(op.outputs)
        name = kind
        if epilogue is not None:
            ins += [v for v in epilogue.inputs if v != op.outputs[0]]
            outs = list(epilogue.outputs)
            name += "+" + generic_kind(epilogue)
        loc = merge_locs(op.loc, epilogue.loc) if epilogue is not None else op.loc
        dispatches.append(Op("dispatch", _bound(ins), outs,
                             {"kind": kind, "name": name, "root": op, "epilogue": epilogue,
                              "nodes": node_names(loc)}, loc))
    g.ops = dispatches
    return g
