"""Fuse an element-wise generic into the generic that reads it (producer into consumer).

The producer must be all-parallel with one result, read once, through a permutation output
map; its body is inlined into the consumer and its input maps are composed with the
consumer's map for it. Chains (bias broadcast -> add -> relu6, exp -> sum) collapse into one
generic, which a GPU template then runs as one kernel with no intermediate tensor.

A reshape folded into a view (fold_reshapes) does not stop a fusion where it only adds or drops
size-1 dims (MiniLM's embeddings: index wrap -> ``128`` view -> gather -> ``1x128x384`` view ->
add): the consumer's map for the view is rewritten to the source's dims (a size-1 dim of the
source reads coordinate 0), so the consumer reads the source itself and the producer fuses as
if no reshape were there. Reshapes that split or merge dims of size > 1 stay views.
"""

from __future__ import annotations

from halbench.compiler.ir import Body, Graph, Node, Op, merge_locs

__all__ = ["fuse_elementwise", "fuse_generics"]


def _fusable_producer(p: Op) -> bool:
    if p.kind != "generic" or len(p.outputs) != 1:
        return False
    a = p.attrs
    if "reduction" in a["iterators"]:
        return False
    out_map = a["maps"][len(p.inputs)]
    dims = sorted(r[1] for r in out_map if r[0] == "d")
    return all(r[0] == "d" for r in out_map) and dims == list(range(len(a["dims"])))


def fuse_generics(p: Op, c: Op, slot: int) -> Op:
    """Inline producer ``p`` into consumer ``c`` at input ``slot`` (p's output)."""
    pa, ca = p.attrs, c.attrs
    c_map = ca["maps"][slot]
    p_out = pa["maps"][len(p.inputs)]
    # Producer dim -> what it is in the consumer's iteration space (a dim or a constant).
    subst = {r[1]: c_map[axis] for axis, r in enumerate(p_out)}
    inputs: list[str] = []
    maps: list = []
    index_of: dict[tuple, int] = {}

    def add(value: str, m) -> int:
        key = (value, m)
        if key not in index_of or m is None:
            inputs.append(value)
            maps.append(m)
            index_of[key] = len(inputs) - 1
        return index_of[key]

    c_remap = {}
    for i, v in enumerate(c.inputs):
        if i != slot:
            c_remap[i] = add(v, ca["maps"][i])
    p_remap = {}
    for i, v in enumerate(p.inputs):
        m = pa["maps"][i]
        p_remap[i] = add(v, None if m is None else tuple(subst[r[1]] if r[0] == "d" else r for r in m))
    body = Body()
    pn: dict[int, int] = {}
    for i, n in enumerate(pa["body"].nodes):
        args = tuple(pn[a] for a in n.args)
        if n.op in ("arg", "extract") and n.op == "arg":
            pn[i] = body.add(Node("arg", (), n.dtype, p_remap[n.value]))
        elif n.op == "extract":
            pn[i] = body.add(Node("extract", args, n.dtype, p_remap[n.value]))
        elif n.op == "index":
            s = subst[n.value]
            pn[i] = body.add(Node("index", (), n.dtype, s[1]) if s[0] == "d" else Node("const", (), n.dtype, s[1]))
        else:
            pn[i] = body.add(Node(n.op, args, n.dtype, n.value))
    p_result = pn[pa["body"].yields[0]]
    cn: dict[int, int] = {}
    for i, n in enumerate(ca["body"].nodes):
        args = tuple(cn[a] for a in n.args)
        if n.op == "arg" and n.value == slot:
            cn[i] = p_result
        elif n.op == "arg":
            cn[i] = body.add(Node("arg", (), n.dtype, c_remap[n.value]))
        elif n.op == "extract":
            cn[i] = body.add(Node("extract", args, n.dtype, c_remap[n.value]))
        else:
            cn[i] = body.add(Node(n.op, args, n.dtype, n.value))
    body.yields = [cn[y] for y in ca["body"].yields]
    inits = [None if k is None else c_remap[k] for k in ca["inits"]]
    attrs = dict(ca)
    attrs.update(maps=maps + list(ca["maps"][len(c.inputs):]), body=body.live(), inits=inits)
    # The fused op keeps both ops' source nodes: reports name a dispatch by them.
    return Op("generic", inputs, list(c.outputs), attrs, merge_locs(p.loc, c.loc))


def _unit_view_map(g: Graph, v: str, m: tuple) -> tuple[str, tuple] | None:
    """Where ``v`` is a chain of views that only adds or drops size-1 dims of value ``s``:
    ``(s, map)``, the consumer's map ``m`` (over ``v``'s dims) rewritten over ``s``'s dims."""
    src = g.root(v)
    if src == v:
        return None
    shape, src_shape = g.types[v].shape, g.types[src].shape
    big = [m[i] for i, n in enumerate(shape) if n != 1]
    if [n for n in shape if n != 1] != [n for n in src_shape if n != 1] or g.types[v].dtype != g.types[src].dtype:
        return None
    it = iter(big)
    return src, tuple(("c", 0) if n == 1 else next(it) for n in src_shape)


def _look_through_views(g: Graph, outputs: set[str]) -> bool:
    """Point one generic's read of a unit-dim view at the view's source, where that lets an
    element-wise producer fuse (the view read once, its source only through it)."""
    producers = g.producers()
    uses = g.uses()
    for c in g.ops:
        if c.kind != "generic":
            continue
        for slot, v in enumerate(c.inputs):
            m = c.attrs["maps"][slot]
            if v not in g.views or m is None or slot in c.attrs["inits"] or uses.get(v, 0) != 1 or v in outputs:
                continue
            found = _unit_view_map(g, v, m)
            if found is None:
                continue
            src, src_map = found
            chain = [v]
            while chain[-1] in g.views:
                chain.append(g.views[chain[-1]])
            if src not in producers or src in outputs or any(
                    uses.get(w, 0) != 1 or w in outputs for w in chain[1:]) or any(
                    w not in chain and g.root(w) == src for w in g.views):
                continue  # the source is read elsewhere too (or is an input / weight)
            if not _fusable_producer(g.ops[producers[src]]):
                continue
            inputs = list(c.inputs)
            inputs[slot] = src
            maps = list(c.attrs["maps"])
            maps[slot] = src_map
            c.inputs = inputs
            c.attrs = {**c.attrs, "maps": maps}
            for w in chain[:-1]:
                del g.views[w]  # the chain is read by nobody now
            return True
    return False


def fuse_elementwise(graph: Graph) -> Graph:
    g = graph.copy()
    outputs = {v for _, v in g.outputs}
    while _look_through_views(g, outputs):
        pass
    changed = True
    while changed:
        changed = False
        producers = g.producers()
        uses = g.uses()
        for ci, c in enumerate(g.ops):
            if c.kind != "generic":
                continue
            for slot, v in enumerate(c.inputs):
                if v not in producers or uses.get(v, 0) != 1 or v in outputs:
                    continue
                if c.attrs["maps"][slot] is None or slot in c.attrs["inits"]:
                    continue  # read by extract, or an accumulator's init: keep materialized
                pi = producers[v]
                p = g.ops[pi]
                if not _fusable_producer(p):
                    continue
                g.ops[ci] = fuse_generics(p, c, slot)
                del g.ops[pi]
                changed = True
                break
            if changed:
                break
    return g
