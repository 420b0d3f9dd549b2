"""Replace each softmax / layer-norm group (recognize_patterns' tags) by ONE row dispatch.

A group is a run of generic dispatches over the same rows: reductions along the last iteration
dim (``reduce``), element-wise ops over the whole row (``full``) and element-wise ops on one value
per row (``scalar``: a mean divided by N, an rsqrt). The fused dispatch's root is an op of kind
``row`` holding the member generics in order; a row kernel (codegen/kernels.py) computes a whole
row per workgroup and the local oracle evaluates the members one after another (exactly the old
dispatches' semantics). Values of the group that something outside it reads (a mean used
elsewhere, a graph output) stay bound as outputs of the fused dispatch; the rest never reach
memory.

Each group is checked before it is fused (NumPy, every row, three columns of each): every
value a member reads from another member must be read at the element that member wrote for the
same row (and column), rows of full-row operands must be contiguous (stride 1, or 0 for a
broadcast), and every index must lie inside its tensor. A group that fails any check keeps its
dispatches (a softmax over a non-last axis, non-contiguous rows, a gather inside, a sequential
reduction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from halbench.compiler.ir import Graph, Op, merge_locs, node_names

__all__ = ["fuse_rows", "row_group"]

#: Groups of more rows than this are not checked (and not fused).
_MAX_ROWS = 1 << 22


def _strides(shape: Sequence[int]) -> list[int]:
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= int(n)
    return out[::-1]


def _offsets(m: Any, shape: Sequence[int], coords: Sequence[np.ndarray]) -> np.ndarray | None:
    """Linear offsets of operand map ``m`` at the points ``coords`` (one array per iteration
    dim), or None where an index leaves the tensor or the map does not fit its rank."""
    if m is None or len(m) != len(shape):
        return None
    off = np.zeros(coords[0].shape if coords else (), dtype=np.int64)
    for (kind, v), n, st in zip(m, shape, _strides(shape)):
        x = coords[int(v)] if kind == "d" else np.int64(int(v))
        if np.any(x < 0) or np.any(x >= n):
            return None
        off = off + x * st
    return off


def _role(op: Op, rows: int, length: int) -> str | None:
    a = op.attrs
    dims = [int(x) for x in a["dims"]]
    iters = a["iterators"]
    if not dims:
        return None
    if iters[-1] == "reduction" and all(t == "parallel" for t in iters[:-1]):
        ok = int(np.prod(dims[:-1])) == rows and dims[-1] == length
        return "reduce" if ok else None
    if any(t != "parallel" for t in iters):
        return None
    if int(np.prod(dims[:-1])) == rows and dims[-1] == length:
        return "full"
    if int(np.prod(dims)) == rows:
        return "scalar"
    return None


def _points(op: Op, role: str, rows: int, length: int) -> list[np.ndarray]:
    """Coordinates of the iteration points checked: every row; in a row, the columns 0, 1 and
    length - 1 (an offset is affine in the column, so these three decide equality, stride and
    bounds for the whole row). Shaped (rows, 3) or (rows,)."""
    dims = [int(x) for x in op.attrs["dims"]]
    if role == "scalar":
        return list(np.unravel_index(np.arange(rows, dtype=np.int64), dims))
    r = np.arange(rows, dtype=np.int64)[:, None]
    j = np.array([0, 1, length - 1], dtype=np.int64)[None, :]
    outer = list(np.unravel_index(np.broadcast_to(r, (rows, 3)), dims[:-1])) if len(dims) > 1 else []
    return [np.asarray(c, dtype=np.int64) for c in outer] + [np.broadcast_to(j, (rows, 3))]


def _contiguous(off: np.ndarray, length: int) -> bool:
    """Offsets (rows, 3) at columns 0, 1, length - 1 step by 1 (or 0: a broadcast) along a row."""
    step = off[:, 1] - off[:, 0]
    if not (np.all(step == 1) or np.all(step == 0)):
        return False
    return bool(np.all(off[:, 2] == off[:, 0] + step * (length - 1)))


def _distinct(x: np.ndarray) -> bool:
    return x.size == 0 or int(np.bincount(x.ravel()).max()) == 1


def row_group(members: list[Op], g: Graph) -> dict[str, Any] | None:
    """The row op's attrs for generic ``members`` (in order), or None when they do not fit."""
    if not members or any(op.kind != "generic" for op in members):
        return None
    first_reduce = next((op for op in members if "reduction" in op.attrs["iterators"]), None)
    if first_reduce is None:
        return None
    dims = [int(x) for x in first_reduce.attrs["dims"]]
    rows, length = int(np.prod(dims[:-1])), dims[-1]
    if length < 2 or rows > _MAX_ROWS:
        return None
    roles: list[str] = []
    # root value -> (member, output index, "full" | "row", offsets written)
    written: dict[str, tuple[int, int, str, np.ndarray]] = {}
    for k, op in enumerate(members):
        a = op.attrs
        role = _role(op, rows, length)
        if role is None or any(n.op in ("extract", "out") for n in a["body"].nodes):
            return None
        if any(r not in (None, "add", "mul", "max", "min") for r in a["reduce"]):
            return None
        pts = _points(op, role, rows, length)
        n_in = len(op.inputs)
        for i, v in enumerate(op.inputs):
            off = _offsets(a["maps"][i], g.types[v].shape, pts)
            if off is None:
                return None
            src = written.get(g.root(v))
            if src is None:  # read from outside the group: rows must be contiguous
                if role != "scalar" and not _contiguous(off, length):
                    return None
                continue
            _, _, kind, w = src
            if kind == "full":
                if role == "scalar" or not np.array_equal(off, w):
                    return None
            elif role == "scalar":
                if not np.array_equal(off, w):
                    return None
            elif not np.array_equal(off, np.broadcast_to(w[:, None], off.shape)):
                return None
        for k_out, v in enumerate(op.outputs):
            if g.root(v) != v or v in written:
                return None
            m = a["maps"][n_in + k_out]
            off = _offsets(m, g.types[v].shape, pts)
            if off is None:
                return None
            if role == "reduce":
                if any(r == ("d", len(pts) - 1) for r in map(tuple, m)):
                    return None  # a reduction's result indexed by its reduction dim
                off = off[:, 0]
            if role == "full":  # rows of `length` contiguous elements, each row written once
                if g.types[v].size != rows * length or not _contiguous(off, length) \
                        or np.any(off[:, 1] != off[:, 0] + 1) or np.any(off[:, 0] % length) \
                        or not _distinct(off[:, 0] // length):
                    return None
            elif g.types[v].size != rows or not _distinct(off):
                return None  # one value per row, each written once
            written[v] = (k, k_out, "full" if role == "full" else "row", off)
        roles.append(role)
    return {"rows": rows, "length": length, "roles": roles}


def _groups(g: Graph) -> list[tuple[int, int]]:
    """(start, end) of each run of dispatches tagged with one pattern group."""
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(g.ops):
        tag = g.ops[i].attrs.get("pattern")
        j = i + 1
        while tag is not None and j < len(g.ops) and g.ops[j].attrs.get("pattern") == tag:
            j += 1
        if tag is not None:
            out.append((i, j))
        i = j
    return out


def fuse_rows(graph: Graph) -> Graph:
    g = graph.copy()
    outputs = {g.root(v) for _, v in g.outputs}
    fused: dict[int, Op] = {}
    skip: set[int] = set()
    for start, end in _groups(g):
        disps = g.ops[start:end]
        if any(d.attrs.get("epilogue") is not None for d in disps):
            continue
        members = [d.attrs["root"] for d in disps]
        attrs = row_group(members, g)
        if attrs is None:
            continue
        produced = [v for op in members for v in op.outputs]
        outside = {g.root(v) for j, d in enumerate(g.ops) if not start <= j < end for v in d.inputs}
        exports = [v for v in produced if v in outside or v in outputs]
        ins = list(dict.fromkeys(v for op in members for v in op.inputs if g.root(v) not in produced))
        pattern, _ = disps[0].attrs["pattern"]
        loc = merge_locs(*(d.loc for d in disps))
        attrs.update(ops=members, pattern=pattern,
                     sources={v: g.root(v) for op in members for v in op.inputs if g.root(v) in produced})
        root = Op("row", ins, exports, attrs, loc)
        fused[start] = Op("dispatch", ins, exports,
                          {"kind": "row", "name": f"{pattern}:row", "root": root, "epilogue": None,
                           "nodes": node_names(loc), "pattern": disps[0].attrs["pattern"]}, loc)
        skip |= set(range(start + 1, end))
    g.ops = [fused.get(i, d) for i, d in enumerate(g.ops) if i not in skip]
    return g
