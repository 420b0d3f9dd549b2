"""``hb.matmul`` and ``hb.batch_matmul``: float32 GEMM (op attrs: ``transpose_a``, ``transpose_b``,
and ``precision``: the operands are rounded to it first, as the GPU kernels stage them); f16
operands accumulate in f32 and the result is rounded once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from halbench.kernels.ops.common import dispatch_kernel
from halbench.precision import round_operand

__all__ = ["matmul"]


def matmul(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    a, b = (round_operand(x, op.get("precision")) for x in ins)
    if op.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if op.get("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    out_t = np.result_type(a, b)
    if out_t == np.float16:  # f32 accumulation, rounded once (as the GPU GEMMs accumulate)
        a, b = a.astype(np.float32), b.astype(np.float32)
    return [np.matmul(a, b).astype(out_t, copy=False)]


dispatch_kernel("hb.matmul", matmul)
dispatch_kernel("hb.batch_matmul", matmul)
