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

__all__ = ["DERIVE_LIMITS", "RANDOM_INIT", "RANDOM_SEED", "TRANSFORMS", "derive_shape", "derive_values",
           "f32_to_bf16", "random_weight", "randomize_onnx", "round_to", "transform_weight",
           "transformed_shape", "weight_array", "weight_digest", "winograd_filter"]

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
    """float32 values rounded to nearest even to ``dtype`` (f16, or bf16 as uint16 bits; tf32 as
    float32 whose low 13 mantissa bits are zero); beyond f16's range is inf, as the GPUs convert."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "bf16":
        return f32_to_bf16(x)
    if dtype == "tf32":
        from halbench.precision import round_operand

        return round_operand(x, "tf32")
    if dtype != "f16":
        raise UserError(f"a weight cannot be rounded to {dtype}; f16, bf16 and tf32 can")
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


# -- derivation trees -----------------------------------------------------------------------------
# A weight the compiler computed from seeded-random ones (a Gemm weight it transposed, Q / K / V
# weights it concatenated) is declared by the tree of how it was made (manifest ``derive``), so
# that a --weights random bundle stores none of it. Nodes (JSON objects):
#   {"op": "random", "seed": S, "dtype": D, "shape": [...]}   random_weight(D, shape, S, init)
#   {"op": "map", "dims": [...], "axes": [...], "of": [x]}    out[i] = x[i[axes[0]], i[axes[1]], ...]
#        (a transpose that may add dims, broadcasting along them: the compiler's folded copies)
#   {"op": "concat", "axis": A, "of": [x, y, ...]}            numpy.concatenate(..., axis=A)
# The values are the compiler's bit for bit: these move and join elements and compute nothing.
# No op makes less than it reads, so no value on the way is larger than the declared weight,
# whose size the manifest bounds.

#: Caps on an untrusted tree: nesting depth, nodes in all, and parts of one concat.
DERIVE_LIMITS = {"depth": 6, "nodes": 256, "parts": 64}


def derive_shape(node: Mapping[str, Any]) -> tuple[tuple[int, ...], str]:
    """(shape, element type) of a derivation tree, checking it on the way (UserError naming the
    problem): known ops, well-formed maps and concats, and the caps of DERIVE_LIMITS."""
    count = [0]

    def walk(n: Any, depth: int) -> tuple[tuple[int, ...], str]:
        count[0] += 1
        if not isinstance(n, Mapping):
            raise UserError(f"a weight derivation node must be an object, not {type(n).__name__}")
        if depth > DERIVE_LIMITS["depth"] or count[0] > DERIVE_LIMITS["nodes"]:
            raise UserError(f"a weight derivation nests deeper than {DERIVE_LIMITS['depth']} or has more than "
                            f"{DERIVE_LIMITS['nodes']} nodes")
        op = n.get("op")
        if op == "random":
            shape, seed, dtype = n.get("shape"), n.get("seed"), n.get("dtype")
            if (not isinstance(shape, list) or len(shape) > 8 or not all(type(x) is int and x >= 0 for x in shape)
                    or type(seed) is not int or not 0 <= seed < 1 << 63 or dtype not in ("f16", "bf16", "f32", "f64")
                    or set(n) != {"op", "seed", "dtype", "shape"}):
                raise UserError("a weight derivation's random leaf needs exactly a seed (0 <= seed < 2^63), a float "
                                "dtype and a shape of at most 8 non-negative dims")
            return tuple(shape), dtype
        parts = n.get("of")
        if not isinstance(parts, list) or not parts or len(parts) > DERIVE_LIMITS["parts"]:
            raise UserError(f"weight derivation '{op}' needs 1 to {DERIVE_LIMITS['parts']} parts in 'of'")
        shapes = [walk(x, depth + 1) for x in parts]
        dtypes = {d for _, d in shapes}
        if len(dtypes) != 1:
            raise UserError(f"weight derivation '{op}' joins parts of types {sorted(dtypes)}")
        keys = {"map": {"op", "dims", "axes", "of"}, "concat": {"op", "axis", "of"}}.get(op)
        if keys is not None and set(n) != keys:
            raise UserError(f"weight derivation '{op}' takes exactly the keys {sorted(keys)}, not {sorted(n)}")
        ints = [n["axis"]] if op == "concat" else [*n["dims"], *n["axes"]] if op == "map" else []
        if op == "map" and not (isinstance(n["dims"], list) and isinstance(n["axes"], list) and len(n["dims"]) <= 8):
            raise UserError("weight derivation 'map' needs lists 'dims' (at most 8) and 'axes'")
        if not all(type(x) is int and 0 <= x <= 1 << 40 for x in ints):
            raise UserError(f"weight derivation '{op}': its dims, axes and axis are non-negative integers")
        if op == "map":
            dims, axes = tuple(n["dims"]), list(n["axes"])
            if len(parts) != 1 or len(set(axes)) != len(axes) or any(not 0 <= a < len(dims) for a in axes):
                raise UserError(f"weight derivation 'map': axes {axes} must be distinct dims of {list(dims)}, "
                                "of one part")
            want = tuple(dims[a] for a in axes)
            if shapes[0][0] != want:
                raise UserError(f"weight derivation 'map': its part is {list(shapes[0][0])}, axes {axes} of "
                                f"{list(dims)} need {list(want)}")
            return dims, shapes[0][1]
        if op == "concat":
            axis = int(n["axis"])
            first = shapes[0][0]
            if not 0 <= axis < len(first) or any(len(s) != len(first) or s[:axis] + s[axis + 1:] !=
                                                 first[:axis] + first[axis + 1:] for s, _ in shapes):
                raise UserError(f"weight derivation 'concat' on axis {axis}: parts "
                                f"{[list(s) for s, _ in shapes]} do not fit")
            return first[:axis] + (sum(s[axis] for s, _ in shapes),) + first[axis + 1:], shapes[0][1]
        raise UserError(f"unknown weight derivation op {op!r}; known: random, map, concat")

    return walk(node, 0)


def derive_values(node: Mapping[str, Any], init: Mapping[str, Any] | None = None) -> np.ndarray:
    """The values a derivation tree makes (call derive_shape first on an untrusted one)."""
    op = node["op"]
    if op == "random":
        return random_weight(str(node["dtype"]), tuple(node["shape"]), int(node["seed"]), init)
    parts = [derive_values(x, init) for x in node["of"]]
    if op == "concat":
        return np.concatenate(parts, axis=int(node["axis"]))
    dims, axes = [int(x) for x in node["dims"]], [int(x) for x in node["axes"]]
    x = np.transpose(parts[0], sorted(range(len(axes)), key=lambda j: axes[j]))
    x = x.reshape([dims[k] if k in axes else 1 for k in range(len(dims))])
    return np.ascontiguousarray(np.broadcast_to(x, dims))


def weight_array(decl: WeightDecl, data: bytes | None = None) -> np.ndarray:
    """The weight's values: ``data`` (the member's bytes) for ``file``, generated for ``random``
    (drawn in ``random_shape`` and put through ``transform`` where the weight declares one, then
    rounded to ``dtype`` where it was drawn as ``random_dtype``), then rounded to ``round`` where
    the weight declares one."""
    values = _made(decl, data)
    # tf32: f32 values rounded to 10 mantissa bits, which the GEMMs reading them take as they are
    return round_to(values, decl.round) if decl.round is not None else values


def _made(decl: WeightDecl, data: bytes | None) -> np.ndarray:
    if decl.storage == "random":
        seed = int(decl.seed or 0)
        if decl.derive is not None:
            values = derive_values(decl.derive, decl.init)
            return round_to(values, decl.dtype) if decl.random_dtype is not None else values
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
    bundle stays small), declares those it made of them by moving and joining elements (a
    transposed Gemm weight, merged Q / K / V weights) by their derivation tree, stores the rest
    it computed from them, and peers and the onnxruntime reference run the model randomized the same way: every runtime
    computes the same function. Returns weight_digest -> (dtype, seed) of the new values.

    A BatchNormalization's variance keeps its values: random ones are negative half the time, and
    the model's every output would be NaN (its square root), which any reference matches."""
    from onnx import numpy_helper

    variances = {n.input[4] for n in model.graph.node
                 if n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx") and len(n.input) > 4}
    out: dict[str, tuple[str, int]] = {}
    for i, t in enumerate(model.graph.initializer):
        dtype = _ONNX_FLOATS.get(t.data_type)
        n = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
        if dtype is None or n <= 1 or t.name in variances:
            continue
        values = random_weight(dtype, tuple(t.dims), seed + i, RANDOM_INIT)
        t.CopyFrom(numpy_helper.from_array(values, t.name))
        out[weight_digest(values)] = (dtype, seed + i)
    return out
