"""Replace each attention block (scores = Q·Kᵀ, element-wise scale / mask, softmax, ·V) by ONE
dispatch whose scores never reach memory (a flash-attention kernel, codegen/attention.py).

After fuse_rows an attention block is a chain of dispatches over the scores S = [BH, M, N]:

    S = batch_matmul(Q, K)            (optionally with an element-wise epilogue)
    E = elementwise(S, mask, ...)     (zero or more: the scale, the mask add)
    P = row[softmax](E)               (fuse_rows' softmax: max, exp(x - max), sum, divide)
    O = batch_matmul(P, V)

The chain fuses when every link holds: static f32 shapes, head dims Dk, Dv of at most
``MAX_HEAD_DIM``; each element-wise link reads the previous scores at the element it writes
(identity maps over a view of S whose last dim is N) and reads its other operands in bounds;
the softmax is exactly the four-member row over the last axis; the P·V batch matmul reads P as
[BH, M, N]; nothing outside the chain reads S, E, P or any value in between (a softmax output
that is also a graph output keeps the chain as it is), and no GEMM carries a precision.

The fused op (kind ``attention``) keeps its links in order (``qk``, ``pre``, ``row``, ``pv``):
the local oracle evaluates them one after another, exactly as the dispatches they replace.
It sits where the P·V dispatch was, so every operand already exists when it runs.
``HALBENCH_NO_FUSE_ATTENTION=1`` or ``CompileOptions(fuse_attention=False)`` turns it off.
"""

from __future__ import annotations

from typing import Any

from halbench.compiler.ir import Graph, Op, is_identity, merge_locs, node_names

__all__ = ["MAX_HEAD_DIM", "fuse_attention", "is_softmax_row"]

#: Head dims above this keep their dispatches (q and the output row live in registers).
MAX_HEAD_DIM = 64


def _expr(body: Any) -> list[Any]:
    """Each yield of ``body`` as a nested tuple (op, args...), args as ("arg", k)."""
    memo: dict[int, Any] = {}

    def go(i: int) -> Any:
        if i not in memo:
            n = body.nodes[i]
            if n.op == "arg":
                memo[i] = ("arg", int(n.value))
            elif n.op == "const":
                memo[i] = ("const", n.value)
            else:
                memo[i] = (n.op, *(go(a) for a in n.args))
        return memo[i]

    return [go(y) for y in body.yields]


def _f32(g: Graph, *values: str) -> bool:
    return all(g.types[v].dtype == "f32" for v in values)


def is_softmax_row(row: Op, x: str, g: Graph) -> bool:
    """Whether row op ``row`` is exactly softmax over the last axis of its only input ``x``
    (read in row-major order): max, exp(x - max), sum, divide."""
    a = row.attrs
    if a.get("roles") != ["reduce", "full", "reduce", "full"] or row.inputs != [x] or len(a["ops"]) != 4:
        return False
    m0, m1, m2, m3 = a["ops"]
    src = a["sources"]
    shape = list(g.types[x].shape)

    def ident(op: Op, slot: int) -> bool:
        return [int(d) for d in op.attrs["dims"]] == shape and is_identity(op.attrs["maps"][slot], len(shape))

    def from_member(op: Op, slot: int, producer: Op) -> bool:
        return src.get(op.inputs[slot]) == producer.outputs[0]

    if any(len(m.outputs) != 1 for m in (m0, m1, m2, m3)):
        return False
    if not (m0.inputs == [x] and ident(m0, 0) and m0.attrs["reduce"] == ["max"] and m0.attrs["inits"] == [None]
            and m0.attrs["init_consts"] == [float("-inf")] and _expr(m0.attrs["body"]) == [("arg", 0)]):
        return False
    if len(m1.inputs) != 2:
        return False
    xs = [k for k in range(2) if m1.inputs[k] == x]
    if len(xs) != 1 or not ident(m1, xs[0]) or not from_member(m1, 1 - xs[0], m0) or not ident(m1, 2):
        return False
    if _expr(m1.attrs["body"]) != [("exp", ("subf", ("arg", xs[0]), ("arg", 1 - xs[0])))]:
        return False
    if not (len(m2.inputs) == 1 and from_member(m2, 0, m1) and m2.attrs["reduce"] == ["add"]
            and m2.attrs["inits"] == [None] and m2.attrs["init_consts"] == [0.0]
            and _expr(m2.attrs["body"]) == [("arg", 0)]):
        return False
    if len(m3.inputs) != 2 or not all(k in src for k in m3.inputs):
        return False
    e = [k for k in range(2) if src[m3.inputs[k]] == m1.outputs[0]]
    if len(e) != 1 or src[m3.inputs[1 - e[0]]] != m2.outputs[0] or not ident(m3, e[0]) or not ident(m3, 2):
        return False
    return _expr(m3.attrs["body"]) == [("divf", ("arg", e[0]), ("arg", 1 - e[0]))]


def _in_bounds(m: Any, dims: list[int], shape: tuple[int, ...]) -> bool:
    """Every index of map ``m`` over iteration ``dims`` lies inside ``shape``."""
    if m is None or len(m) != len(shape):
        return False
    for (kind, v), n in zip(m, shape):
        if kind == "d":
            if not 0 <= int(v) < len(dims) or int(dims[int(v)]) > int(n):
                return False
        elif not 0 <= int(v) < int(n):
            return False
    return True


def _pre_link(op: Op, cur: str, g: Graph, bh: int, m: int, n: int) -> int | None:
    """The slot at which element-wise ``op`` reads the scores ``cur``, if it is a valid link."""
    a = op.attrs
    dims = [int(x) for x in a["dims"]]
    if op.kind != "generic" or len(op.outputs) != 1 or any(t != "parallel" for t in a["iterators"]):
        return None
    if any(nd.op in ("extract", "out", "index") for nd in a["body"].nodes) or not dims or dims[-1] != n:
        return None
    size = 1
    for d in dims:
        size *= d
    out = op.outputs[0]
    if size != bh * m * n or list(g.types[out].shape) != dims or not is_identity(a["maps"][-1], len(dims)):
        return None
    if not _f32(g, out):
        return None
    slots = [k for k, v in enumerate(op.inputs) if g.root(v) == g.root(cur)]
    if len(slots) != 1:
        return None
    k = slots[0]
    if list(g.types[op.inputs[k]].shape) != dims or not is_identity(a["maps"][k], len(dims)):
        return None
    for j, v in enumerate(op.inputs):
        if j != k and not _in_bounds(a["maps"][j], dims, g.types[v].shape):
            return None
    return k


def _gemm(d: Op) -> Op | None:
    r = d.attrs["root"]
    if d.attrs["kind"] != "batch_matmul" or r.kind != "batch_matmul" or r.attrs.get("precision"):
        return None
    return r


def _match(g: Graph, i: int, readers: dict[str, list[int]], outputs: set[str]) -> dict[str, Any] | None:
    d1 = g.ops[i]
    qk = _gemm(d1)
    if qk is None:
        return None
    s = qk.outputs[0]
    q, k = qk.inputs[:2]
    if len(g.types[s].shape) != 3 or not _f32(g, q, k, s):
        return None
    bh, m, n = (int(x) for x in g.types[s].shape)
    sq, sk = g.types[q].shape, g.types[k].shape
    dk = int(sq[-2] if qk.attrs.get("transpose_a") else sq[-1])
    for sh in (sq, sk):
        if len(sh) not in (2, 3) or (len(sh) == 3 and int(sh[0]) != bh):
            return None
    if not 1 <= dk <= MAX_HEAD_DIM or m < 1 or n < 1:
        return None
    members = [i]
    pre: list[Op] = []
    slots: list[int] = []
    internal = {g.root(s)}

    def only_reader(v: str, j: int) -> bool:
        return g.root(v) not in outputs and readers.get(g.root(v), []) == [j]

    cur = s
    ep = d1.attrs["epilogue"]
    if ep is not None:
        slot = _pre_link(ep, s, g, bh, m, n)
        if slot is None:
            return None
        pre.append(ep)
        slots.append(slot)
        cur = ep.outputs[0]
        internal.add(g.root(cur))
    j = i
    while True:
        rs = readers.get(g.root(cur), [])
        if g.root(cur) in outputs or len(rs) != 1 or rs[0] <= j:
            return None
        j = rs[0]
        d = g.ops[j]
        if d.attrs["kind"] == "elementwise" and d.attrs["epilogue"] is None:
            slot = _pre_link(d.attrs["root"], cur, g, bh, m, n)
            if slot is None or any(g.root(v) in internal for k2, v in enumerate(d.inputs)
                                   if v != d.attrs["root"].inputs[slot]):
                return None
            pre.append(d.attrs["root"])
            slots.append(slot)
            members.append(j)
            cur = d.attrs["root"].outputs[0]
            internal.add(g.root(cur))
            continue
        break
    row_d = g.ops[j]
    row = row_d.attrs["root"]
    if row_d.attrs["kind"] != "row" or row.kind != "row" or row_d.attrs.get("pattern", ("",))[0] != "softmax":
        return None
    x = row.inputs[0] if len(row.inputs) == 1 else None
    if x is None or g.root(x) != g.root(cur) or int(row.attrs["rows"]) != bh * m or int(row.attrs["length"]) != n:
        return None
    size = 1
    for dim in g.types[x].shape:
        size *= int(dim)
    if size != bh * m * n or int(g.types[x].shape[-1]) != n or not is_softmax_row(row, x, g):
        return None
    if len(row_d.outputs) != 1:
        return None
    p = row_d.outputs[0]
    members.append(j)
    rs = readers.get(g.root(p), [])
    if g.root(p) in outputs or len(rs) != 1 or rs[0] <= j:
        return None
    last = rs[0]
    pv_d = g.ops[last]
    pv = _gemm(pv_d)
    if pv is None or pv_d.attrs["epilogue"] is not None or g.root(pv.inputs[0]) != g.root(p):
        return None
    pin, v = pv.inputs[:2]
    if pv.attrs.get("transpose_a") or [int(x) for x in g.types[pin].shape] != [bh, m, n] or g.root(v) == g.root(p):
        return None
    o = pv.outputs[0]
    sv = g.types[v].shape
    if len(sv) not in (2, 3) or (len(sv) == 3 and int(sv[0]) != bh) or not _f32(g, v, o):
        return None
    dv = int(sv[-2] if pv.attrs.get("transpose_b") else sv[-1])
    if not 1 <= dv <= MAX_HEAD_DIM or [int(x) for x in g.types[o].shape] != [bh, m, dv]:
        return None
    members.append(last)
    internal |= {g.root(p)}
    # every input of the chain comes from outside it
    ext = [q, k] + [v2 for op, sl in zip(pre, slots) for kk, v2 in enumerate(op.inputs) if kk != sl] + [v]
    if any(g.root(e) in internal for e in ext):
        return None
    return {"members": members, "qk": qk, "pre": pre, "slots": slots, "row": row, "pv": pv,
            "inputs": list(dict.fromkeys(ext)), "output": o,
            "bh": bh, "m": m, "n": n, "dk": dk, "dv": dv}


def fuse_attention(graph: Graph, enabled: bool = True) -> Graph:
    g = graph.copy()
    if not enabled:
        return g
    outputs = {g.root(v) for _, v in g.outputs}
    readers: dict[str, list[int]] = {}
    for j, d in enumerate(g.ops):
        for v in dict.fromkeys(g.root(x) for x in d.inputs):
            readers.setdefault(v, []).append(j)
    replace: dict[int, Op] = {}
    drop: set[int] = set()
    for i in range(len(g.ops)):
        if i in drop or i in replace:
            continue
        mt = _match(g, i, readers, outputs)
        if mt is None or any(j in drop or j in replace for j in mt["members"]):
            continue
        disps = [g.ops[j] for j in mt["members"]]
        loc = merge_locs(*(d.loc for d in disps))
        attrs = {key: mt[key] for key in ("qk", "pre", "slots", "row", "pv", "bh", "m", "n", "dk", "dv")}
        root = Op("attention", mt["inputs"], [mt["output"]], attrs, loc)
        last = mt["members"][-1]
        replace[last] = Op("dispatch", mt["inputs"], [mt["output"]],
                           {"kind": "attention", "name": "attention:flash", "root": root, "epilogue": None,
                            "nodes": node_names(loc)}, loc)
        drop |= set(mt["members"][:-1])
    g.ops = [replace.get(j, d) for j, d in enumerate(g.ops) if j not in drop]
    return _absorb_transposes(g) if replace else g


def _permutation(m: Any, rank: int, select: bool = False) -> list[int] | None:
    """The iteration dims map ``m`` reads, where they are a permutation of all ``rank`` of them;
    with ``select``, the map may also pick constant indices of further input dims (merge_gemms'
    sibling dim: Q, K, V at 0, 1, 2 of one merged GEMM result)."""
    if m is None or (not select and (len(m) != rank or any(k != "d" for k, _ in m))):
        return None
    perm = [int(v) for k, v in m if k == "d"]
    return perm if sorted(perm) == list(range(rank)) else None


def _transpose(d: Op, g: Graph, select: bool = False) -> Op | None:
    """The root of a pure-permutation transpose dispatch ``d`` (one f32 input, one output);
    with ``select``, one that also selects constant indices of its input (_permutation)."""
    r = d.attrs["root"]
    if d.attrs["kind"] != "transpose" or d.attrs["epilogue"] is not None or r.kind != "generic":
        return None
    if len(r.inputs) != 1 or len(r.outputs) != 1 or not _f32(g, r.inputs[0], r.outputs[0]):
        return None
    rank = len(r.attrs["dims"])
    if [int(x) for x in r.attrs["dims"]] != [int(x) for x in g.types[r.outputs[0]].shape]:
        return None
    if not is_identity(r.attrs["maps"][1], rank) or _permutation(r.attrs["maps"][0], rank, select) is None:
        return None
    shape = g.types[r.inputs[0]].shape
    if len(r.attrs["maps"][0]) != len(shape) or any(
            k == "c" and not 0 <= int(v) < int(n) for (k, v), n in zip(r.attrs["maps"][0], shape)):
        return None
    return r


def _batch_view(shape: Any, view: Any) -> bool:
    """``view`` ([BH, R, C]) sees ``shape`` as [..., R, C] with the leading dims folded into BH."""
    shape, view = [int(x) for x in shape], [int(x) for x in view]
    lead = 1
    for x in shape[:-2]:
        lead *= x
    return len(view) == 3 and len(shape) >= 2 and shape[-2:] == view[-2:] and lead == view[0]


def _absorb_transposes(g: Graph) -> Graph:
    """An attention dispatch reads Q, K and V through the transposes that produce them, and
    writes O through the transpose that reads it, where nothing else reads those values: the
    head split / merge ([B, S, H, D] <-> [B, H, S, D]) moves no data of its own (a head split
    may also select Q, K or V from merge_gemms' merged projection: [B, S, 3, H, D]). The absorbed
    transposes stay links of the op (``loads``: role -> transpose generic; ``store``), so the
    local oracle still runs them."""
    outputs = {g.root(v) for _, v in g.outputs}
    readers: dict[str, list[int]] = {}
    producer: dict[str, int] = {}
    for j, d in enumerate(g.ops):
        for v in dict.fromkeys(g.root(x) for x in d.inputs):
            readers.setdefault(v, []).append(j)
        for v in d.outputs:
            producer[g.root(v)] = j
    drop: set[int] = set()
    for ai, d in enumerate(g.ops):
        if d.attrs["kind"] != "attention":
            continue
        root = d.attrs["root"]
        a = root.attrs
        loads: dict[str, Op] = {}
        for role, x in (("q", a["qk"].inputs[0]), ("k", a["qk"].inputs[1]), ("v", a["pv"].inputs[1])):
            pi = producer.get(g.root(x))
            t = _transpose(g.ops[pi], g, select=True) if pi is not None and pi not in drop else None
            if t is None or g.root(x) != t.outputs[0] or g.root(x) in outputs or readers.get(g.root(x)) != [ai]:
                continue
            if not _batch_view(g.types[t.outputs[0]].shape, g.types[x].shape):
                continue
            if any(g.root(x) == g.root(y) for r2, y in (("q", a["qk"].inputs[0]), ("k", a["qk"].inputs[1]),
                                                          ("v", a["pv"].inputs[1])) if r2 != role):
                continue  # the same tensor in two roles: keep it simple
            loads[role] = t
            drop.add(pi)
        store = None
        o = root.outputs[0]
        rs = readers.get(g.root(o), [])
        if g.root(o) not in outputs and len(rs) == 1 and rs[0] > ai:
            t = _transpose(g.ops[rs[0]], g)
            if t is not None and g.root(t.inputs[0]) == o and _batch_view(g.types[t.inputs[0]].shape, g.types[o].shape):
                store = t
                drop.add(rs[0])
        if not loads and store is None:
            continue
        a["loads"] = loads
        a["store"] = store
        by_out = {t.outputs[0]: t for t in loads.values()}
        ins = [by_out[g.root(v)].inputs[0] if g.root(v) in by_out else v for v in root.inputs]
        root.inputs = list(dict.fromkeys(ins))
        d.inputs = list(root.inputs)
        if store is not None:
            root.outputs = list(store.outputs)
            d.outputs = list(store.outputs)
        for t in list(loads.values()) + ([store] if store is not None else []):
            d.loc = merge_locs(d.loc, t.loc)
        root.loc = d.loc
        d.attrs["nodes"] = node_names(d.loc)
    g.ops = [d for j, d in enumerate(g.ops) if j not in drop]
    return g
