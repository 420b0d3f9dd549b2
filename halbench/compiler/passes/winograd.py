"""3x3 convolutions as Winograd F(2x2, 3x3): a transform, 16 GEMMs in one batch, a transform.

A ``conv2d`` (NCHW, one group) with a constant 3x3 filter, stride 1, dilation 1 and padding 1
computes each 2x2 output tile from a 4x4 input tile (Lavin and Gray, 2015):

    V[t, c, p]  = (B^T d B)[t]    the input tile of pixel tile p, channel c   (generic)
    M[t, k, p]  = sum_c U[t, k, c] V[t, c, p]                                  (batch_matmul)
    Y[n, k, y, x] = (A^T M A)[y % 2, x % 2] of tile p = (n, y / 2, x / 2)      (generic)

with U = G g G^T the filter transformed at compile time (bundle.weights.winograd_filter, THE
definition the runtime also uses for seeded-random weights). The GEMMs do 16 multiply-adds per
4 outputs and channel where the direct convolution does 36: 2.25x fewer. The two transforms are
element-wise gathers: the input one reads 4 input values per element (the rows of B^T have two
non-zeros), the output one 9; the bias, ReLU and residual add that follow the convolution fuse
into the output transform (fuse_elementwise). Tiles that overhang an odd H or W read zeros and
write nothing past the edge.

Which convolutions: ``mode`` ``on`` takes every one that qualifies, ``off`` none, ``auto`` those
whose GEMM work is large enough to pay for the two extra dispatches (AUTO_MIN_MACS, measured on
the H100: passes/winograd.py's README section).
"""

from __future__ import annotations

from halbench.compiler.ir import Body, Graph, Node, Op, TensorType, Weight

__all__ = ["AUTO_MIN_MACS", "MODES", "eligible", "winograd"]

MODES = ("auto", "on", "off")

#: ``auto`` takes a convolution whose Winograd GEMMs (16 x Co x C x tiles multiply-adds) reach
#: this many. Measured on the H100 (see the README's Winograd section).
AUTO_MIN_MACS = 1 << 62


def eligible(op: Op, g: Graph) -> bool:
    """Whether ``op`` is a convolution Winograd F(2x2, 3x3) computes as it is."""
    a = op.attrs
    if op.kind != "conv2d" or len(op.inputs) != 2 or len(op.outputs) != 1 or a.get("layout") != "nchw":
        return False
    if list(a.get("strides", ())) != [1, 1] or list(a.get("dilations", ())) != [1, 1]:
        return False
    if list(a.get("pads", ())) != [1, 1, 1, 1] or float(a.get("pad_value", 0.0)) != 0.0:
        return False
    x, w = op.inputs
    wt = g.weights.get(w)
    if wt is None or wt.type.dtype != "f32" or len(wt.type.shape) != 4 or tuple(wt.type.shape[2:]) != (3, 3):
        return False
    xt, yt = g.types[x], g.types[op.outputs[0]]
    return (xt.dtype == "f32" and len(xt.shape) == 4 and xt.shape[1] == wt.type.shape[1]
            and yt.shape == (xt.shape[0], wt.type.shape[0], xt.shape[2], xt.shape[3]))


def _macs(op: Op, g: Graph) -> int:
    n, c, h, w = g.types[op.inputs[0]].shape
    co = g.weights[op.inputs[1]].type.shape[0]
    return 16 * co * c * n * -(-h // 2) * -(-w // 2)


class _B:
    """A body under construction (i32 index arithmetic, f32 values)."""

    def __init__(self) -> None:
        self.body = Body()
        self._consts: dict[tuple[str, object], int] = {}

    def node(self, op: str, *args: int, dtype: str = "i32", value: object = None) -> int:
        return self.body.add(Node(op, tuple(args), dtype, value))

    def const(self, v: float | int, dtype: str = "i32") -> int:
        key = (dtype, v)
        if key not in self._consts:
            self._consts[key] = self.node("const", dtype=dtype, value=float(v) if dtype == "f32" else int(v))
        return self._consts[key]

    def div(self, a: int, k: int) -> int:
        return self.node("divsi", a, self.const(k))

    def rem(self, a: int, k: int) -> int:
        return self.node("remsi", a, self.const(k))

    def add(self, a: int, b: int) -> int:
        return self.node("addi", a, b)

    def fadd(self, a: int, b: int) -> int:
        return self.node("addf", a, b, dtype="f32")

    def fmul(self, a: int, b: int) -> int:
        return self.node("mulf", a, b, dtype="f32")

    def sign(self, cond: int, when_true: float, when_false: float) -> int:
        return self.node("select", cond, self.const(when_true, "f32"), self.const(when_false, "f32"), dtype="f32")

    def eq(self, a: int, k: int) -> int:
        return self.node("cmpi", a, self.const(k), dtype="i1", value="eq")


def _input_transform(x: str, shape: tuple[int, ...], tiles: tuple[int, int]) -> Body:
    """V[t, c, p] = (B^T d B)[t / 4, t % 4] of the 4x4 input tile of p, zero outside the input."""
    _, _, h, w = shape
    th_n, tw_n = tiles
    b = _B()
    t, c, p = (b.node("index", value=d) for d in range(3))
    i, j = b.div(t, 4), b.rem(t, 4)
    tw, q = b.rem(p, tw_n), b.div(p, tw_n)
    th, n = b.rem(q, th_n), b.div(q, th_n)

    # row i of B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]]: +-d[a0] +- d[a1] with
    # a0 = min(i, 1), a1 = 2 + i / 3; sign of a0: -1 for i == 2; of a1: +1 for i in {1, 2}
    def taps(k: int) -> tuple[int, int, int, int]:
        a0 = b.node("minsi", k, b.const(1))
        a1 = b.add(b.const(2), b.div(k, 3))
        s0 = b.sign(b.eq(k, 2), -1.0, 1.0)
        s1 = b.sign(b.node("cmpi", b.node("subi", k, b.const(1)), b.const(2), dtype="i1", value="ult"), 1.0, -1.0)
        return a0, a1, s0, s1

    ai0, ai1, si0, si1 = taps(i)
    aj0, aj1, sj0, sj1 = taps(j)
    y0 = b.node("subi", b.node("muli", th, b.const(2)), b.const(1))
    x0 = b.node("subi", b.node("muli", tw, b.const(2)), b.const(1))

    def load(y: int, xx: int) -> int:
        # an unsigned compare is both bounds at once (a negative coordinate is huge unsigned)
        ok = b.node("andi", b.node("cmpi", y, b.const(h), dtype="i1", value="ult"),
                    b.node("cmpi", xx, b.const(w), dtype="i1", value="ult"), dtype="i1")
        yc = b.node("minsi", b.node("maxsi", y, b.const(0)), b.const(h - 1))
        xc = b.node("minsi", b.node("maxsi", xx, b.const(0)), b.const(w - 1))
        v = b.node("extract", n, c, yc, xc, dtype="f32", value=0)
        return b.node("select", ok, v, b.const(0.0, "f32"), dtype="f32")

    rows = []
    for ay in (ai0, ai1):
        y = b.add(y0, ay)
        left, right = load(y, b.add(x0, aj0)), load(y, b.add(x0, aj1))
        rows.append(b.fadd(b.fmul(sj0, left), b.fmul(sj1, right)))
    b.body.yields = [b.fadd(b.fmul(si0, rows[0]), b.fmul(si1, rows[1]))]
    return b.body


def _output_transform(tiles: tuple[int, int]) -> Body:
    """Y[n, k, y, x] = (A^T M A)[y % 2, x % 2] of tile (n, y / 2, x / 2), with
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]: row r sums M rows r, r + 1, r + 2 with signs +, s, s
    (s = +1 for r = 0, -1 for r = 1); columns likewise."""
    th_n, tw_n = tiles
    b = _B()
    n, k, y, x = (b.node("index", value=d) for d in range(4))
    r, s = b.rem(y, 2), b.rem(x, 2)
    p = b.add(b.node("muli", b.add(b.node("muli", n, b.const(th_n)), b.div(y, 2)), b.const(tw_n)), b.div(x, 2))
    sr = b.sign(b.eq(r, 1), -1.0, 1.0)
    ss = b.sign(b.eq(s, 1), -1.0, 1.0)

    def m(row: int, col: int) -> int:
        t = b.add(b.node("muli", row, b.const(4)), col)
        return b.node("extract", t, k, p, dtype="f32", value=0)

    rows = [b.add(r, b.const(a)) for a in range(3)]
    cols = []
    for a in range(3):
        col = b.add(s, b.const(a))
        cols.append(b.fadd(m(rows[0], col), b.fmul(sr, b.fadd(m(rows[1], col), m(rows[2], col)))))
    b.body.yields = [b.fadd(cols[0], b.fmul(ss, b.fadd(cols[1], cols[2])))]
    return b.body


def _generic(inputs: list[str], outputs: list[str], dims: list[int], body: Body, loc: str) -> Op:
    rank = len(dims)
    return Op("generic", inputs, outputs, {
        "dims": dims, "iterators": ["parallel"] * rank,
        "maps": [None] * len(inputs) + [tuple(("d", i) for i in range(rank))],
        "body": body, "reduce": [None], "inits": [None], "init_consts": [None]}, loc)


def winograd(graph: Graph, mode: str = "auto") -> Graph:
    """Rewrite the convolutions ``mode`` picks (see the module docstring) as Winograd F(2x2, 3x3)."""
    if mode not in MODES:
        raise ValueError(f"winograd mode {mode!r}; known: {', '.join(MODES)}")
    if mode == "off":
        return graph
    g = graph.copy()
    ops: list[Op] = []
    sources: set[str] = set()
    changed = False
    for op in g.ops:
        if not eligible(op, g) or (mode == "auto" and _macs(op, g) < AUTO_MIN_MACS):
            ops.append(op)
            continue
        changed = True
        x, w = op.inputs
        y = op.outputs[0]
        nb, c, h, wd = g.types[x].shape
        co = g.weights[w].type.shape[0]
        tiles = (-(-h // 2), -(-wd // 2))
        p = nb * tiles[0] * tiles[1]
        src = g.weights[w]
        sources.add(w)
        u = f"{w}.winograd"
        if u not in g.weights:
            from halbench.bundle.weights import winograd_filter

            data = winograd_filter(src.data) if src.data is not None else None
            g.weights[u] = Weight(u, TensorType((16, co, c), "f32"), data, derived=("winograd-f2x3", src))
            g.types[u] = g.weights[u].type
        v, mm = f"{y}.wg_in", f"{y}.wg_gemm"
        g.types[v] = TensorType((16, c, p), "f32")
        g.types[mm] = TensorType((16, co, p), "f32")
        ops.append(_generic([x], [v], [16, c, p], _input_transform(x, g.types[x].shape, tiles), op.loc))
        ops.append(Op("batch_matmul", [u, v], [mm], {"transpose_a": False, "transpose_b": False}, op.loc))
        ops.append(_generic([mm], [y], [nb, co, h, wd], _output_transform(tiles), op.loc))
    if not changed:
        return graph
    g.ops = ops
    read = {v for op in g.ops for v in op.inputs} | set(g.views.values()) | {v for _, v in g.outputs}
    for name in sorted(sources - read):
        del g.weights[name]  # a filter only its transform reads now (the transform keeps its data)
    return g
