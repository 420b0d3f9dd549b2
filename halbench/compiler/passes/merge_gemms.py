"""Merge sibling GEMMs: matmuls that read the same activation with constant weights of the same
shape become ONE matmul over the weights concatenated along N, so the device runs one dispatch.

A transformer's Q, K and V projections are the case: three ``[M, K] x [K, N]`` GEMMs (each with
a bias add) that read the same hidden state. At small M (MiniLM at batch 1: 128 x 384 x 384)
each is a latency-bound dispatch on a few workgroups; merged, the ``[M, K] x [K, S*N]`` GEMM
fills S times the workgroups in about the time of one, and reads the activation once.

Siblings (``matmul`` / ``batch_matmul``, one result each) merge when they have the same
activation ``A`` and attributes, and constant weights of the same shape and dtype; where each
one's result is read by an element-wise epilogue (the bias add, after fuse_elementwise), the
epilogues must have the same body and maps, and read, besides the GEMM result, 1-D weights
along N (the biases: concatenated too) or the same value at the same map, not indexed by N.

No copies: the merged result ``Y`` [rows, S*N] is read in place. Each sibling's result (and
every reshape view of it) becomes a view of ``Y`` with one more dim of size S, put where the
view's rows end and its columns start ([1, 128, 12, 32] -> [1, 128, 3, 12, 32]); its readers
select their sibling with a constant index at that dim in their indexing maps. So every reader
must be a ``generic`` (an element-wise op, a transpose: the head split that fuse_attention then
absorbs into the attention dispatch), and each view must split into whole rows and whole
columns; a sibling read otherwise (by a GEMM, a gather, as a function output) keeps the group
from merging. Every backend runs the result unchanged: a constant map index is ordinary IR.

``HALBENCH_NO_MERGE_GEMMS=1`` or ``CompileOptions(merge_gemms=False)`` turns it off.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from halbench.compiler.ir import Graph, Op, TensorType, Weight, merge_locs

__all__ = ["merge_gemms"]

_GEMMS = ("matmul", "batch_matmul")


def _prod(xs: Any) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def _split(shape: tuple[int, ...], rows: int) -> int | None:
    """Where ``shape`` (a reshape of [rows, N]) stops being rows: the first j with
    prod(shape[:j]) == rows, or None when no dim boundary separates rows from columns."""
    for j in range(len(shape) + 1):
        if _prod(shape[:j]) == rows:
            return j
    return None


def _epilogue_signature(g: Graph, ep: Op, z: str, n: int) -> tuple | None:
    """What must agree between siblings' epilogues (body, maps, shared operands), or None if
    ``ep`` is not an epilogue the merged GEMM can carry. Bias slots appear as ``bias``."""
    a = ep.attrs
    rank = len(a["dims"])
    if (ep.kind != "generic" or len(ep.outputs) != 1 or any(t != "parallel" for t in a["iterators"])
            or [int(d) for d in a["dims"]] != list(g.types[z].shape)
            or list(g.types[ep.outputs[0]].shape) != list(g.types[z].shape)):
        return None
    if any(nd.op in ("extract", "index") for nd in a["body"].nodes) or ep.inputs.count(z) != 1:
        return None
    last = ("d", rank - 1)
    ident = tuple(("d", i) for i in range(rank))
    if tuple(tuple(r) for r in a["maps"][-1]) != ident:
        return None
    slots: list[Any] = []
    for k, v in enumerate(ep.inputs):
        m = a["maps"][k]
        if m is None:
            return None
        m = tuple(tuple(r) for r in m)
        if v == z:
            if m != ident:
                return None
            slots.append(("root",))
        elif (m == (last,) and v in g.weights and g.weights[v].data is not None
              and tuple(g.types[v].shape) == (n,)):
            slots.append(("bias", g.types[v].dtype))
        elif last not in m:
            slots.append(("same", v, m))
        else:
            return None
    return (str(a["body"].to_json()), tuple(slots), g.types[ep.outputs[0]].dtype)


def _readers_ok(g: Graph, y: str, rows: int, outputs: set[str]) -> bool:
    """Every value viewing ``y`` splits into rows and columns, and only generics read them,
    through maps."""
    if y in outputs:
        return False
    vals = {v for v in list(g.types) if g.root(v) == y}
    for v in vals:
        if _split(tuple(g.types[v].shape), rows) is None:
            return False
    for op in g.ops:
        for k, v in enumerate(op.inputs):
            if v in vals and (op.kind != "generic" or op.attrs["maps"][k] is None):
                return False
    return True


def _candidates(g: Graph) -> list[list[tuple[int, int | None]]]:
    """Groups of (matmul index, epilogue index or None), two or more each, in program order."""
    uses = g.uses()
    outputs = {g.root(v) for _, v in g.outputs}
    readers: dict[str, list[int]] = {}
    for i, op in enumerate(g.ops):
        for v in dict.fromkeys(op.inputs):
            readers.setdefault(v, []).append(i)
    produced_at = {v: i for i, op in enumerate(g.ops) for v in op.outputs}
    groups: dict[tuple, list[tuple[int, int | None]]] = {}
    for i, op in enumerate(g.ops):
        if op.kind not in _GEMMS or len(op.outputs) != 1 or len(op.inputs) != 2:
            continue
        x, w = op.inputs
        z = op.outputs[0]
        if w not in g.weights or g.weights[w].data is None or z in g.views or op.attrs.get("transpose_a"):
            continue
        wt, zt = g.types[w], g.types[z]
        n = int(wt.shape[-2] if op.attrs.get("transpose_b") else wt.shape[-1])
        if n != int(zt.shape[-1]) or g.root(x) == g.root(w):
            continue
        rows = zt.size // n
        ep, sig = None, None
        rs = readers.get(z, [])
        if uses.get(z, 0) == 1 and len(rs) == 1 and g.ops[rs[0]].kind == "generic":
            sig = _epilogue_signature(g, g.ops[rs[0]], z, n)
            if sig is not None:
                ep = rs[0]
        y = g.ops[ep].outputs[0] if ep is not None else z
        if not _readers_ok(g, y, rows, outputs):
            continue
        key = (x, op.kind, str(sorted(op.attrs.items())), tuple(wt.shape), wt.dtype, zt.dtype, sig)
        first = groups[key][0][0] if key in groups else i
        # the epilogue's shared operands must exist where the merged GEMM runs (the first's place)
        if sig is not None and any(s[0] == "same" and produced_at.get(g.root(s[1]), -1) > first for s in sig[1]):
            continue
        groups.setdefault(key, []).append((i, ep))
    return [grp for grp in groups.values() if len(grp) > 1]


def _fresh(g: Graph, base: str) -> str:
    name, k = base, 0
    while name in g.types or name in g.weights:
        k += 1
        name = f"{base}{k}"
    return name


def _merge(g: Graph, grp: list[tuple[int, int | None]]) -> tuple[list[Op], set[int], int, list[str]]:
    """The merged GEMM (and epilogue) ops for one group; the op indices they replace; where
    they go (the first sibling's place); the values now views of the merged result. Rewrites
    views, types and readers' maps in ``g``."""
    s = len(grp)
    mms = [g.ops[i] for i, _ in grp]
    eps = [g.ops[e] if e is not None else None for _, e in grp]
    m0 = mms[0]
    tb = bool(m0.attrs.get("transpose_b"))
    w0 = g.weights[m0.inputs[1]]
    parts = [g.weights[m.inputs[1]] for m in mms]
    data = np.concatenate([w.data for w in parts], axis=-2 if tb else -1)
    wname = _fresh(g, f"{m0.inputs[1]}.merged")
    g.weights[wname] = Weight(wname, TensorType(tuple(data.shape), w0.type.dtype), np.ascontiguousarray(data),
                              recipe=("concat", tuple(parts), {"axis": data.ndim - (2 if tb else 1)}))
    g.types[wname] = g.weights[wname].type
    zt = g.types[m0.outputs[0]]
    n = int(zt.shape[-1])
    rows = zt.size // n
    merged_shape = (*zt.shape[:-1], s * n)
    z = _fresh(g, f"{m0.outputs[0]}.merged")
    g.types[z] = TensorType(merged_shape, zt.dtype)
    new_ops = [Op(m0.kind, [m0.inputs[0], wname], [z], dict(m0.attrs), merge_locs(*(m.loc for m in mms)))]
    y = z
    if eps[0] is not None:
        e0 = eps[0].clone()
        e0.attrs["dims"] = [*e0.attrs["dims"][:-1], s * n]
        ins = []
        for k, v in enumerate(e0.inputs):
            if v == mms[0].outputs[0]:
                ins.append(z)
            elif v in g.weights and tuple(tuple(r) for r in e0.attrs["maps"][k]) == (("d", len(merged_shape) - 1),) \
                    and g.types[v].shape == (n,):
                bparts = [g.weights[e.inputs[k]] for e in eps]
                bias = np.concatenate([w.data.reshape(n) for w in bparts])
                bname = _fresh(g, f"{v}.merged")
                flat = all(tuple(w.type.shape) == (n,) for w in bparts)  # else stored as computed
                g.weights[bname] = Weight(bname, TensorType((s * n,), g.types[v].dtype), bias,
                                          recipe=("concat", tuple(bparts), {"axis": 0}) if flat else None)
                g.types[bname] = g.weights[bname].type
                ins.append(bname)
            else:
                ins.append(v)
        y = _fresh(g, f"{eps[0].outputs[0]}.merged")
        g.types[y] = TensorType(merged_shape, g.types[eps[0].outputs[0]].dtype)
        e0.inputs, e0.outputs = ins, [y]
        e0.loc = merge_locs(*(e.loc for e in eps))
        new_ops.append(e0)
    # each sibling's result, and every view of it: a view of y with the sibling dim inserted
    rewritten: list[str] = []
    for idx, (mm, ep) in enumerate(zip(mms, eps)):
        yi = ep.outputs[0] if ep is not None else mm.outputs[0]
        if ep is not None:
            del g.types[mm.outputs[0]]  # the sibling's GEMM result is gone
        vals = [v for v in list(g.types) if g.root(v) == yi]
        where: dict[str, int] = {}
        rewritten += vals
        for v in vals:
            shape = tuple(g.types[v].shape)
            j = _split(shape, rows)
            assert j is not None  # checked by _readers_ok
            where[v] = j
            g.types[v] = TensorType((*shape[:j], s, *shape[j:]), g.types[v].dtype)
            g.views[v] = y
        for op in g.ops:
            if op.kind != "generic" or not any(v in where for v in op.inputs):
                continue
            maps = list(op.attrs["maps"])
            for k, v in enumerate(op.inputs):
                if v in where:
                    m = tuple(tuple(r) for r in maps[k])
                    maps[k] = (*m[:where[v]], ("c", idx), *m[where[v]:])
            op.attrs["maps"] = maps
    replaced = {i for i, _ in grp} | {e for _, e in grp if e is not None}
    return new_ops, replaced, grp[0][0], rewritten


def merge_gemms(graph: Graph, enabled: bool = True) -> Graph:
    g = graph.copy()
    if not enabled:
        return g
    groups = _candidates(g)
    if not groups:
        return g
    insert: dict[int, list[Op]] = {}
    drop: set[int] = set()
    views: list[str] = []
    for grp in groups:
        ops, replaced, at, rewritten = _merge(g, grp)
        insert[at] = ops
        drop |= replaced
        views += rewritten
    new: list[Op] = []
    for i, op in enumerate(g.ops):
        new += insert.get(i, [])
        if i not in drop:
            new.append(op)
    g.ops = new
    uses = g.uses()
    # a sibling result read only through its views is no value of its own any more
    for v in views:
        if not uses.get(v, 0):
            del g.views[v], g.types[v]
    uses = g.uses()
    g.weights = {k: w for k, w in g.weights.items() if uses.get(k, 0)}
    g.types = {k: t for k, t in g.types.items() if k not in graph.weights or k in g.weights}
    return g
