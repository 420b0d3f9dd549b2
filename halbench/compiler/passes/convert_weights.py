"""Constant GEMM operands converted to the staged type at compile time (``--precision
f16|bf16|tf32``).

Under f16 / bf16 every f32 GEMM (matmul, batch matmul, implicit-GEMM convolution) rounds both
operands to nearest even as it stages them (halbench.precision). Where an operand is a weight,
that rounding gives the same values on every run: this pass does it once, here, and hands the
GEMM a copy of the weight stored in f16 / bf16 (half the bytes). Every backend's GEMM widens a
16-bit operand exactly and stages it unchanged (rounding an f16 / bf16 value to f16 / bf16 is
the identity), so the results are bit-identical to the run-time rounding, on every backend; CUDA
sm_80+ then copies the weight into shared memory by cp.async, with no conversion
(kernels._plan_mma_sync).

Runs after ``compile._mark_precision`` (the roots carry their ``precision``) and after buffer
assignment: a converted weight is a weight of its own (``weight:NAME`` storage). A weight only
these GEMMs read is converted in place (same name, same position, so a ``--weights random``
weight keeps its seed); one also read elsewhere (an epilogue, another op, an output) keeps its f32
copy, and the GEMMs read a new weight ``NAME.f16``. Each converted weight records the f32 weight
it came from (``Weight.source``): the schedule declares a seeded-random one as "drawn as f32, then
rounded" (bundle manifest ``random_dtype``).

Under tf32 the staged type is f32 with 10 mantissa bits: the weight stays f32, its values rounded
to nearest even to tf32 (``Weight.rounded``, manifest ``round``), and the CUDA mma.sync GEMM
hands them to the tensor cores as they are, where it rounds an unrounded operand (cvt.rna) as it
reads each fragment: a third fewer instructions in the k loop of a convolution whose A is its
filter. Every other backend's tf32 rounding leaves a rounded value as it is (round_operand,
hb_round_tf32, __float_to_tf32). The rounding is the one halbench.precision documents for tf32
(nearest even, as every backend rounds); the mma.sync GEMM's cvt.rna rounds ties away from zero,
so its results differ from before in the last bit where a weight was exactly halfway.
"""

from __future__ import annotations

import numpy as np

from halbench.compiler.ir import Graph, TensorType, Weight

__all__ = ["CONVERTED", "convert_weights", "round_weight"]

#: The precisions whose staged type is a storage type of its own.
CONVERTED = ("f16", "bf16")
#: The precisions whose staged values are f32 with fewer mantissa bits: rounded, kept as f32.
ROUNDED = ("tf32",)
_GEMMS = ("matmul", "batch_matmul", "conv2d")


def round_weight(data: np.ndarray, dtype: str) -> np.ndarray:
    """f32 values rounded to nearest even to ``dtype`` (f16, bf16 as uint16 bits, tf32 as f32):
    what the GEMM's staging does to them at run time (the runtime's rule for random weights, one
    copy)."""
    from halbench.bundle.weights import round_to

    return round_to(data, dtype)


def convert_weights(g: Graph) -> Graph:
    """Give every f16 / bf16-marked GEMM root's f32 weight operand a copy in that type, and every
    tf32-marked one's a copy rounded to tf32."""
    # (dispatch, operand index, value, weight name) of each f32 weight operand of a marked root
    cands: list[tuple[int, int, str, str]] = []
    for i, d in enumerate(g.ops):
        root, ep = d.attrs.get("root"), d.attrs.get("epilogue")
        if root is None or root.kind not in _GEMMS or root.attrs.get("precision") not in CONVERTED + ROUNDED:
            continue
        for k, v in enumerate(root.inputs[:2]):
            base = g.root(v)
            w = g.weights.get(base)
            if w is None or w.data is None or w.type.dtype != "f32" or w.rounded is not None:
                continue
            if ep is not None and v in ep.inputs:
                continue  # the epilogue reads it as f32 from the same binding: leave it
            cands.append((i, k, v, base))
    if not cands:
        return g
    g = g.copy()  # a pure function, as every pass (the ops are cloned, the weights replaced)
    gemm_reads: dict[tuple[str, str], set[tuple[int, str]]] = {}  # (weight, precision) -> reads
    for i, k, v, base in cands:
        gemm_reads.setdefault((base, g.ops[i].attrs["root"].attrs["precision"]), set()).add((i, v))
    # who else reads a weight: other dispatches' inputs, function outputs, other precisions
    other: dict[str, int] = {}
    converted_reads = {(i, v) for i, _, v, _ in cands}
    for i, d in enumerate(g.ops):
        for v in dict.fromkeys(d.inputs):
            if (i, v) not in converted_reads:
                base = g.root(v)
                other[base] = other.get(base, 0) + 1
    for _, v in g.outputs:
        base = g.root(v)
        other[base] = other.get(base, 0) + 1
    precisions: dict[str, set[str]] = {}
    for base, p in gemm_reads:
        precisions.setdefault(base, set()).add(p)

    renames: dict[tuple[int, str], str] = {}
    for (base, p), reads in gemm_reads.items():
        w = g.weights[base]
        data = round_weight(np.asarray(w.data), p)
        kept = p in ROUNDED  # tf32: still f32, its values rounded
        new = Weight(base, TensorType(w.type.shape, "f32" if kept else p), data, source=w,
                     rounded=p if kept else None)
        if not other.get(base) and len(precisions[base]) == 1:
            g.weights[base] = new  # only these GEMMs read it: converted where it is
            for v in list(g.types):
                if g.root(v) == base:
                    g.types[v] = TensorType(g.types[v].shape, new.type.dtype)
            continue
        name = _fresh(g, f"{base}.{p}")
        new.name = name
        g.weights[name] = new
        g.types[name] = new.type
        g.storage[name] = (f"weight:{name}", 0)
        for i, v in reads:
            if v == base:
                renames[(i, v)] = name
            else:  # a view of the weight (a reshape): the same view of the copy
                view = _fresh(g, f"{v}.{p}")
                g.views[view] = name
                g.types[view] = TensorType(g.types[v].shape, new.type.dtype)
                g.storage[view] = (f"weight:{name}", 0)
                renames[(i, v)] = view
    for (i, v), new_v in renames.items():
        d = g.ops[i]
        root = d.attrs["root"]
        d.inputs = [new_v if x == v else x for x in d.inputs]
        root.inputs = [new_v if x == v else x for x in root.inputs]
    return g


def _fresh(g: Graph, name: str) -> str:
    while name in g.types or name in g.weights:
        name += "_"
    return name
