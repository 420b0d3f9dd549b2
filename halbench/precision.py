"""The ``--precision`` of a compile: what the operands of f32 GEMMs are rounded to.

``fp32`` (the default) is exact IEEE single precision everywhere. ``tf32``, ``f16`` and ``bf16``
round the two operands of every f32 matmul, batch matmul and (implicit-GEMM) convolution to that
format as they are staged, then multiply on matrix units where the target has them, accumulating
in f32; inputs, outputs, epilogues and every other op stay f32. The NumPy kernels of the local
backend round the same operands (:func:`round_operand`), so ``local-sync`` computes what the GPU
does up to the order of the f32 additions.

The correctness check's tolerance follows the precision (:func:`tolerance`): the runner's error
is the relative L2 norm of the output error (``bench/reference.compare_outputs``). Rounding both
operands to ``p`` mantissa bits gives each product a relative error of about ``2**-p``; over a
network's layers the output's L2 error grows to a few times that (measured on MobileNetV2,
ResNet-50 and MiniLM against onnxruntime: tests/compiler/test_precision.py), so the tolerance is
an order of magnitude above the unit roundoff of the format.

Shared by the compiler (codegen), the local kernels and the runner; imports no GPU API.
"""

from __future__ import annotations

import numpy as np

from halbench.errors import UserError

__all__ = ["DEFAULT", "PRECISIONS", "TOLERANCE", "check_precision", "round_operand", "tolerance"]

DEFAULT = "fp32"
#: every precision, exact first
PRECISIONS = ("fp32", "tf32", "f16", "bf16")
#: the relative (L2) output error each precision's correctness check allows, at least: unit
#: roundoffs 2**-24 (fp32, the suite's own tolerance), 2**-11 (tf32 and f16), 2**-8 (bf16)
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "f16": 1e-2, "bf16": 5e-2}


def check_precision(value: str | None, where: str = "--precision") -> str:
    """``value`` if it names a precision (None: the default), else a one-line UserError."""
    if value is None:
        return DEFAULT
    if value not in PRECISIONS:
        raise UserError(f"{where} {value!r} is unknown; use one of {', '.join(PRECISIONS)} "
                        f"(fp32 is exact, the others round GEMM operands for matrix units)")
    return value


def tolerance(precision: str | None, base: float = TOLERANCE["fp32"]) -> float:
    """The correctness tolerance of a run at ``precision``: ``base`` (the suite's setting) or the
    precision's own, whichever is looser."""
    return max(float(base), TOLERANCE[check_precision(precision)])


def round_operand(x: np.ndarray, precision: str | None) -> np.ndarray:
    """``x`` (float32) rounded to ``precision`` and back to float32, round-to-nearest-even:
    what a GEMM operand becomes when it is staged for the matrix units. fp32 returns ``x``.
    An operand already of the staged type (a weight the compiler converted: float16, or bf16 as
    uint16 bits) is widened to float32 exactly."""
    p = check_precision(precision)
    if p == "f16" and x.dtype == np.float16:
        return x.astype(np.float32)
    if p == "bf16" and x.dtype == np.uint16:
        return (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if p == "fp32" or x.dtype != np.float32:
        return x
    if p == "f16":  # beyond f16's range is inf, as on the GPU (and in torch.autocast)
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    # tf32 keeps 10 explicit mantissa bits (drops 13 of f32's 23), bf16 keeps 7 (drops 16):
    # round to nearest even on the bits; the exponent is f32's, so only a value within half an
    # ulp of f32's largest becomes inf (as on the GPU: kernels.round_expr).
    # In 32 bits: a finite value plus at most half an ulp stays below 2**32 (inf and NaN, which
    # could wrap, keep their bits).
    drop = 13 if p == "tf32" else 16
    u = np.ascontiguousarray(x).view(np.uint32)
    finite = (u & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    r = (u + np.uint32((1 << (drop - 1)) - 1) + ((u >> np.uint32(drop)) & np.uint32(1))) & np.uint32(
        0xFFFFFFFF ^ ((1 << drop) - 1))
    return np.where(finite, r, u).view(np.float32).reshape(x.shape)
