"""``hb.pool``: max or sum pooling over KH x KW windows (average = sum, then a divide epilogue).

op attrs: ``mode`` (max | sum), ``layout`` (nchw | nhwc), ``kernel`` [KH, KW], ``strides``,
``dilations``, ``pads`` [top, left, bottom, right], ``pad_value``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from halbench.kernels.ops.common import dispatch_kernel
from halbench.kernels.ops.conv import _pad_nchw, windows

__all__ = ["pool"]


def pool(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    x = ins[0]
    if op["layout"] == "nhwc":
        x = x.transpose(0, 3, 1, 2)
    x = _pad_nchw(x, op["pads"], op["pad_value"])
    kh, kw = (int(k) for k in op["kernel"])
    combine = np.maximum if op["mode"] == "max" else np.add
    acc = None
    for _, _, xs in windows(x, kh, kw, op["strides"], op["dilations"]):
        acc = xs.copy() if acc is None else combine(acc, xs)
    if "out_shape" in op:
        # ceil_mode: a last window that would start in the end padding is dropped (the output
        # is what the importer computed, ONNX's "reduce by one"), while the padding is there
        out = [int(s) for s in op["out_shape"]]
        oh, ow = (out[1], out[2]) if op["layout"] == "nhwc" else (out[-2], out[-1])
        acc = acc[..., :oh, :ow]
    return [acc.transpose(0, 2, 3, 1) if op["layout"] == "nhwc" else acc]


dispatch_kernel("hb.pool", pool)
