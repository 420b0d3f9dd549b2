"""``hb.generic``: a fused element-wise / reduction body evaluated with NumPy.

The attrs are the compiler's generic op as JSON (see ``halbench/compiler/ir.py``): iteration
``dims`` and ``iterators``, one indexing map per operand (``[["d", i] | ["c", k], ...]``, or
``null`` for a tensor only read by ``extract``), a ``body`` of scalar nodes in SSA order, and per
output its reduction (``add``/``max``/``min``/``mul`` or null) and initial value. Every node is
evaluated over the whole iteration space by broadcasting, in the node's own element type, so
float32 stays float32 throughout (exactly what a GPU kernel computes per element).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from halbench.errors import UserError

__all__ = ["BINARY", "UNARY", "eval_generic", "operand_view"]

_DT = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i1": np.bool_, "i8": np.int8,
       "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16,
       "u32": np.uint32, "u64": np.uint64, "bf16": np.float32}


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x)


def _div_i(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # arith.divsi truncates toward zero (C semantics), NumPy's // floors.
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _rem_i(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a - _div_i(a, b) * b


BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "addf": np.add, "subf": np.subtract, "mulf": np.multiply, "divf": np.divide, "remf": np.fmod,
    "maximumf": np.maximum, "minimumf": np.minimum, "maxnumf": np.fmax, "minnumf": np.fmin,
    "powf": np.power, "atan2": np.arctan2, "copysign": np.copysign,
    "addi": np.add, "subi": np.subtract, "muli": np.multiply, "divsi": _div_i, "divui": np.floor_divide,
    "remsi": _rem_i, "remui": np.remainder, "floordivsi": np.floor_divide,
    "ceildivsi": lambda a, b: -np.floor_divide(-a, b), "andi": np.bitwise_and, "ori": np.bitwise_or,
    "xori": np.bitwise_xor, "shli": np.left_shift, "shrsi": np.right_shift, "shrui": np.right_shift,
    "maxsi": np.maximum, "minsi": np.minimum, "maxui": np.maximum, "minui": np.minimum,
    "fpowi": np.power,
}
UNARY: dict[str, Callable[[Any], Any]] = {
    "negf": np.negative, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log,
    "log2": np.log2, "log1p": np.log1p, "tanh": np.tanh, "erf": _erf, "sqrt": np.sqrt,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)), "absf": np.abs, "absi": np.abs, "ceil": np.ceil,
    "floor": np.floor, "round": lambda x: np.copysign(np.floor(np.abs(x) + 0.5), x),
    "roundeven": np.rint, "sin": np.sin, "cos": np.cos, "atan": np.arctan, "tan": np.tan, "acos": np.arccos,
    "asin": np.arcsin, "acosh": np.arccosh, "asinh": np.arcsinh, "atanh": np.arctanh, "cosh": np.cosh,
    "sinh": np.sinh,
}
_CASTS = {"sitofp", "uitofp", "fptosi", "fptoui", "extf", "truncf", "extsi", "extui", "trunci",
          "index_cast", "index_castui"}
_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "oeq": np.equal, "ogt": np.greater, "oge": np.greater_equal, "olt": np.less, "ole": np.less_equal,
    "one": lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b), "ord": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
    "ueq": lambda a, b: (a == b) | np.isnan(a) | np.isnan(b), "ugt": lambda a, b: ~(a <= b),
    "uge": lambda a, b: ~(a < b), "ult": lambda a, b: ~(a >= b), "ule": lambda a, b: ~(a > b),
    "une": np.not_equal, "uno": lambda a, b: np.isnan(a) | np.isnan(b),
    "eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal, "sgt": np.greater,
    "sge": np.greater_equal, "ult_i": np.less, "ule_i": np.less_equal, "ugt_i": np.greater,
    "uge_i": np.greater_equal,
}
_REDUCE = {"add": np.add, "max": np.maximum, "min": np.minimum, "mul": np.multiply}
#: arith's unsigned integer ops: on the operands' bits read as unsigned.
_UNSIGNED_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "divui": np.floor_divide, "remui": np.remainder, "shrui": np.right_shift, "maxui": np.maximum,
    "minui": np.minimum,
}


def _unsigned(x: Any) -> Any:
    """Signed integer data as the unsigned type of its width (same bits); others unchanged."""
    a = np.asarray(x)
    if a.dtype.kind == "i":
        return a.view(a.dtype.str.replace("i", "u"))
    return x


def operand_view(a: np.ndarray, m: Sequence[Sequence[Any]], rank: int) -> np.ndarray:
    """``a`` laid out over the iteration space: axis ``d`` of the result is iteration dim ``d``
    (size 1 where ``a`` does not depend on it), so NumPy broadcasting does the rest."""
    idx = tuple(int(r[1]) if r[0] == "c" else slice(None) for r in m)
    v = a[idx]
    dims = [int(r[1]) for r in m if r[0] == "d"]
    order = np.argsort(dims)
    v = np.transpose(v, order) if len(order) > 1 else v
    shape = [1] * rank
    for d, s in zip(sorted(dims), v.shape):
        shape[d] = s
    return v.reshape(shape)


def _eval_nodes(nodes: Sequence[Any], arg: Callable[[int], Any], index: Callable[[int], Any],
                out: Callable[[int], Any], inputs: Sequence[np.ndarray]) -> list[Any]:
    """Every body node's value: arrays over (a broadcastable part of) the iteration space.
    Arithmetic is IEEE's, as a device's: an overflow, a NaN or an out-of-range cast is a value,
    not a warning on the user's terminal (constant folding of a model's weights runs here too)."""
    with np.errstate(all="ignore"):
        return _eval_nodes_quietly(nodes, arg, index, out, inputs)


def _eval_nodes_quietly(nodes: Sequence[Any], arg: Callable[[int], Any], index: Callable[[int], Any],
                        out: Callable[[int], Any], inputs: Sequence[np.ndarray]) -> list[Any]:
    vals: list[Any] = [None] * len(nodes)
    for i, (op, args, dt, value) in enumerate(nodes):
        npdt = _DT[dt]
        if op == "arg":
            r = arg(int(value))
        elif op == "out":
            r = out(int(value))
        elif op == "const":
            r = npdt(value) if dt != "i1" else np.bool_(value)
        elif op == "index":
            r = index(int(value))
        elif op == "extract":
            table = np.asarray(inputs[int(value)])
            idx = np.broadcast_arrays(*[np.asarray(vals[a]).astype(np.int64) for a in args])
            for ix, n in zip(idx, table.shape):  # NumPy would wrap a negative index: refuse it, as GPUs do
                bad = (ix < 0) | (ix >= n)
                if bad.any():
                    raise UserError(f"gathered at index {int(ix[bad].flat[0])}, outside its input's bounds "
                                    f"(0..{n - 1}); check the input values (token ids, indices)")
            r = table[tuple(idx)]
        elif op in ("cmpf", "cmpi"):
            pred = value
            a, b = vals[args[0]], vals[args[1]]
            if op == "cmpi" and pred in ("ult", "ule", "ugt", "uge"):
                pred += "_i"
                a, b = _unsigned(a), _unsigned(b)  # signless integers compared as unsigned
            r = _CMP[pred](a, b)
        elif op == "select":
            r = np.where(vals[args[0]], vals[args[1]], vals[args[2]])
        elif op in _CASTS:
            x = vals[args[0]]
            if op in ("fptosi", "fptoui"):
                x = np.trunc(x)
            elif op in ("extui", "uitofp", "index_castui"):
                x = _unsigned(x)  # the source's bits read as unsigned: zero-extended
            r = np.asarray(x).astype(npdt)
        elif op in _UNSIGNED_BINARY:
            a, b = _unsigned(vals[args[0]]), _unsigned(vals[args[1]])
            r = np.asarray(_UNSIGNED_BINARY[op](a, b)).astype(a.dtype).view(npdt) \
                if np.asarray(a).dtype.kind == "u" else _UNSIGNED_BINARY[op](a, b)
        elif op == "bitcast":
            r = np.asarray(vals[args[0]]).view(npdt)
        elif op in BINARY:
            r = BINARY[op](vals[args[0]], vals[args[1]])
        elif op in UNARY:
            r = UNARY[op](vals[args[0]])
        elif op == "fma":
            r = vals[args[0]] * vals[args[1]] + vals[args[2]]
        else:
            raise ValueError(f"hb.generic: unknown body op '{op}'")
        if isinstance(r, np.ndarray):
            if r.dtype != npdt:
                r = r.astype(npdt)
        else:
            r = npdt(r)
        vals[i] = r
    return vals


def _index_array(dims: Sequence[int], d: int) -> np.ndarray:
    shape = [1] * len(dims)
    shape[d] = dims[d]
    return np.arange(dims[d], dtype=np.int64).reshape(shape)


def _eval_sequential(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray],
                     outputs: Sequence[np.ndarray] | None) -> list[np.ndarray]:
    """A ``seq`` reduction: accumulators start at their inits; the body is evaluated at one
    reduction point after another (in order), over all parallel points at once."""
    dims = [int(d) for d in attrs["dims"]]
    rank = len(dims)
    maps = attrs["maps"]
    n_in = len(inputs)
    nodes = attrs["body"]["nodes"]
    yields = attrs["body"]["yields"]
    red = [d for d in range(rank) if attrs["iterators"][d] == "reduction"]
    par_shape = [1 if d in red else dims[d] for d in range(rank)]
    views = {k: operand_view(np.asarray(inputs[k]), maps[k], rank) for k in range(n_in) if maps[k] is not None}
    accs = []
    for k, y in enumerate(yields):
        dt = _DT[nodes[y][2]]
        if attrs["inits"][k] is not None:
            init = views[attrs["inits"][k]]
        else:
            init = np.asarray(attrs["init_consts"][k]).astype(dt)
        accs.append(np.broadcast_to(np.asarray(init, dtype=dt), par_shape).copy())
    for point in np.ndindex(*[dims[d] for d in red]):
        at = {d: p for d, p in zip(red, point)}
        sel = tuple(slice(at[d], at[d] + 1) if d in at else slice(None) for d in range(rank))

        def arg(k: int, sel: Any = sel) -> Any:
            v = views[k]
            return v[tuple(s if v.shape[d] > 1 else slice(None) for d, s in enumerate(sel))]

        def index(d: int, at: Any = at) -> Any:
            return np.int64(at[d]) if d in at else _index_array(dims, d)

        vals = _eval_nodes(nodes, arg, index, lambda k, accs=accs: accs[k], inputs)
        accs = [np.broadcast_to(np.asarray(vals[y], dtype=accs[k].dtype), par_shape).copy()
                for k, y in enumerate(yields)]
    return [_store(acc, maps[n_in + k], dims, outputs[k] if outputs is not None else None)
            for k, acc in enumerate(accs)]


def _store(v: np.ndarray, m: Sequence[Sequence[Any]], dims: Sequence[int], out: np.ndarray | None) -> np.ndarray:
    """``v`` (laid out over the iteration space) written through output map ``m`` into ``out``
    (a new array when None)."""
    rank = len(dims)
    if out is None:
        out = np.empty([dims[r[1]] if r[0] == "d" else 1 for r in m], dtype=v.dtype)
    # The output map sends iteration dims to output axes: read v along them in axis order.
    ds = [int(r[1]) for r in m if r[0] == "d"]
    vv = v[tuple(slice(None) if d in ds else 0 for d in range(rank))]  # the output's dims, increasing
    kept = sorted(ds)
    vv = np.transpose(vv, [kept.index(d) for d in ds]) if len(ds) > 1 else vv
    out[tuple(int(r[1]) if r[0] == "c" else slice(None) for r in m)] = vv
    return out


def eval_generic(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray],
                 outputs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """Evaluate the generic over its iteration space; writes into ``outputs`` when given
    (arrays of the output shapes) and returns the results."""
    if "seq" in attrs["reduce"]:
        return _eval_sequential(attrs, inputs, outputs)
    dims = [int(x) for x in attrs["dims"]]
    rank = len(dims)
    maps = attrs["maps"]
    n_in = len(inputs)
    nodes = attrs["body"]["nodes"]
    yields = attrs["body"]["yields"]
    views: dict[int, np.ndarray] = {}

    def arg(k: int) -> np.ndarray:
        if k not in views:
            views[k] = operand_view(np.asarray(inputs[k]), maps[k], rank)
        return views[k]

    def no_out(k: int) -> Any:
        raise ValueError("hb.generic: an accumulator read outside a sequential reduction")

    vals = _eval_nodes(nodes, arg, lambda d: _index_array(dims, d), no_out, inputs)
    iters = attrs["iterators"]
    red_axes = tuple(d for d in range(rank) if iters[d] == "reduction")
    full = tuple(dims)
    results = []
    for k, y in enumerate(yields):
        m = maps[n_in + k]
        dt = _DT[nodes[y][2]]
        v = np.broadcast_to(np.asarray(vals[y], dtype=dt).reshape(
            np.shape(vals[y]) if np.ndim(vals[y]) == rank else [1] * rank), full)
        kind = attrs["reduce"][k]
        if kind is not None:
            v = _REDUCE[kind].reduce(v, axis=red_axes, keepdims=True)
            init_idx, init_const = attrs["inits"][k], attrs["init_consts"][k]
            if init_idx is not None:
                init = operand_view(np.asarray(inputs[init_idx]), maps[init_idx], rank)
            else:
                init = dt(init_const)
            v = _REDUCE[kind](init, v).astype(dt, copy=False)
        results.append(_store(v, m, dims, outputs[k] if outputs is not None else None))
    return results
