"""Data movement kernels: ``hb.pad``, ``hb.concat``, ``hb.slice``, ``hb.insert_slice``, ``hb.copy``.

op attrs: pad ``low``/``high``/``value``; concat ``axis``; slice and insert_slice ``offsets``,
``sizes``, ``strides`` (insert_slice: ``dest_fill`` when the destination is a fill or empty,
else the destination is the second input); the slice's ``out_shape`` (rank-reduced results).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from halbench.kernels.ops.common import dispatch_kernel

__all__ = ["concat", "copy", "insert_slice", "pad", "slice_"]


def pad(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    x = ins[0]
    return [np.pad(x, list(zip(op["low"], op["high"])), constant_values=np.asarray(op["value"], dtype=x.dtype))]


def concat(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    return [np.concatenate(ins, axis=int(op["axis"]))]


def _sl(op: Mapping[str, Any]) -> tuple[slice, ...]:
    return tuple(slice(int(o), int(o) + (int(n) - 1) * int(s) + 1, int(s))
                 for o, n, s in zip(op["offsets"], op["sizes"], op["strides"]))


def slice_(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    return [ins[0][_sl(op)].reshape(op["out_shape"])]


def insert_slice(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    src = ins[0]
    if len(ins) > 1:
        out = ins[1].copy()
    else:
        out = np.full(op["out_shape"], 0 if op["dest_fill"] is None else op["dest_fill"], dtype=src.dtype)
    sl = _sl(op)
    out[sl] = src.reshape(out[sl].shape)
    return [out]


def copy(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    return [ins[0].reshape(op["out_shape"])]


dispatch_kernel("hb.pad", pad)
dispatch_kernel("hb.concat", concat)
dispatch_kernel("hb.slice", slice_)
dispatch_kernel("hb.insert_slice", insert_slice)
dispatch_kernel("hb.copy", copy)
