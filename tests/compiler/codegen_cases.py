"""Dispatch cases for the GPU codegen tests: small IR graphs with random (never zero) data.

Each case is ``(graph, dispatch op, inputs)``; the reference is the local oracle (the ``hb.*``
NumPy kernels the local drivers run), and a few cases also check against plain NumPy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from halbench.compiler.ir import Body, Graph, Node, Op, TensorType

__all__ = ["CASES", "build", "random_inputs", "reference"]

F = "f32"


def _ident(r: int) -> tuple:
    return tuple(("d", i) for i in range(r))


def _generic(ins: list[str], outs: list[str], dims: list[int], maps: list[Any], body: Body,
             iters: list[str] | None = None, reduce: list[Any] | None = None,
             inits: list[Any] | None = None, init_consts: list[Any] | None = None) -> Op:
    n = len(outs)
    return Op("generic", ins, outs, {"dims": dims, "iterators": iters or ["parallel"] * len(dims),
                                      "maps": maps, "body": body, "reduce": reduce or [None] * n,
                                      "inits": inits or [None] * n, "init_consts": init_consts or [None] * n})


def _dispatch(root: Op, epilogue: Op | None = None) -> Op:
    ins = list(dict.fromkeys(root.inputs))
    outs = list(root.outputs)
    if epilogue is not None:
        ins += [v for v in epilogue.inputs if v != root.outputs[0] and v not in ins]
        outs = list(epilogue.outputs)
    return Op("dispatch", ins, outs, {"kind": root.kind, "name": root.kind, "root": root, "epilogue": epilogue})


def _graph(types: dict[str, tuple[tuple[int, ...], str]]) -> Graph:
    g = Graph()
    g.types = {k: TensorType(tuple(s), dt) for k, (s, dt) in types.items()}
    return g


def _body(fn: Callable[[Body, list[int]], list[int]], arg_types: list[str]) -> Body:
    b = Body()
    args = [b.add(Node("arg", (), t, i)) for i, t in enumerate(arg_types)]
    b.yields = fn(b, args)
    return b


def _bias_relu(shape: tuple[int, ...], bias_axis: int, root_out: str = "r") -> tuple[Op, dict]:
    """out = max(root + bias[axis], 0): the epilogue conv / matmul dispatches carry."""
    rank = len(shape)

    def f(b: Body, a: list[int]) -> list[int]:
        s = b.add(Node("addf", (a[0], a[1])))
        z = b.add(Node("const", (), F, 0.0))
        return [b.add(Node("maximumf", (s, z)))]

    op = _generic([root_out, "bias"], ["o"], list(shape), [_ident(rank), (("d", bias_axis),), _ident(rank)],
                  _body(f, [F, F]))
    return op, {"bias": ((shape[bias_axis],), F), "o": (shape, F)}


# -- cases ------------------------------------------------------------------------------------

def elementwise(shape: tuple[int, ...], dtype: str = F) -> tuple[Graph, Op]:
    """erf(a + b[last]) * tanh(a) + rsqrt(|a| + 1), exp(-a), select and compares."""
    rank = len(shape)

    def f(b: Body, a: list[int]) -> list[int]:
        s = b.add(Node("addf", (a[0], a[1])))
        e = b.add(Node("erf", (s,)))
        t = b.add(Node("tanh", (a[0],)))
        m = b.add(Node("mulf", (e, t)))
        ab = b.add(Node("absf", (a[0],)))
        one = b.add(Node("const", (), F, 1.0))
        r = b.add(Node("rsqrt", (b.add(Node("addf", (ab, one))),)))
        x = b.add(Node("exp", (b.add(Node("negf", (a[0],))),)))
        c = b.add(Node("cmpf", (a[0], a[1]), "i1", "ogt"))
        sel = b.add(Node("select", (c, r, x)))
        return [b.add(Node("addf", (m, sel)))]

    g = _graph({"a": (shape, dtype), "b": ((shape[-1],), dtype), "o": (shape, dtype)})
    op = _generic(["a", "b"], ["o"], list(shape), [_ident(rank), (("d", rank - 1),), _ident(rank)],
                  _body(f, [dtype, dtype]))
    return g, _dispatch(op)


def math_ops(n: int) -> tuple[Graph, Op]:
    """Casts, integer ops, index, expm1/log1p/pow/fmod/round/copysign/sqrt/exp2/log."""

    def f(b: Body, a: list[int]) -> list[int]:
        def n(op: str, *args: int, dtype: str = F, value: Any = None) -> int:
            return b.add(Node(op, tuple(args), dtype, value))

        def c(v: Any, dtype: str = F) -> int:
            return n("const", dtype=dtype, value=v)

        x = a[0]
        i32 = n("index_cast", n("index", dtype="i64", value=0), dtype="i32")
        shifted = n("subi", i32, c(7, "i32"), dtype="i32")
        q = n("floordivsi", shifted, c(-3, "i32"), dtype="i32")
        rem = n("remsi", shifted, c(-3, "i32"), dtype="i32")
        fi = n("sitofp", n("addi", q, rem, dtype="i32"))
        ex = n("expm1", n("mulf", x, c(0.01)))
        lp = n("log1p", n("absf", x))
        pw = n("powf", x, c(2.0))
        fm = n("remf", x, c(0.7))
        rd = n("round", n("mulf", x, c(3.0)))
        cs = n("copysign", n("sqrt", n("absf", x)), a[1])
        lg = n("log", n("addf", n("exp2", x), c(1.0)))
        tf = n("sitofp", n("fptosi", n("mulf", x, c(4.0)), dtype="i32"))
        mx = n("minimumf", x, a[1])
        acc = fi
        for v in (ex, lp, pw, fm, rd, cs, lg, tf, mx):
            acc = n("addf", acc, v)
        return [acc]

    g = _graph({"a": ((n,), F), "b": ((n,), F), "o": ((n,), F)})
    op = _generic(["a", "b"], ["o"], [n], [_ident(1), _ident(1), _ident(1)], _body(f, [F, F]))
    return g, _dispatch(op)


def gather(vocab: int, dim: int, seq: int) -> tuple[Graph, Op]:
    """Embedding lookup: out[s, d] = table[ids[s], d] with i64 ids."""
    b = Body()
    ids = b.add(Node("arg", (), "i64", 0))
    col = b.add(Node("index", (), "i64", 1))
    b.yields = [b.add(Node("extract", (ids, col), F, 1))]
    g = _graph({"ids": ((seq,), "i64"), "table": ((vocab, dim), F), "o": ((seq, dim), F)})
    op = _generic(["ids", "table"], ["o"], [seq, dim], [(("d", 0),), None, _ident(2)], b)
    return g, _dispatch(op)


def transpose(shape: tuple[int, int, int], perm: tuple[int, int, int]) -> tuple[Graph, Op]:
    out = tuple(shape[p] for p in perm)
    in_map = [None] * 3
    for i, p in enumerate(perm):
        in_map[p] = ("d", i)
    g = _graph({"a": (shape, F), "o": (out, F)})
    op = _generic(["a"], ["o"], list(out), [tuple(in_map), _ident(3)], _body(lambda b, a: [a[0]], [F]))
    return g, _dispatch(op)


def reduction(shape: tuple[int, ...], axes: tuple[int, ...], kind: str = "add", with_init: bool = False) -> tuple[Graph, Op]:
    """out = init + reduce(exp(a) or a) over ``axes``."""
    rank = len(shape)
    par = [d for d in range(rank) if d not in axes]
    out = tuple(shape[d] for d in par)

    def f(b: Body, a: list[int]) -> list[int]:
        if kind == "add":
            return [b.add(Node("exp", (b.add(Node("mulf", (a[0], b.add(Node("const", (), F, 0.5))))),)))]
        return [a[0]]

    types = {"a": (shape, F), "o": (out, F)}
    ins = ["a"]
    maps: list[Any] = [_ident(rank)]
    inits, consts = [None], [{"add": 0.0, "max": float("-inf"), "min": float("inf"), "mul": 1.0}[kind]]
    if with_init:
        types["i"] = (out, F)
        ins.append("i")
        maps.append(tuple(("d", d) for d in par))
        inits, consts = [1], [None]
    maps.append(tuple(("d", d) for d in par))
    g = _graph(types)
    iters = ["reduction" if d in axes else "parallel" for d in range(rank)]
    op = _generic(ins, ["o"], list(shape), maps, _body(f, [F]), iters, [kind], inits, consts)
    return g, _dispatch(op)


def conv(layout: str, n: int, c: int, h: int, w: int, f: int, k: tuple[int, int], stride: int = 1,
         dil: int = 1, pads: tuple[int, ...] = (0, 0, 0, 0), groups: int = 1, epilogue: bool = False) -> tuple[Graph, Op]:
    kh, kw = k
    oh = (h + pads[0] + pads[2] - dil * (kh - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dil * (kw - 1) - 1) // stride + 1
    if layout == "nchw":
        xs, ws, os = (n, c, h, w), (f, c, kh, kw), (n, f, oh, ow)
    elif layout == "ngchw":
        xs, ws, os = (n, groups, c, h, w), (groups, f, c, kh, kw), (n, groups, f, oh, ow)
    elif layout == "nhwc_hwcf":
        xs, ws, os = (n, h, w, c), (kh, kw, c, f), (n, oh, ow, f)
    else:
        xs, ws, os = (n, h, w, c), (f, kh, kw, c), (n, oh, ow, f)
    attrs = {"layout": layout, "strides": [stride, stride], "dilations": [dil, dil], "pads": list(pads),
             "pad_value": 0.0}
    types = {"x": (xs, F), "w": (ws, F), "r": (os, F)}
    root = Op("conv2d", ["x", "w"], ["r"], attrs)
    ep = None
    if epilogue:
        ep, extra = _bias_relu(os, 1 if layout in ("nchw",) else len(os) - 1 if layout != "ngchw" else 2)
        types.update(extra)
    return _graph(types), _dispatch(root, ep)


def depthwise(layout: str, n: int, c: int, h: int, w: int, k: int, stride: int, pads: tuple[int, ...],
              epilogue: bool = False) -> tuple[Graph, Op]:
    oh = (h + pads[0] + pads[2] - k) // stride + 1
    ow = (w + pads[1] + pads[3] - k) // stride + 1
    if layout == "nchw":
        xs, ws, os = (n, c, h, w), (c, k, k), (n, c, oh, ow)
    else:
        xs, ws, os = (n, h, w, c), (k, k, c), (n, oh, ow, c)
    attrs = {"layout": layout, "strides": [stride, stride], "dilations": [1, 1], "pads": list(pads), "pad_value": 0.0}
    types = {"x": (xs, F), "w": (ws, F), "r": (os, F)}
    root = Op("depthwise_conv2d", ["x", "w"], ["r"], attrs)
    ep = None
    if epilogue:
        ep, extra = _bias_relu(os, 1 if layout == "nchw" else 3)
        types.update(extra)
    return _graph(types), _dispatch(root, ep)


def pool(mode: str, layout: str, n: int, c: int, h: int, w: int, k: int, stride: int,
         pads: tuple[int, ...] = (0, 0, 0, 0)) -> tuple[Graph, Op]:
    oh = (h + pads[0] + pads[2] - k) // stride + 1
    ow = (w + pads[1] + pads[3] - k) // stride + 1
    xs, os = ((n, c, h, w), (n, c, oh, ow)) if layout == "nchw" else ((n, h, w, c), (n, oh, ow, c))
    attrs = {"mode": mode, "layout": layout, "kernel": [k, k], "strides": [stride, stride], "dilations": [1, 1],
             "pads": list(pads), "pad_value": 0.0 if mode == "sum" else float("-inf")}
    return _graph({"x": (xs, F), "o": (os, F)}), _dispatch(Op("pool", ["x"], ["o"], attrs))


def matmul(m: int, n: int, k: int, batch: int = 0, ta: bool = False, tb: bool = False,
           epilogue: bool = False, dtype: str = F) -> tuple[Graph, Op]:
    pre = (batch,) if batch else ()
    a = pre + ((k, m) if ta else (m, k))
    b = pre + ((n, k) if tb else (k, n))
    os = pre + (m, n)
    types = {"a": (a, dtype), "b": (b, dtype), "r": (os, dtype)}
    root = Op("batch_matmul" if batch else "matmul", ["a", "b"], ["r"], {"transpose_a": ta, "transpose_b": tb})
    ep = None
    if epilogue:
        ep, extra = _bias_relu(os, len(os) - 1)
        types.update(extra)
    return _graph(types), _dispatch(root, ep)


def pad(shape: tuple[int, ...], low: list[int], high: list[int], value: float = 0.5) -> tuple[Graph, Op]:
    out = tuple(s + lo + hi for s, lo, hi in zip(shape, low, high))
    return (_graph({"x": (shape, F), "o": (out, F)}),
            _dispatch(Op("pad", ["x"], ["o"], {"low": low, "high": high, "value": value})))


def concat(shapes: list[tuple[int, ...]], axis: int) -> tuple[Graph, Op]:
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    types = {f"x{i}": (s, F) for i, s in enumerate(shapes)}
    types["o"] = (tuple(out), F)
    return _graph(types), _dispatch(Op("concat", [f"x{i}" for i in range(len(shapes))], ["o"], {"axis": axis}))


def slice_(shape: tuple[int, ...], offsets: list[int], sizes: list[int], strides: list[int],
           out: tuple[int, ...] | None = None) -> tuple[Graph, Op]:
    out = out or tuple(sizes)
    return (_graph({"x": (shape, F), "o": (out, F)}),
            _dispatch(Op("slice", ["x"], ["o"], {"offsets": offsets, "sizes": sizes, "strides": strides})))


def insert_slice(src: tuple[int, ...], dest: tuple[int, ...], offsets: list[int], sizes: list[int],
                 strides: list[int], fill: float | None = None, with_dest: bool = True) -> tuple[Graph, Op]:
    types = {"s": (src, F), "o": (dest, F)}
    ins = ["s"]
    attrs = {"offsets": offsets, "sizes": sizes, "strides": strides}
    if with_dest:
        types["d"] = (dest, F)
        ins.append("d")
    else:
        attrs["dest_fill"] = fill
    return _graph(types), _dispatch(Op("insert_slice", ins, ["o"], attrs))


def copy(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[Graph, Op]:
    return _graph({"x": (shape, F), "o": (out, F)}), _dispatch(Op("copy", ["x"], ["o"], {}))


CASES: dict[str, Callable[[], tuple[Graph, Op]]] = {
    "elementwise_small": lambda: elementwise((3, 5)),
    "elementwise_vec4": lambda: elementwise((4, 16, 64)),
    "elementwise_odd": lambda: elementwise((7, 33)),
    "math_ops": lambda: math_ops(300),
    "gather": lambda: gather(50, 24, 9),
    "transpose_021": lambda: transpose((4, 6, 10), (0, 2, 1)),
    "transpose_201": lambda: transpose((3, 5, 8), (2, 0, 1)),
    "reduce_row_short": lambda: reduction((20, 30), (1,)),
    "reduce_row_long": lambda: reduction((6, 1000), (1,)),
    "reduce_row_384_max": lambda: reduction((12, 384), (1,), "max"),
    "reduce_middle": lambda: reduction((4, 50, 6), (1,)),
    "reduce_two_axes_init": lambda: reduction((3, 8, 10, 12), (2, 3), "add", True),
    "reduce_min": lambda: reduction((5, 7, 9), (0, 2), "min"),
    "conv_nchw": lambda: conv("nchw", 2, 3, 9, 11, 5, (3, 3)),
    "conv_nchw_s2_pad_bias": lambda: conv("nchw", 1, 4, 10, 9, 8, (3, 3), 2, 1, (1, 1, 1, 1), epilogue=True),
    "conv_nchw_dil": lambda: conv("nchw", 1, 3, 12, 12, 6, (3, 3), 1, 2, (2, 1, 2, 1)),
    "conv_1x1": lambda: conv("nchw", 2, 16, 7, 7, 20, (1, 1), epilogue=True),
    "conv_ngchw": lambda: conv("ngchw", 1, 3, 8, 8, 4, (3, 3), 1, 1, (1, 1, 1, 1), groups=2),
    "conv_nhwc_hwcf": lambda: conv("nhwc_hwcf", 2, 5, 8, 7, 6, (3, 2), 1, 1, (1, 0, 1, 1), epilogue=True),
    "conv_nhwc_fhwc": lambda: conv("nhwc_fhwc", 1, 4, 9, 9, 7, (3, 3), 2, 1, (1, 1, 0, 0)),
    "depthwise_nchw": lambda: depthwise("nchw", 2, 6, 9, 10, 3, 1, (1, 1, 1, 1), epilogue=True),
    "depthwise_nhwc_s2": lambda: depthwise("nhwc", 1, 8, 11, 11, 3, 2, (1, 1, 1, 1)),
    "pool_max_nchw": lambda: pool("max", "nchw", 2, 3, 9, 9, 3, 2, (1, 1, 1, 1)),
    "pool_sum_nhwc": lambda: pool("sum", "nhwc", 1, 5, 8, 8, 2, 2),
    "pool_global": lambda: pool("sum", "nchw", 2, 4, 7, 7, 7, 1),
    "matmul": lambda: matmul(33, 47, 29),
    "matmul_big": lambda: matmul(130, 96, 70, epilogue=True),
    "matmul_ta_tb": lambda: matmul(20, 18, 37, ta=True, tb=True),
    "matmul_row": lambda: matmul(1, 77, 64, epilogue=True),
    "batch_matmul": lambda: matmul(17, 12, 16, batch=3),
    "batch_matmul_tb": lambda: matmul(12, 12, 8, batch=4, tb=True),
    "pad": lambda: pad((2, 3, 5, 4), [0, 1, 2, 0], [0, 2, 1, 3]),
    "concat_axis1": lambda: concat([(2, 3, 4), (2, 5, 4), (2, 1, 4)], 1),
    "concat_last": lambda: concat([(3, 4), (3, 6)], 1),
    "slice_strided": lambda: slice_((6, 10, 8), [1, 2, 0], [2, 4, 8], [2, 2, 1]),
    "slice_rank_reduced": lambda: slice_((4, 6, 8), [0, 3, 0], [4, 1, 8], [1, 1, 1], (4, 8)),
    "insert_slice_dest": lambda: insert_slice((2, 3), (5, 7), [1, 2], [2, 3], [2, 1]),
    "insert_slice_fill": lambda: insert_slice((3, 4), (6, 4), [2, 0], [3, 4], [1, 1], fill=0.25, with_dest=False),
    "copy_reshape": lambda: copy((4, 6), (3, 8)),
}


def random_inputs(g: Graph, d: Op, seed: int = 0) -> list[np.ndarray]:
    """Random inputs, never zero (floats in +-[0.1, 1.1]); i64 ids within every table's range."""
    rng = np.random.default_rng(seed)
    out = []
    for v in d.inputs:
        t = g.types[v]
        if t.dtype.startswith("i"):
            hi = min([g.types[u].shape[0] for u in d.inputs if g.types[u].dtype.startswith("f")] or [2])
            out.append(rng.integers(0, hi, size=t.shape).astype(np.int64 if t.dtype == "i64" else np.int32))
        else:
            x = rng.uniform(0.1, 1.1, size=t.shape) * rng.choice([-1.0, 1.0], size=t.shape)
            out.append(x.astype(np.float16 if t.dtype == "f16" else np.float32))
    return out


def reference(g: Graph, d: Op, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The local oracle's outputs for dispatch ``d``."""
    import halbench.kernels.ops  # noqa: F401  (registers the hb.* kernels)
    from halbench.compiler.codegen.local import dispatch_attrs
    from halbench.kernels.ops.common import KERNELS
    from halbench.kernels.ops.generic import eval_generic

    attrs = dispatch_attrs(d, g)
    root = d.attrs["root"]
    name = "generic" if root.kind == "generic" else root.kind
    results = KERNELS[f"hb.{name}"](attrs["op"], [inputs[i] for i in attrs["root_inputs"]])
    if d.attrs["epilogue"] is None:
        return [np.asarray(r) for r in results]
    outs = [np.empty(g.types[v].shape, np.float32) for v in d.outputs]
    ep_ins = [results[0] if i < 0 else inputs[i] for i in attrs["epilogue_inputs"]]
    eval_generic(attrs["epilogue"], ep_ins, outs)
    return outs


def build(name: str) -> tuple[Graph, Op]:
    return CASES[name]()
