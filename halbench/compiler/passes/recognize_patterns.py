"""Tag the dispatch groups that make up a softmax or a layer norm.

torch-mlir lowers both into reductions and element-wise generics; a GPU backend can replace a
tagged group with one fused kernel (one pass over a row in shared memory) or keep the
dispatches as they are. Tags only: ``attrs["pattern"] = ("softmax" | "layer_norm", group id)``
and the dispatch name gets the pattern as a prefix; semantics are unchanged.
"""

from __future__ import annotations

from halbench.compiler.ir import Graph, Op

__all__ = ["recognize_patterns"]


def _body_ops(d: Op) -> set[str]:
    ops = {n.op for n in d.attrs["root"].attrs["body"].nodes} if d.attrs["root"].kind == "generic" else set()
    return ops | {r for r in (d.attrs["root"].attrs.get("reduce") or []) if r}


def _reads_group(d: Op, produced: set[str], g: Graph) -> bool:
    return any(g.root(v) in produced for v in d.inputs)


def _match(ops: list[Op], i: int, g: Graph) -> tuple[str, int] | None:
    first = ops[i]
    if first.attrs["kind"] != "reduction":
        return None
    group = [first]
    produced = {g.root(v) for v in first.outputs}
    # Grow the group while the next dispatch reads something the group produced.
    for d in ops[i + 1:i + 8]:
        if not _reads_group(d, produced, g) or d.attrs["kind"] not in ("reduction", "elementwise"):
            break
        group.append(d)
        produced |= {g.root(v) for v in d.outputs}
    kinds = [d.attrs["kind"] for d in group]
    ops_seen = [_body_ops(d) for d in group]
    if "max" in ops_seen[0] and len(group) >= 4 and kinds[2] == "reduction" \
            and "exp" in set().union(*ops_seen[1:3]) and "divf" in ops_seen[3]:
        return "softmax", 4
    if "add" in ops_seen[0] and kinds.count("reduction") >= 2:
        for n in range(2, len(group) + 1):
            # 1/sqrt(var + eps) as rsqrt, or x / sqrt(var + eps) as ONNX graphs often spell it
            if {"rsqrt", "sqrt"} & set().union(*ops_seen[:n]) and kinds[:n].count("reduction") == 2:
                end = n
                while end < len(group) and kinds[end] == "elementwise":
                    end += 1
                return "layer_norm", end
    return None


def recognize_patterns(graph: Graph) -> Graph:
    g = graph.copy()
    ops = g.ops
    i, group_id = 0, 0
    while i < len(ops):
        m = _match(ops, i, g)
        if m is None:
            i += 1
            continue
        pattern, n = m
        for d in ops[i:i + n]:
            d.attrs["pattern"] = (pattern, group_id)
            d.attrs["name"] = f"{pattern}:{d.attrs['name']}"
        group_id += 1
        i += n
    return g
