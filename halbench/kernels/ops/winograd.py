"""``hb.winograd_input`` / ``hb.winograd_output``: the transforms of Winograd F(2x2, 3x3)
(compiler/passes/winograd.py) in NumPy.

``winograd_input``: x [N, C, H, W] -> V [16, C, P], V[4i + j, c, p] = (B^T d B)[i, j] of the 4x4
tile d of x (padding 1, zeros outside) whose top-left output pixel is (2 th, 2 tw), p = (n TH +
th) TW + tw. ``winograd_output``: M [16, Co, P] -> Y [N, Co, H, W], the 2x2 tile (A^T m A) of
each p, cut at H and W. op attrs: ``tiles`` [TH, TW], ``out_shape``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from halbench.errors import UserError
from halbench.kernels.ops.common import dispatch_kernel

__all__ = ["winograd_input", "winograd_output"]

_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float32)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float32)


def _tiles(op: Mapping[str, Any], h: int, w: int) -> tuple[int, int]:
    """The 2x2 tiles an H x W image takes; a bundle whose ``tiles`` say otherwise is refused
    (nothing is sized from the attribute itself)."""
    tiles = (-(-h // 2), -(-w // 2))
    if [int(t) for t in op.get("tiles", ())] != list(tiles):
        raise UserError(f"a Winograd transform's tiles {list(op.get('tiles', ()))} do not fit its {h}x{w} image "
                        f"(it takes {list(tiles)}): the bundle is damaged; compile it again")
    return tiles


def winograd_input(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    x = ins[0]
    n, c, h, w = x.shape
    th, tw = _tiles(op, h, w)
    xp = np.zeros((n, c, 2 * th + 2, 2 * tw + 2), dtype=x.dtype)
    xp[:, :, 1:h + 1, 1:w + 1] = x
    # d[n, c, th, tw, a, b] = xp[n, c, 2 th + a, 2 tw + b]
    s = xp.strides
    d = np.lib.stride_tricks.as_strided(xp, (n, c, th, tw, 4, 4), (s[0], s[1], 2 * s[2], 2 * s[3], s[2], s[3]))
    v = np.einsum("ia,nctuab,jb->ijcntu", _BT, d, _BT, optimize=True)
    return [np.ascontiguousarray(v.reshape(16, c, n * th * tw), dtype=x.dtype)]


def winograd_output(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    m = ins[0]
    n, co, h, w = (int(s) for s in op["out_shape"])
    th, tw = _tiles(op, h, w)
    if m.shape != (16, co, n * th * tw):
        raise UserError(f"a Winograd output transform reads {list(m.shape)}, not the [16, {co}, {n * th * tw}] "
                        f"its {n}x{co}x{h}x{w} output takes: the bundle is damaged; compile it again")
    mt = m.reshape(4, 4, co, n, th, tw)
    y = np.einsum("ri,ijkntu,sj->nktrus", _AT, mt, _AT, optimize=True).reshape(n, co, 2 * th, 2 * tw)
    return [np.ascontiguousarray(y[:, :, :h, :w], dtype=m.dtype)]


dispatch_kernel("hb.winograd_input", winograd_input)
dispatch_kernel("hb.winograd_output", winograd_output)
