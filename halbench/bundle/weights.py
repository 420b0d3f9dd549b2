"""Weights as arrays: from a member's raw bytes, or generated from a seed.

:func:`random_weight` is THE definition of a seeded-random weight: the runtime and the
compiler's local reference both call it, so they see the same values bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from halbench.dtypes import to_numpy
from halbench.errors import UserError

if TYPE_CHECKING:  # the schema calls transformed_shape: no import of the manifest at run time
    from halbench.bundle.manifest import WeightDecl

__all__ = ["RANDOM_INIT", "RANDOM_SEED", "TRANSFORMS", "f32_to_bf16", "random_weight", "randomize_onnx",
           "round_to", "transform_weight", "transformed_shape", "weight_array", "weight_digest",
           "winograd_filter"]

#: How ``weights="random"`` initialises float weights (bundle-format.md: seeded normal).
RANDOM_INIT = {"distribution": "normal", "scale": 0.02}
#: The seed of ``weights="random"`` unless a compile names another.
RANDOM_SEED = 1234

# ONNX TensorProto element types randomize_onnx replaces (FLOAT, FLOAT16, DOUBLE).
_ONNX_FLOATS = {1: "f32", 10: "f16", 11: "f64"}


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounding to nearest even, as hardware converts."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():  # rounding could carry a NaN's payload into infinity
        out[nan] = np.uint16(0x7FC0)
    return out


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to nearest even to ``dtype`` (f16, or bf16 as uint16 bits); beyond
    f16's range is inf, as the GPUs convert."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "bf16":
        return f32_to_bf16(x)
    if dtype != "f16":
        raise UserError(f"a weight cannot be rounded to {dtype}; f16 and bf16 can")
    with np.errstate(over="ignore"):
        return x.astype(np.float16)


def random_weight(dtype: str, shape: tuple[int, ...] | list[int], seed: int,
                  init: Mapping[str, Any] | None = None) -> np.ndarray:
    """The seeded-random weight ``numpy.random.default_rng(seed)`` gives for ``init``.

    ``init``: ``{"distribution": "normal", "scale": s}`` (default scale 0.02, mean 0) or
    ``{"distribution": "uniform", "low": a, "high": b}`` (defaults -1, 1). Values are drawn in
    float64 and then converted: floats round to the dtype (bf16 to nearest even), integers
    round to nearest and saturate to the dtype's range, i1 is ``value > 0``.
    """
    init = dict(init or {})
    shape = tuple(int(s) for s in shape)
    rng = np.random.default_rng(int(seed))
    dist = init.get("distribution", "normal")
    if dist == "normal":
        values = rng.standard_normal(shape) * float(init.get("scale", 0.02))
    elif dist == "uniform":
        values = rng.uniform(float(init.get("low", -1.0)), float(init.get("high", 1.0)), shape)
    else:
        raise UserError(f"unknown random weight distribution {dist!r}; known: normal, uniform")
    if dtype == "bf16":
        return f32_to_bf16(values.astype(np.float32))
    dt = to_numpy(dtype)
    if dt == np.bool_:
        return values > 0
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.clip(np.rint(values), info.min, info.max).astype(dt)
    return values.astype(dt)


#: Winograd F(2x2, 3x3) filter transform G (4x3): U = G g G^T (Lavin and Gray, 2015).
_WINOGRAD_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def winograd_filter(w: np.ndarray) -> np.ndarray:
    """A 3x3 convolution filter [Co, C, 3, 3] as Winograd F(2x2, 3x3) needs it: [16, Co, C], the
    16 elements of G g G^T (row-major over the 4x4 tile) leading, computed in float64 and
    rounded once to the filter's type. THE definition: the compiler's pass (which stores or
    declares it) and the runtime (which regenerates a seeded-random one) both call it."""
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise UserError(f"a Winograd F(2x2, 3x3) filter transform needs a [Co, C, 3, 3] filter, not {list(w.shape)}")
    u = np.einsum("ia,ocab,jb->ijoc", _WINOGRAD_G, w.astype(np.float64), _WINOGRAD_G)
    return np.ascontiguousarray(u.reshape(16, w.shape[0], w.shape[1]).astype(w.dtype))


#: Weight transforms a bundle may declare (a weight derived from a seeded-random one): name ->
#: (function, its output shape from the source shape, or None where the source does not fit).
TRANSFORMS = {
    "winograd-f2x3": (winograd_filter,
                      lambda s: (16, s[0], s[1]) if len(s) == 4 and tuple(s[2:]) == (3, 3) else None),
}


def transformed_shape(transform: str, source_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape ``transform`` makes of a ``source_shape`` weight (None: it takes no such weight)."""
    if transform not in TRANSFORMS:
        raise UserError(f"unknown weight transform {transform!r}; known: {', '.join(TRANSFORMS)}")
    return TRANSFORMS[transform][1](tuple(int(x) for x in source_shape))


def transform_weight(transform: str, w: np.ndarray) -> np.ndarray:
    if transformed_shape(transform, w.shape) is None:
        raise UserError(f"weight transform {transform} takes no {list(w.shape)} weight")
    return TRANSFORMS[transform][0](w)


def weight_array(decl: WeightDecl, data: bytes | None = None) -> np.ndarray:
    """The weight's values: ``data`` (the member's bytes) for ``file``, generated for ``random``
    (drawn in ``random_shape`` and put through ``transform`` where the weight declares one, then
    rounded to ``dtype`` where it was drawn as ``random_dtype``)."""
    if decl.storage == "random":
        seed = int(decl.seed or 0)
        if decl.transform is not None:
            drawn = random_weight(decl.random_dtype or decl.dtype, decl.random_shape or decl.shape, seed,
                                  decl.init)
            values = transform_weight(decl.transform, drawn)
            return round_to(values, decl.dtype) if decl.random_dtype is not None else values
        if decl.random_dtype is not None:  # drawn as f32, then rounded (a --precision weight)
            return round_to(random_weight(decl.random_dtype, decl.shape, seed, decl.init), decl.dtype)
        return random_weight(decl.dtype, decl.shape, seed, decl.init)
    if data is None:
        raise UserError(f"weight '{decl.name}' is stored in member {decl.member}, and no data was given")
    if len(data) != decl.nbytes:
        raise UserError(f"weight '{decl.name}' ({'x'.join(map(str, decl.shape))}x{decl.dtype}) needs "
                        f"{decl.nbytes} B, but member {decl.member} has {len(data)} B")
    dt = to_numpy(decl.dtype).newbyteorder("<")  # members are little-endian by contract
    return np.frombuffer(data, dtype=dt).reshape(decl.shape).astype(dt.newbyteorder("="), copy=False)


def weight_digest(a: np.ndarray) -> str:
    """What identifies a weight's values whatever its shape: dtype, element count and bytes."""
    import hashlib

    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}:{a.size}:".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def randomize_onnx(model: Any, seed: int) -> dict[str, tuple[str, int]]:
    """Give an ONNX model's float initializers (more than one element) seeded-random values, in
    place: the i-th initializer of the graph becomes ``random_weight(dtype, shape, seed + i)``.

    This is THE definition of ``weights: random`` for an ONNX model: the compiler declares each
    bundle weight whose values are one of these initializers as random with that seed (the
    bundle stays small), stores the weights it derived from them (a transposed Gemm weight), and
    peers and the onnxruntime reference run the model randomized the same way: every runtime
    computes the same function. Returns weight_digest -> (dtype, seed) of the new values."""
    from onnx import numpy_helper

    out: dict[str, tuple[str, int]] = {}
    for i, t in enumerate(model.graph.initializer):
        dtype = _ONNX_FLOATS.get(t.data_type)
        n = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
        if dtype is None or n <= 1:
            continue
        values = random_weight(dtype, tuple(t.dims), seed + i, RANDOM_INIT)
        t.CopyFrom(numpy_helper.from_array(values, t.name))
        out[weight_digest(values)] = (dtype, seed + i)
    return out
