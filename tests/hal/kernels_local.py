"""The test-kernel contract (see backends.py) as NumPy kernels for local-sync / local-task.

Each kernel computes exactly the workgroups in ``wg_range`` and writes only what they own, so
local-task may split a dispatch anywhere. reduce_sum reproduces the GPU kernels' shared-memory
tree (stride 128, 64, ..., 1 in float32), so its results match theirs bit for bit.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from halbench.errors import UserError
from halbench.hal import EntryPoint, ExecutableBinary
from halbench.kernels.format import local_binary, register_kernel

__all__ = ["build"]

Views = list[np.ndarray]


def _span(wg_range: range, size: int, n: int) -> slice:
    """The elements the workgroups in ``wg_range`` own: [start * size, stop * size) clipped to n."""
    lo = min(wg_range.start * size, n)
    return slice(lo, max(lo, min(wg_range.stop * size, n)))


def _f32(view: np.ndarray) -> np.ndarray:
    return view[: view.nbytes // 4 * 4].view(np.float32)


def scale_add(b: Views, c: np.ndarray, attrs: Mapping[str, Any], wg: tuple[int, int, int], r: range) -> None:
    n = int(c[0])
    alpha = c[1:2].view(np.float32)[0]
    s = _span(r, 64, n)
    _f32(b[2])[s] = alpha * _f32(b[0])[s] + _f32(b[1])[s]


def reduce_sum(b: Views, c: np.ndarray, attrs: Mapping[str, Any], wg: tuple[int, int, int], r: range) -> None:
    n = int(c[0])
    x = _f32(b[0])
    tile = np.zeros((len(r), 256), dtype=np.float32)  # threads past n contribute 0, as on a GPU
    s = _span(r, 256, n)
    tile.reshape(-1)[: s.stop - s.start] = x[s]
    width = 256
    while width > 1:  # sh[t] += sh[t + width / 2] for t < width / 2
        width //= 2
        tile[:, :width] += tile[:, width:2 * width]
    _f32(b[1])[r.start:r.stop] = tile[:, 0]


def many_bindings(b: Views, c: np.ndarray, attrs: Mapping[str, Any], wg: tuple[int, int, int],
                  r: range) -> None:
    n = int(c[0])
    s = _span(r, 64, n)
    acc = np.zeros(s.stop - s.start, dtype=np.float32)
    for k in range(7):
        acc += np.float32(k + 1) * _f32(b[k])[s]
    _f32(b[7])[s] = acc


def add_one(b: Views, c: np.ndarray, attrs: Mapping[str, Any], wg: tuple[int, int, int], r: range) -> None:
    n = int(c[0])
    b[0][: b[0].nbytes // 4 * 4].view(np.uint32)[_span(r, 64, n)] += np.uint32(1)


def noop(b: Views, c: np.ndarray, attrs: Mapping[str, Any], wg: tuple[int, int, int], r: range) -> None:
    pass


# kernel -> (function, bindings, constants, workgroup size), as the contract table says.
_KERNELS = {
    "scale_add": (scale_add, 3, 2, (64, 1, 1)),
    "reduce_sum": (reduce_sum, 2, 1, (256, 1, 1)),
    "many_bindings": (many_bindings, 8, 1, (64, 1, 1)),
    "add_one": (add_one, 1, 1, (64, 1, 1)),
    "noop": (noop, 1, 0, (1, 1, 1)),
}

for _name, (_fn, *_) in _KERNELS.items():
    register_kernel(f"test.{_name}", _fn)


def build(kernel: str, fmt: str) -> ExecutableBinary:
    if fmt != "local-v1":
        raise UserError(f"kernels_local builds local-v1, not {fmt}")
    if kernel not in _KERNELS:
        raise UserError(f"unknown test kernel '{kernel}'; known: {', '.join(_KERNELS)}")
    _, bindings, constants, wg_size = _KERNELS[kernel]
    ep = EntryPoint("main", bindings, constants, wg_size)
    return local_binary({"main": (f"test.{kernel}", {}, ep)})
