"""Order-dependent kernels: ``hb.scan`` (CumSum), ``hb.sort`` (TopK) and ``hb.scatter``.

op attrs: scan ``axis``, ``inclusive``, ``init`` (the accumulator's start) and ``body`` (args:
previous result, current element); sort ``axis``, ``order`` (ascending / descending, stable:
equal keys keep their order), ``unsigned``; scatter ``dimension_map`` (index column k addresses
output axis dimension_map[k]) and ``body`` (args: update, original element). Every update row is
applied in order, so duplicates resolve as a sequential loop would; an index outside the output
is an error, as a gather's is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from halbench.errors import UserError
from halbench.kernels.ops.common import dispatch_kernel
from halbench.kernels.ops.generic import _eval_nodes

__all__ = ["scan", "scatter", "sort"]


def _apply(body: Mapping[str, Any], *args: np.ndarray) -> np.ndarray:
    vals = _eval_nodes(body["nodes"], lambda k: args[k], lambda d: None, lambda k: None, [])
    return vals[body["yields"][0]]


def scan(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    x = ins[0]
    axis = int(op["axis"])
    out = np.empty(op["out_shape"], dtype=x.dtype)
    xm, om = np.moveaxis(x, axis, 0), np.moveaxis(out, axis, 0)
    acc = np.full(xm.shape[1:], op["init"], dtype=x.dtype)
    for i in range(xm.shape[0]):
        if op["inclusive"]:
            acc = _apply(op["body"], acc, xm[i]) if i else xm[i].copy()
            om[i] = acc
        else:
            om[i] = acc
            acc = _apply(op["body"], acc, xm[i]).astype(x.dtype)
    return [out]


def sort(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    axis = int(op["axis"])
    key = ins[0]
    if op.get("unsigned") and key.dtype.kind == "i":
        key = key.view(key.dtype.str.replace("i", "u"))
    if op["order"] == "descending":
        # A stable descending order: equal keys keep their order (argsort of the reversed line).
        n = key.shape[axis]
        rev = np.flip(key, axis)
        idx = n - 1 - np.flip(np.argsort(rev, axis=axis, kind="stable"), axis)
    else:
        idx = np.argsort(key, axis=axis, kind="stable")
    return [np.take_along_axis(a, idx, axis=axis) for a in ins]


def scatter(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    updates, indices, original = ins
    out = original.copy()
    dim_map = [int(d) for d in op["dimension_map"]]
    rows = updates.reshape(updates.shape[0], *updates.shape[1:]) if updates.ndim else updates.reshape(1)
    for i in range(indices.shape[0]):
        at = [int(v) for v in indices[i]]
        for k, (d, v) in enumerate(zip(dim_map, at)):
            if not 0 <= v < out.shape[d]:
                raise UserError(f"scattered at index {v} on axis {d}, outside the output's bounds "
                                f"(0..{out.shape[d] - 1}); check the indices")
        sel: list[Any] = [slice(None)] * out.ndim
        for d, v in zip(dim_map, at):
            sel[d] = v
        cur = out[tuple(sel)]
        out[tuple(sel)] = np.asarray(_apply(op["body"], rows[i], cur)).astype(out.dtype)
    return [out]


dispatch_kernel("hb.scan", scan)
dispatch_kernel("hb.sort", sort)
dispatch_kernel("hb.scatter", scatter)
