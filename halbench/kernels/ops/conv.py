"""``hb.conv2d`` and ``hb.depthwise_conv2d``: direct convolution as KH*KW shifted GEMMs in float32.

op attrs: ``layout`` (nchw, ngchw, nhwc_hwcf, nhwc_fhwc; depthwise: nchw, nhwc), ``strides``,
``dilations``, ``pads`` [top, left, bottom, right] and ``pad_value`` (a pad folded into the conv);
conv2d's ``precision``: input and filter are rounded to it first, as the GPU's implicit GEMM
stages them (halbench.precision).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from halbench.kernels.ops.common import dispatch_kernel
from halbench.precision import round_operand

__all__ = ["conv2d", "depthwise_conv2d", "windows"]


def _pad_nchw(x: np.ndarray, pads: list[int], value: float) -> np.ndarray:
    t, l, b, r = (int(p) for p in pads)
    if not (t or l or b or r):
        return x
    width = [(0, 0)] * (x.ndim - 2) + [(t, b), (l, r)]
    return np.pad(x, width, constant_values=np.asarray(value, dtype=x.dtype))


def windows(x: np.ndarray, kh: int, kw: int, strides: list[int], dil: list[int]):
    """Yield (i, j, slice of x over all output positions) for every filter tap (NC..HW)."""
    sh, sw = (int(s) for s in strides)
    dh, dw = (int(d) for d in dil)
    oh = (x.shape[-2] - dh * (kh - 1) - 1) // sh + 1
    ow = (x.shape[-1] - dw * (kw - 1) - 1) // sw + 1
    for i in range(kh):
        for j in range(kw):
            yield i, j, x[..., i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]


def conv2d(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    x, w = (round_operand(a, op.get("precision")) for a in ins)
    layout = op["layout"]
    if layout == "nchw":
        x, w = x[:, None], w[None]
    elif layout == "nhwc_hwcf":
        x, w = x.transpose(0, 3, 1, 2)[:, None], w.transpose(3, 2, 0, 1)[None]
    elif layout == "nhwc_fhwc":
        x, w = x.transpose(0, 3, 1, 2)[:, None], w.transpose(0, 3, 1, 2)[None]
    # now x: (N, G, C, H, W), w: (G, F, C, KH, KW)
    pad = op["pad_value"]
    if op.get("precision", "fp32") != "fp32":  # the pad value is staged like any input element
        pad = float(round_operand(np.array([pad], dtype=np.float32), op["precision"])[0])
    x = _pad_nchw(x, op["pads"], pad)
    out_t = np.result_type(x, w)
    if out_t == np.float16:  # f32 accumulation, rounded once (as the GPU kernels accumulate)
        x, w = x.astype(np.float32), w.astype(np.float32)
    n, g, c = x.shape[:3]
    f, kh, kw = w.shape[1], w.shape[3], w.shape[4]
    acc = None
    for i, j, xs in windows(x, kh, kw, op["strides"], op["dilations"]):
        oh, ow = xs.shape[-2:]
        # (G, F, C) @ (N, G, C, OH*OW) -> (N, G, F, OH*OW): one BLAS GEMM per (n, g)
        term = np.matmul(w[:, :, :, i, j], np.ascontiguousarray(xs).reshape(n, g, c, oh * ow))
        acc = term if acc is None else acc + term
    out = acc.reshape(n, g, f, oh, ow).astype(out_t, copy=False)
    if layout == "nchw":
        return [out[:, 0]]
    if layout == "ngchw":
        return [out]
    return [out[:, 0].transpose(0, 2, 3, 1)]


def depthwise_conv2d(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    x, w = ins
    if op["layout"] == "nhwc":
        x, w = x.transpose(0, 3, 1, 2), w.transpose(2, 0, 1)   # w: (KH, KW, C) -> (C, KH, KW)
    x = _pad_nchw(x, op["pads"], op["pad_value"])
    out_t = w.dtype
    if out_t == np.float16:  # f32 accumulation, rounded once (as the GPU kernels accumulate)
        x, w = x.astype(np.float32), w.astype(np.float32)
    kh, kw = w.shape[1], w.shape[2]
    acc = None
    for i, j, xs in windows(x, kh, kw, op["strides"], op["dilations"]):
        term = xs * w[None, :, i, j, None, None]
        acc = term if acc is None else acc + term
    out = acc.astype(out_t, copy=False)
    return [out.transpose(0, 2, 3, 1) if op["layout"] == "nhwc" else out]


dispatch_kernel("hb.conv2d", conv2d)
dispatch_kernel("hb.depthwise_conv2d", depthwise_conv2d)
