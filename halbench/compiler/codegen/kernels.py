"""Dispatch -> kernel plan: which template, its context, workgroup size and count.

Shared by the Vulkan, CUDA and HIP generators: a plan is language-neutral until a :class:`Lang`
renders it. A dispatch is the compiler's ``dispatch`` op (attrs ``kind``, ``root``,
``epilogue``; inputs then outputs are its bindings), or a bare IR op, bound as its own inputs
and outputs.

Families:
- ``point``: one thread per output point (elementwise / gather / transpose with vec4 lanes where
  the innermost dim allows; pad, concat, slices, copies; depthwise conv, pooling; short
  reductions looping over their reduction dims);
- ``reduce_wg``: one workgroup per output point for long contiguous reductions;
- ``gemm``: shared-memory tiled GEMM for matmul, batch_matmul and conv2d (implicit GEMM);
- ``row``: one workgroup per row of a fused softmax / layer norm (rows.py), subgroup reductions;
- ``attention``: flash attention, one workgroup per (batch*head, query-row block) (attention.py);
- ``gemm_mma``: matrix units (cooperative matrix / WMMA) for f16 / bf16 GEMMs, and f32 ones
  compiled with ``--precision tf32|f16|bf16``, where the target has them: mma.sync on sm_80+
  (``gemm_mma_sync.j2``), Hopper's wgmma on sm_90a where tuning.WGMMA_CONVS allows
  (``gemm_wgmma.j2``, codegen/wgmma.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from halbench.compiler.codegen.lang import Lang, ctype, emit_body, lin
from halbench.compiler.codegen.matrix import mma_context, mma_sync_context, vector_load
from halbench.compiler.codegen.tuning import (
    GEMM_FRAGMENTS,
    MMA_SPLIT_K,
    WGMMA_CONVS,
    WGMMA_MATMULS,
    GemmConfig,
    MmaTiles,
    Tuning,
    config_problem,
    fold_groups,
    gemm_min_blocks,
    gemm_stages,
    gemm_tiles,
    mma_fragment,
    mma_split_slices,
    mma_sync_dynamic,
    mma_sync_ok,
    mma_sync_split,
    mma_sync_takes_split,
    mma_sync_tiles,
    mma_tiles,
    problem_key,
    reduction_plan,
    split_k,
    split_k_room,
    wgmma_ok,
    wgmma_tiles,
)
from halbench.compiler.codegen.wgmma import wgmma_context, wgmma_mode, wgmma_vec_bindings
from halbench.compiler.ir import Graph, Op
from halbench.errors import CompileError

__all__ = ["Dispatch", "GemmSplit", "Plan", "as_dispatch", "gemm_config", "gemm_split", "plan_dispatch",
           "rule_config", "uses_extract"]

_NEUTRAL = {"add": 0.0, "mul": 1.0, "max": float("-inf"), "min": float("inf")}


@dataclass
class Dispatch:
    root: Op
    epilogue: Op | None
    inputs: list[str]
    outputs: list[str]
    name: str
    #: a depthwise convolution computed inside this GEMM (passes/fuse_depthwise.py): root,
    #: epilogue and the value it stands for, which is no binding of the dispatch
    prologue: dict[str, Any] | None = None

    @property
    def values(self) -> list[str]:
        return self.inputs + self.outputs


def as_dispatch(d: Any) -> Dispatch:
    """Accept the compiler's dispatch op (attrs root/epilogue), a bare op, or a Dispatch."""
    if isinstance(d, Dispatch):
        return d
    attrs = getattr(d, "attrs", {}) or {}
    if getattr(d, "kind", None) == "dispatch" or "root" in attrs:
        root = attrs["root"]
        return Dispatch(root, attrs.get("epilogue"), list(d.inputs), list(d.outputs),
                        str(attrs.get("name", root.kind)), attrs.get("prologue"))
    return Dispatch(d, None, list(dict.fromkeys(d.inputs)), list(d.outputs), d.kind)


@dataclass
class Plan:
    """A kernel ready to render: ``template`` with ``ctx`` (code lines), launch and ABI."""

    template: str
    ctx: dict[str, Any]
    workgroup_size: tuple[int, int, int]
    workgroups: tuple[int, int, int]
    shared: list[tuple[str, str, int]] = field(default_factory=list)  # (ctype, name, elements)
    vec4: set[int] = field(default_factory=set)  # bindings also accessed as 16-byte vectors
    #: functions (return type, name, parameters, body lines) in the shared C subset
    helpers: list[tuple[str, str, str, list[str]]] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    #: Vulkan: the kernel needs subgroups of at least this many invocations (lanes that shuffle
    #: within one subgroup); the variant records it as ``subgroupSizeN`` and a device whose
    #: subgroups may be smaller refuses it at load (0: no such need)
    min_subgroup: int = 0
    #: the kernel takes one more binding after its values: a 2-word status slot (uint32) where
    #: a gather with an index out of its bounds records 1 and the index (see gather())
    status: bool = False
    #: the kernel reads back what it wrote to its outputs (an in-place sort)
    reads_outputs: bool = False
    #: the kernel takes one more binding after the status slot: split-K scratch (gemm_split)
    scratch: bool = False
    #: a scalar f32 GEMM's problem, configuration and where it came from ("tuned" or "rule"),
    #: recorded per variant in the bundle's manifest
    gemm: dict[str, Any] | None = None
    #: a matrix-unit GEMM's kernel ("coopmat", "wmma", "mma.sync", "wgmma"), operand type, tiles,
    #: K slices and stages, recorded per variant in the manifest (manifest_schema.MatrixChoiceDoc)
    matrix: dict[str, Any] | None = None
    #: bytes of dynamic shared memory the kernel takes (CUDA: EntryPoint.dynamic_shared_bytes;
    #: the kernel declares it ``extern __shared__`` and carves its arrays itself)
    dynamic_shared: int = 0


class _Ctx:
    """Per-dispatch helpers: binding lookup, typed loads, the epilogue and the stores."""

    def __init__(self, d: Dispatch, g: Graph, lang: Lang):
        self.d, self.g, self.L = d, g, lang
        self.types = [g.types[v] for v in d.values]
        self.n_in = len(d.inputs)
        #: a fused prologue's value (no binding: computed where it is read) under an index past
        #: the bindings, so that its shape and type read as a binding's; nothing may load it
        self.virtual: dict[str, int] = {}
        if d.prologue is not None:
            self.virtual[d.prologue["value"]] = len(self.types)
            self.types.append(g.types[d.prologue["value"]])

    def b(self, value: str, output: bool = False) -> int:
        if not output and value in self.virtual:
            return self.virtual[value]
        vals = self.d.values
        if output:
            return self.n_in + self.d.outputs.index(value)
        return vals.index(value)

    def shape(self, i: int) -> tuple[int, ...]:
        return self.types[i].shape

    def dtype(self, i: int) -> str:
        return self.types[i].dtype

    def ld(self, i: int, coords: Sequence[str]) -> str:
        return self.L.load(i, self.dtype(i), lin(self.shape(i), coords))

    def gather(self, i: int, idx: Sequence[str]) -> tuple[list[str], str]:
        """A load at computed indices, memory-safe: each index is clamped into its dimension, and
        one that was outside records 1 and its value in the dispatch's status slot (the binding
        after its values), which the runtime turns into an error naming the dispatch."""
        self.status = True
        s = len(self.d.values)
        guards, clamped = [], []
        for x, n in zip(idx, self.shape(i)):
            guards.append(f"if (uint({x}) >= {n}u) {{ B{s}[0] = 1u; B{s}[1] = uint({x}); }}")
            clamped.append(f"min(max({x}, 0), {n - 1})")
        return guards, self.ld(i, clamped)

    def map_coords(self, m: Any, coord: Any) -> list[str]:
        return [coord(int(r[1])) if r[0] == "d" else str(int(r[1])) for r in m]

    def finish(self, coords: Sequence[str], value: str, prefix: str = "e") -> list[str]:
        """Store the root's result at ``coords`` (root output axes), through the epilogue."""
        d = self.d
        root_out = d.root.outputs[0]
        lines: list[str] = []
        if root_out in d.outputs:
            i = self.b(root_out, True)
            lines.append(self.L.store(i, self.dtype(i), lin(self.shape(i), coords), value))
        ep = d.epilogue
        if ep is None:
            return lines
        a = ep.attrs
        rank = len(a["dims"])
        slot = ep.inputs.index(root_out)
        m = a["maps"][slot]
        dim_of: dict[int, str] = {}
        for j, r in enumerate(m):
            if r[0] == "d":
                dim_of[int(r[1])] = coords[j]
        if len(dim_of) != rank:
            raise CompileError(f"dispatch {d.name}: the epilogue reads the root result through {m}, "
                               f"which is not a permutation of its iteration space")

        def arg(k: int, dtype: str) -> str:
            if k == slot:
                return value
            v = ep.inputs[k]
            return self.ld(self.b(v), self.map_coords(a["maps"][k], lambda x: dim_of[x]))

        def extract(k: int, idx: list[str], dtype: str) -> tuple[list[str], str]:
            return self.gather(self.b(ep.inputs[k]), idx)

        body_lines, ys = emit_body(a["body"], self.L, arg, lambda x: dim_of[x], extract, prefix)
        lines += body_lines
        for k, y in enumerate(ys):
            out = ep.outputs[k]
            i = self.b(out, True)
            oc = self.map_coords(a["maps"][len(ep.inputs) + k], lambda x: dim_of[x])
            lines.append(self.L.store(i, self.dtype(i), lin(self.shape(i), oc), y))
        return lines


def _coords(dims: Sequence[int], var: str = "c", src: str = "tid",
            names: Sequence[str] | None = None) -> list[str]:
    """Decompose the linear ``src`` into row-major coordinates ``c0..`` (or ``names``) over ``dims``."""
    out, stride, strides = [], 1, []
    for s in reversed(dims):
        strides.append(stride)
        stride *= int(s)
    strides.reverse()
    for i, (s, st) in enumerate(zip(dims, strides)):
        e = src if st == 1 else f"({src} / {st})"
        if i > 0:
            e = f"{e} % {s}"
        name = names[i] if names else f"{var}{i}"
        out.append(f"int {name} = {e if s != 1 else '0'};")
    return out


def _size(dims: Sequence[int]) -> int:
    n = 1
    for s in dims:
        n *= int(s)
    return n


def _point(t: Tuning, total: int, lines: list[str], coord_lines: list[str], name: str,
           vec: int = 1) -> Plan:
    block = t.block
    threads = -(-total // vec)
    groups = fold_groups(-(-threads // block))
    ctx = {"block": block, "total": threads, "groups_x": groups[0], "coord_lines": coord_lines,
           "lines": lines, "name": name}
    return Plan("point.j2", ctx, (block, 1, 1), groups)


# -- generic ----------------------------------------------------------------------------------

def _plan_generic(c: _Ctx, t: Tuning) -> Plan:
    op = c.d.root
    a = op.attrs
    if c.d.epilogue is not None:
        raise CompileError(f"dispatch {c.d.name}: a generic root takes no epilogue (fuse it into the body)")
    if "reduction" in a["iterators"]:
        return _plan_reduction(c, t)
    dims = [int(x) for x in a["dims"]]
    rank = len(dims)
    n_in = len(op.inputs)
    maps = a["maps"]
    last = ("d", rank - 1)

    def vectorizable(m: Any, i: int) -> bool:
        return (m is not None and rank > 0 and tuple(m[-1]) == last and last not in [tuple(r) for r in m[:-1]]
                and c.dtype(i) == "f32" and c.shape(i)[-1] % 4 == 0)

    vec = 4 if rank and dims[-1] % 4 == 0 and _size(dims) >= 1024 else 1
    loops = dims[:-1] + [dims[-1] // vec] if rank else []
    coord_lines = _coords(loops)
    if vec > 1:
        coord_lines[-1] = coord_lines[-1].replace(f"int c{rank - 1} = ", f"int c{rank - 1} = 4 * (") + ""
        coord_lines[-1] = coord_lines[-1][:-1] + ");"
    lines: list[str] = []
    plan_vec: set[int] = set()
    cache: dict[int, str] = {}
    for k, v in enumerate(op.inputs):
        m = maps[k]
        i = c.b(v)
        if vec > 1 and vectorizable(m, i):
            off = lin(c.shape(i), c.map_coords(m, lambda x: f"c{x}"))
            lines.append(f"{c.L.vec4} q{k} = {c.L.load4(i, f'({off}) / 4')};")
            plan_vec.add(i)
            cache[k] = f"q{k}"
        elif vec > 1 and m is not None and last not in [tuple(r) for r in m]:
            lines.append(f"{ctype(c.dtype(i))} s{k} = {c.ld(i, c.map_coords(m, lambda x: f'c{x}'))};")
            cache[k] = f"s{k}"
    for lane in range(vec):
        def coord(x: int, lane: int = lane) -> str:
            return f"(c{x} + {lane})" if (vec > 1 and x == rank - 1 and lane) else f"c{x}"

        def arg(k: int, dtype: str, lane: int = lane, coord: Any = coord) -> str:
            if k in cache:
                return f"{cache[k]}.{'xyzw'[lane]}" if cache[k].startswith("q") else cache[k]
            i = c.b(op.inputs[k])
            return c.ld(i, c.map_coords(maps[k], coord))

        def extract(k: int, idx: list[str], dtype: str) -> tuple[list[str], str]:
            return c.gather(c.b(op.inputs[k]), idx)

        body, ys = emit_body(a["body"], c.L, arg, coord, extract, f"v{lane}_")
        lines += body
        for k, y in enumerate(ys):
            i = c.b(op.outputs[k], True)
            m = maps[n_in + k]
            if vec > 1 and vectorizable(m, i):
                if lane == vec - 1:
                    off = lin(c.shape(i), c.map_coords(m, lambda x: f"c{x}"))
                    vals = [f"v{ln}_{a['body'].yields[k]}" for ln in range(vec)]
                    lines.append(c.L.store4(i, f"({off}) / 4", vals))
                    plan_vec.add(i)
            else:
                lines.append(c.L.store(i, c.dtype(i), lin(c.shape(i), c.map_coords(m, coord)), y))
    p = _point(t, _size(dims), lines, coord_lines, c.d.name, vec)
    p.vec4 = plan_vec
    return p


# -- Winograd F(2x2, 3x3) transforms (passes/winograd.py) ---------------------------------------

def _plan_winograd_input(c: _Ctx, t: Tuning) -> Plan:
    """V[4i + j, c, p] = (B^T d B)[i, j]: one thread per (channel, tile) loads its 4x4 input tile
    once (zero outside the input: each load is guarded by its bounds) and writes its 16 values,
    neighbouring threads on neighbouring tiles."""
    op = c.d.root
    o, xi = c.b(op.outputs[0], True), c.b(op.inputs[0])
    n, ch, h, w = c.shape(xi)
    th_n, tw_n = (int(x) for x in op.attrs["tiles"])
    p_n = n * th_n * tw_n
    lines = [f"int tw = p % {tw_n}; int q = p / {tw_n}; int th = q % {th_n}; int n = q / {th_n};",
             "int y0 = 2 * th - 1; int x0 = 2 * tw - 1;"]
    for a in range(4):
        for b in range(4):
            ok = f"uint(y0 + {a}) < {h}u && uint(x0 + {b}) < {w}u"
            lines.append(f"float d{a}{b} = ({ok}) ? float({c.ld(xi, ['n', 'ch', f'y0 + {a}', f'x0 + {b}'])}) : 0.0;")
    # rows of B^T: [1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]
    comb = ["{0}0 - {0}2", "{0}1 + {0}2", "{0}2 - {0}1", "{0}1 - {0}3"]
    for a in range(4):  # along x: r{a}{j} = (d B)[a, j]
        for j in range(4):
            lines.append(f"float r{a}{j} = {comb[j].format(f'd{a}')};")
    for i in range(4):
        for j in range(4):
            e = comb[i].replace("{0}0", f"r0{j}").replace("{0}1", f"r1{j}").replace("{0}2", f"r2{j}") \
                .replace("{0}3", f"r3{j}")
            lines.append(c.L.store(o, c.dtype(o), f"{4 * i + j} * {ch * p_n} + ch * {p_n} + p", f"({e})"))
    return _point(t, ch * p_n, lines, [f"int ch = tid / {p_n}; int p = tid % {p_n};"], c.d.name)


def _plan_winograd_output(c: _Ctx, t: Tuning) -> Plan:
    """Y = A^T m A per tile: one thread per (output channel, tile) loads its 16 GEMM results
    once and finishes its 2x2 outputs (through the epilogue: bias, ReLU, residual), those past an
    odd H or W left out."""
    op = c.d.root
    mi = c.b(op.inputs[0])
    _, co, p_n = c.shape(mi)
    _, _, h, w = c.g.types[op.outputs[0]].shape
    th_n, tw_n = (int(x) for x in op.attrs["tiles"])
    lines = [f"int tw = p % {tw_n}; int q = p / {tw_n}; int th = q % {th_n}; int n = q / {th_n};"]
    for t_ in range(16):  # (the kernel's own k is its output channel)
        lines.append(f"float m{t_ // 4}{t_ % 4} = float({c.L.load(mi, c.dtype(mi), f'{t_} * {co * p_n} + k * {p_n} + p')});")
    # A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]: first down the rows i, then along j
    for j in range(4):
        lines.append(f"float s0{j} = m0{j} + m1{j} + m2{j}; float s1{j} = m1{j} - m2{j} - m3{j};")
    for r in range(2):
        lines.append(f"float y{r}0 = s{r}0 + s{r}1 + s{r}2; float y{r}1 = s{r}1 - s{r}2 - s{r}3;")
    for r in range(2):
        for s_ in range(2):
            inner = c.finish(["n", "k", f"2 * th + {r}", f"2 * tw + {s_}"], f"y{r}{s_}", prefix=f"e{r}{s_}_")
            guard = []
            if h % 2 and r:
                guard.append(f"2 * th + {r} < {h}")
            if w % 2 and s_:
                guard.append(f"2 * tw + {s_} < {w}")
            if guard:
                lines.append(f"if ({' && '.join(guard)}) {{")
                lines += ["  " + ln for ln in inner]
                lines.append("}")
            else:
                lines += inner
    return _point(t, co * p_n, lines, [f"int k = tid / {p_n}; int p = tid % {p_n};"], c.d.name)


def _combine(kind: str, acc: str, v: str) -> str:
    return {"add": f"{acc} + {v}", "mul": f"{acc} * {v}", "max": f"max({acc}, {v})",
            "min": f"min({acc}, {v})"}[kind]


def _neutral(c: _Ctx, kind: str, dtype: str) -> str:
    if ctype(dtype) in ("float", "double"):
        return c.L.lit(_NEUTRAL[kind], dtype)
    big = {"int": 2 ** 31 - 1, "int64_t": 2 ** 63 - 1}.get(ctype(dtype), 2 ** 31 - 1)
    return c.L.lit({"add": 0, "mul": 1, "max": -big - 1, "min": big}[kind], dtype)


def _plan_reduction(c: _Ctx, t: Tuning) -> Plan:
    op = c.d.root
    a = op.attrs
    dims = [int(x) for x in a["dims"]]
    iters = a["iterators"]
    par = [d for d in range(len(dims)) if iters[d] == "parallel"]
    red = [d for d in range(len(dims)) if iters[d] == "reduction"]
    n_in = len(op.inputs)
    maps = a["maps"]
    points, length = _size([dims[d] for d in par]), _size([dims[d] for d in red])
    inner = red[-1]
    contiguous = any(m is not None and len(m) and tuple(m[-1]) == ("d", inner) for m in maps[:n_in])
    strategy, threads = reduction_plan(t, points, length, contiguous)
    body = a["body"]
    kinds = a["reduce"]
    ytypes = [body.nodes[y].dtype for y in body.yields]
    par_name = {d: f"c{j}" for j, d in enumerate(par)}
    red_name = {d: f"r{d}" for d in red}

    def coord(x: int) -> str:
        return par_name.get(x) or red_name[x]

    def arg(k: int, dtype: str) -> str:
        return c.ld(c.b(op.inputs[k]), c.map_coords(maps[k], coord))

    def extract(k: int, idx: list[str], dtype: str) -> tuple[list[str], str]:
        return c.gather(c.b(op.inputs[k]), idx)

    accs = [f"acc{k}" for k in range(len(body.yields))]
    body_lines, ys = emit_body(body, c.L, arg, coord, extract, "v", out=lambda k: accs[k])
    sequential = "seq" in kinds
    if sequential:
        # Accumulators start at their inits and take the body's yields, point after point.
        strategy = "thread"
        init_lines = []
        for k in range(len(ys)):
            if a["inits"][k] is not None:
                idx = a["inits"][k]
                init = c.ld(c.b(op.inputs[idx]), c.map_coords(maps[idx], coord))
            else:
                init = c.L.lit(a["init_consts"][k], ytypes[k])
            init_lines.append(f"{ctype(ytypes[k])} {accs[k]} = {init};")
        update = [f"{accs[k]} = {ys[k]};" for k in range(len(ys))]
    else:
        init_lines = [f"{ctype(ytypes[k])} {accs[k]} = {_neutral(c, kinds[k], ytypes[k])};" for k in range(len(ys))]
        update = [f"{accs[k]} = {_combine(kinds[k], accs[k], ys[k])};" for k in range(len(ys))]

    def final(k: int, value: str) -> tuple[list[str], str]:
        if sequential:
            return [], value
        if a["inits"][k] is not None:
            idx = a["inits"][k]
            init = c.ld(c.b(op.inputs[idx]), c.map_coords(maps[idx], coord))
        else:
            init = c.L.lit(a["init_consts"][k], ytypes[k])
        return [], _combine(kinds[k], init, value)

    finish: list[str] = []
    for k, out in enumerate(op.outputs):
        _, v = final(k, accs[k])
        i = c.b(out, True) if out in c.d.outputs else None
        oc = c.map_coords(maps[n_in + k], coord)
        if k == 0 and (c.d.epilogue is not None or out in c.d.outputs):
            finish.append(f"{ctype(ytypes[k])} res{k} = {v};")
            finish += c.finish(oc, f"res{k}")
        elif i is not None:
            finish.append(c.L.store(i, c.dtype(i), lin(c.shape(i), oc), v))
    par_dims = [dims[d] for d in par]
    if strategy == "thread":
        loops = [(red_name[d], dims[d]) for d in red]
        lines = init_lines + [f"for (int {v} = 0; {v} < {n}; {v}++) {{" for v, n in loops]
        lines += ["  " + ln for ln in body_lines + update] + ["}" * len(loops)] + finish
        return _point(t, points, lines, _coords(par_dims), c.d.name)
    # One workgroup per output point; threads stride over the flattened reduction space.
    red_dims = [dims[d] for d in red]
    rcoords = _coords(red_dims, src="ri", names=[red_name[d] for d in red])
    groups = fold_groups(points)
    shared = [(ctype(ytypes[k]), f"red{k}", threads) for k in range(len(ys))]
    ctx = {"block": threads, "groups_x": groups[0], "points": points, "length": length,
           "coord_lines": _coords(par_dims, "c", "gid"), "init_lines": init_lines,
           "rcoord_lines": rcoords, "body_lines": body_lines, "update_lines": update,
           "accs": accs, "red_types": [ctype(y) for y in ytypes], "combine": [_combine(kinds[k], "x", "y") for k in range(len(ys))],
           "finish_lines": finish, "name": c.d.name}
    return Plan("reduce_wg.j2", ctx, (threads, 1, 1), groups, shared)


# -- data movement --------------------------------------------------------------------------

def _plan_move(c: _Ctx, t: Tuning) -> Plan:
    op = c.d.root
    a = op.attrs
    out_shape = c.g.types[op.outputs[0]].shape
    rank = len(out_shape)
    o = [f"c{j}" for j in range(rank)]
    x = c.b(op.inputs[0])
    dt = ctype(c.g.types[op.outputs[0]].dtype)
    lines: list[str] = []
    if op.kind == "pad":
        lo = [int(v) for v in a["low"]]
        src = [f"(c{j} - {lo[j]})" if lo[j] else f"c{j}" for j in range(rank)]
        conds = [f"uint({s}) < {n}u" for s, n, l, h in zip(src, c.shape(x), lo, a["high"]) if l or h]
        lines.append(f"{dt} r = {c.L.lit(a['value'], c.dtype(x))};")
        lines.append(f"if ({' && '.join(conds) or 'true'}) r = {c.ld(x, src)};")
    elif op.kind == "concat":
        axis = int(a["axis"])
        lines.append(f"{dt} r;")
        start = 0
        for k, v in enumerate(op.inputs):
            i = c.b(v)
            n = c.shape(i)[axis]
            src = list(o)
            src[axis] = f"(c{axis} - {start})" if start else f"c{axis}"
            cond = f"c{axis} < {start + n}"
            kw = "if" if k == 0 else "else if"
            if k == len(op.inputs) - 1:
                lines.append(f"else r = {c.ld(i, src)};" if k else f"r = {c.ld(i, src)};")
            else:
                lines.append(f"{kw} ({cond}) r = {c.ld(i, src)};")
            start += n
    elif op.kind == "slice":
        sizes = [int(s) for s in a["sizes"]]
        lines.append(f"int lin_idx = {lin(out_shape, o)};")
        lines += _coords(sizes, "s", "lin_idx")
        src = [f"({int(off)} + s{j} * {int(st)})" for j, (off, st) in enumerate(zip(a["offsets"], a["strides"]))]
        lines.append(f"{dt} r = {c.ld(x, src)};")
    elif op.kind == "insert_slice":
        sizes = [int(s) for s in a["sizes"]]
        rel = [f"(c{j} - {int(off)})" for j, off in enumerate(a["offsets"])]
        conds = []
        for j, (r, n, st) in enumerate(zip(rel, sizes, a["strides"])):
            conds.append(f"{r} >= 0 && {r} < {(n - 1) * int(st) + 1}" + (f" && {r} % {int(st)} == 0" if int(st) != 1 else ""))
        if len(op.inputs) > 1:
            dflt = c.ld(c.b(op.inputs[1]), o)
        else:
            fill = a.get("dest_fill")
            dflt = c.L.lit(0 if fill is None else fill, c.dtype(x))
        lines.append(f"{dt} r = {dflt};")
        lines.append(f"if ({' && '.join(conds)}) {{")
        idx = [f"{r} / {int(st)}" if int(st) != 1 else r for r, st in zip(rel, a["strides"])]
        lines.append(f"  r = {c.L.load(x, c.dtype(x), lin(sizes, idx))};")
        lines.append("}")
    elif op.kind in ("copy", "reshape"):
        lines.append(f"{dt} r = {c.L.load(x, c.dtype(x), lin(out_shape, o))};")
    else:
        raise CompileError(f"no data-movement kernel for '{op.kind}'")
    lines += c.finish(o, "r")
    return _point(t, _size(out_shape), lines, _coords(out_shape), c.d.name)


# -- order-dependent ops: scan, sort, scatter --------------------------------------------------

def _plan_ordered(c: _Ctx, t: Tuning) -> Plan:
    """One thread per line (scan, sort) or per output element (scatter), looping in order: the
    result is the sequential one, whatever the thread count; every index is bounds-checked."""
    op = c.d.root
    a = op.attrs
    out = c.b(op.outputs[0], True)
    shape = c.shape(out)
    dt = ctype(c.dtype(out))
    lines: list[str] = []
    if op.kind in ("scan", "sort"):
        axis = int(a["axis"])
        n = shape[axis]
        line_dims = [s for d, s in enumerate(shape) if d != axis]
        names = [f"c{j}" for j in range(len(line_dims))]

        def at(i: str) -> list[str]:
            co = list(names)
            co.insert(axis, i)
            return co

        if op.kind == "scan":
            x = c.b(op.inputs[0])
            body_lines, ys = emit_body(a["body"], c.L, lambda k, _dt: "acc" if k == 0 else "xv", lambda d: "0",
                                       lambda k, idx, _dt: ([], "0"), "s")
            lines.append(f"{dt} acc = {c.L.lit(a['init'], c.dtype(out))};")
            lines.append(f"for (int i = 0; i < {n}; i++) {{")
            lines.append(f"  {dt} xv = {c.ld(x, at('i'))};")
            if a["inclusive"]:
                lines.append("  if (i == 0) { acc = xv; } else {")
                lines += ["    " + ln for ln in body_lines] + [f"    acc = {ys[0]};", "  }"]
                lines.append("  " + c.L.store(out, c.dtype(out), lin(shape, at("i")), "acc"))
            else:
                lines.append("  " + c.L.store(out, c.dtype(out), lin(shape, at("i")), "acc"))
                lines += ["  " + ln for ln in body_lines] + [f"  acc = {ys[0]};"]
            lines.append("}")
        else:
            outs = [c.b(v, True) for v in op.outputs]
            ins = [c.b(v) for v in op.inputs]
            lines.append(f"for (int i = 0; i < {n}; i++) {{")
            for i_in, i_out in zip(ins, outs):
                lines.append("  " + c.L.store(i_out, c.dtype(i_out), lin(shape, at("i")), c.ld(i_in, at("i"))))
            lines.append("}")
            key_t = ctype(c.dtype(outs[0]))
            rel = ">" if a["order"] == "descending" else "<"
            kexpr = (lambda e: f"uint({e})") if a.get("unsigned") else (lambda e: e)
            lines.append(f"for (int i = 1; i < {n}; i++) {{")
            saved = [f"p{k}" for k in range(len(outs))]
            for k, i_out in enumerate(outs):
                lines.append(f"  {ctype(c.dtype(i_out))} {saved[k]} = {c.ld(i_out, at('i'))};")
            lines.append("  int pos = i;")
            lines.append("  for (int j = i - 1; j >= 0; j--) {")
            lines.append(f"    {key_t} kj = {c.ld(outs[0], at('j'))};")
            lines.append(f"    if (!({kexpr(saved[0])} {rel} {kexpr('kj')})) break;")
            for k, i_out in enumerate(outs):
                lines.append("    " + c.L.store(i_out, c.dtype(i_out), lin(shape, at("(j + 1)")), c.ld(i_out, at("j"))))
            lines.append("    pos = j;")
            lines.append("  }")
            for k, i_out in enumerate(outs):
                lines.append("  " + c.L.store(i_out, c.dtype(i_out), lin(shape, at("pos")), saved[k]))
            lines.append("}")
        p = _point(t, _size(line_dims), lines, _coords(line_dims), c.d.name)
        p.reads_outputs = op.kind == "sort"
        return p
    # scatter: every output element looks through the update rows in order.
    upd, idx, orig = (c.b(v) for v in op.inputs)
    dim_map = [int(d) for d in a["dimension_map"]]
    n_rows, n_cols = c.shape(idx)[0], c.shape(idx)[1]
    o = [f"c{j}" for j in range(len(shape))]
    rest = [o[d] for d in range(len(shape)) if d not in dim_map]
    body_lines, ys = emit_body(a["body"], c.L, lambda k, _dt: "u" if k == 0 else "r", lambda d: "0",
                               lambda k, ix, _dt: ([], "0"), "s")
    # An index outside the output matches no element (nothing is written out of bounds) and is
    # recorded in the status slot as 2 and its value (gathers record 1): the runtime names it.
    s = len(c.d.values)
    lines.append(f"{dt} r = {c.ld(orig, o)};")
    lines.append(f"for (int i = 0; i < {n_rows}; i++) {{")
    lines.append("  bool hit = true;")
    for k in range(n_cols):
        lines.append(f"  int x{k} = int({c.ld(idx, ['i', str(k)])});")
        lines.append(f"  if (uint(x{k}) >= {shape[dim_map[k]]}u) {{ B{s}[0] = 2u; B{s}[1] = uint(x{k}); }}")
        lines.append(f"  hit = hit && x{k} == {o[dim_map[k]]};")
    lines.append("  if (hit) {")
    lines.append(f"    {ctype(c.dtype(upd))} u = {c.ld(upd, ['i'] + rest)};")
    lines += ["    " + ln for ln in body_lines] + [f"    r = {ys[0]};", "  }", "}"]
    lines.append(c.L.store(out, c.dtype(out), lin(shape, o), "r"))
    return _point(t, _size(shape), lines, _coords(shape), c.d.name)


# -- windows: depthwise conv, pooling, direct conv --------------------------------------------

def _window_ctx(c: _Ctx) -> dict[str, Any]:
    op = c.d.root
    a = op.attrs
    out_shape = c.g.types[op.outputs[0]].shape
    x = c.b(op.inputs[0])
    layout = a["layout"]
    nhwc = layout.startswith("nhwc")
    xs = c.shape(x)
    if layout == "ngchw":
        raise CompileError("grouped conv runs as a GEMM, not a window kernel")
    _, ch, h, w = (xs[0], xs[3], xs[1], xs[2]) if nhwc else xs
    pads = [int(p) for p in a.get("pads", [0, 0, 0, 0])]
    return {"x": x, "nhwc": nhwc, "H": h, "W": w, "C": ch, "pt": pads[0], "pl": pads[1],
            "sh": int(a["strides"][0]), "sw": int(a["strides"][1]), "dh": int(a["dilations"][0]),
            "dw": int(a["dilations"][1]), "out_shape": out_shape}


def _plan_window(c: _Ctx, t: Tuning) -> Plan:
    op = c.d.root
    a = op.attrs
    w = _window_ctx(c)
    nhwc = w["nhwc"]
    out_shape = w["out_shape"]
    x = w["x"]
    if nhwc:
        n_, oh, ow, ch = "c0", "c1", "c2", "c3"
    else:
        n_, ch, oh, ow = "c0", "c1", "c2", "c3"
    xdt = c.dtype(x)
    acc_t = ctype(xdt) if xdt in ("f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64") else "float"
    if op.kind == "pool":
        kh, kw = (int(k) for k in a["kernel"])
        mode = a["mode"]
        if acc_t == "float":
            acc0 = c.L.lit(float("-inf") if mode == "max" else 0.0, "f32")
            pad_v = c.L.lit(a.get("pad_value", 0.0), "f32")
        else:  # integer (and f64) pools accumulate in their own type
            acc0 = _neutral(c, "max" if mode == "max" else "add", xdt)
            pv = float(a.get("pad_value", 0.0))
            pad_v = acc0 if (mode == "max" and pv == float("-inf")) else c.L.lit(
                int(pv) if xdt[0] in "iu" else pv, xdt)
        upd = "r = max(r, v);" if mode == "max" else "r += v;"
        wload = None
    else:
        wi = c.b(op.inputs[1])
        ws = c.shape(wi)
        kh, kw = (ws[0], ws[1]) if nhwc else (ws[1], ws[2])
        acc0 = c.L.lit(0.0, "f32")
        upd = None
        pad_v = c.L.lit(a.get("pad_value", 0.0), "f32")
        wload = c.ld(wi, ["i", "j", ch] if nhwc else [ch, "i", "j"])
    xload = c.ld(x, [n_, "ih", "iw", ch] if nhwc else [n_, ch, "ih", "iw"])
    if op.kind != "pool":
        acc_t = "float" if acc_t != "double" else acc_t
    ctx = dict(w, KH=kh, KW=kw, n=n_, ch=ch, oh=oh, ow=ow, acc0=acc0, upd=upd, pad_v=pad_v, acc_t=acc_t,
               xload=xload, wload=wload, padded=any(int(p) for p in a.get("pads", [0, 0, 0, 0])),
               finish=c.finish([f"c{j}" for j in range(4)], "r"))
    p = _point(t, _size(out_shape), [], _coords(out_shape), c.d.name)
    p.template = "window.j2"
    p.ctx.update(ctx)
    return p


# -- GEMM ---------------------------------------------------------------------------------------

def _plan_dot(c: _Ctx, t: Tuning) -> Plan:
    """One thread per output element, a dot product over K in the output's own type (f64 and
    integer matmuls: the tiled GEMMs accumulate in float)."""
    op = c.d.root
    a = op.attrs
    out = op.outputs[0]
    out_shape = c.g.types[out].shape
    odt = c.g.types[out].dtype
    ia, ib = c.b(op.inputs[0]), c.b(op.inputs[1])
    sa = c.shape(ia)
    ta, tb = bool(a.get("transpose_a")), bool(a.get("transpose_b"))
    k = sa[-2] if ta else sa[-1]
    o = [f"c{j}" for j in range(len(out_shape))]
    pre = [o[0]] if op.kind == "batch_matmul" else []
    m_, n_ = o[-2], o[-1]
    acc_t = ctype(odt)
    # a batch matmul's operand shared across the batch (share_batch_operands) has no batch coordinate
    la = c.ld(ia, ([] if a.get("shared") == "a" else pre) + (["k", m_] if ta else [m_, "k"]))
    lb = c.ld(ib, ([] if a.get("shared") == "b" else pre) + ([n_, "k"] if tb else ["k", n_]))
    lines = [f"{acc_t} acc = {c.L.lit(0, odt)};",
             f"for (int k = 0; k < {k}; k++) acc += {acc_t}({la}) * {acc_t}({lb});"]
    lines += c.finish(o, "acc")
    return _point(t, _size(out_shape), lines, _coords(out_shape), c.d.name)


def _plan_gemm(c: _Ctx, t: Tuning) -> Plan:
    """matmul, batch_matmul and conv2d as C[b] (M x N) = A[b] (M x K) * B[b] (K x N)."""
    op = c.d.root
    a = op.attrs
    out_shape = c.g.types[op.outputs[0]].shape
    ia, ib = c.b(op.inputs[0]), c.b(op.inputs[1])
    helpers: list[tuple[str, str, str, list[str]]] = []
    vec_off: tuple[str | None, str | None] = (None, None)
    # Element offsets of A[m][k..k+3] / B[k][n..n+3] of f32 operands where those 4 are contiguous
    # and 16-byte aligned: the matrix GEMM of --precision then loads them as one float4.
    vec4_off: tuple[str | None, str | None] = (None, None)
    operands = (ia, ib)  # the bindings A and B are read from (an NCHW conv's A is its filter)
    # Where each operand's element lives, for the CUDA cp.async staging (_async_ctx): a "dense"
    # operand is read at ``off`` (an expression of b, m or n, and k) in binding ``buf``, with
    # ``vec`` where 4 neighbours along its shared-memory row are contiguous and 16-byte aligned;
    # an "im2col" one through the hb_pix / hb_tap helpers. Empty: the staging stays in registers.
    srcs: dict[str, dict[str, Any]] = {}
    b_run: tuple[str, int] | None = None  # (offset of B[k][n], run length along n) of a 1x1 conv
    im2col: dict[str, Any] | None = None  # an NCHW conv's B loads, split in pixel and tap parts
    portable: dict[str, Any] | None = None  # the same split for the register-staged GEMM (_portable_im2col)
    dw_ctx: dict[str, Any] | None = None  # B computed by a fused depthwise convolution (gemm.j2 DW)
    if op.kind in ("matmul", "batch_matmul"):
        sa, sb = c.shape(ia), c.shape(ib)
        batch = out_shape[0] if op.kind == "batch_matmul" else 1
        ta, tb = bool(a.get("transpose_a")), bool(a.get("transpose_b"))
        m, k = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
        n = sb[-2] if tb else sb[-1]
        pre = ["b"] if op.kind == "batch_matmul" else []
        # an operand shared across the batch (share_batch_operands) is read without the batch index
        pre_a = [] if a.get("shared") == "a" else pre
        pre_b = [] if a.get("shared") == "b" else pre
        load_a = c.ld(ia, pre_a + (["k", "m"] if ta else ["m", "k"]))
        load_b = c.ld(ib, pre_b + (["n", "k"] if tb else ["k", "n"]))
        a_kc, b_nc = not ta, not tb
        out = pre + ["m", "n"]
        # Element offsets of A[m][k..k+7] and B[k][n..n+7] where those 8 are contiguous and
        # 16-byte aligned: the matrix GEMM then loads them as one 16-byte vector.
        vec_off = (lin(sa, pre_a + ["m", "k"]) if a_kc and k % 8 == 0 else None,
                   lin(sb, pre_b + ["k", "n"]) if b_nc and n % 8 == 0 else None)
        vec4_off = (lin(sa, pre_a + ["m", "k"]) if a_kc and k % 4 == 0 else None,
                    lin(sb, pre_b + ["k", "n"]) if b_nc and n % 4 == 0 else None)
        srcs = {"a": {"kind": "dense", "buf": f"B{ia}", "off": lin(sa, pre_a + (["k", "m"] if ta else ["m", "k"])),
                      "vec": ta and m % 4 == 0, "dtype": c.dtype(ia)},
                "b": {"kind": "dense", "buf": f"B{ib}", "off": lin(sb, pre_b + (["n", "k"] if tb else ["k", "n"])),
                      "vec": not tb and n % 4 == 0, "dtype": c.dtype(ib)}}
    else:  # conv2d as implicit GEMM
        layout = a["layout"]
        xs, ws = c.shape(ia), c.shape(ib)
        oshape = out_shape
        st, dl = [int(s) for s in a["strides"]], [int(s) for s in a["dilations"]]
        pads = [int(p) for p in a.get("pads", [0, 0, 0, 0])]
        pad_v = c.L.lit(a.get("pad_value", 0.0), "f32")
        if layout in ("nchw", "ngchw"):
            g = xs[1] if layout == "ngchw" else 1
            cin, h, w = xs[-3:]
            f = ws[-4]
            kh, kw = ws[-2:]
            oh, ow = oshape[-2:]
            nb = xs[0]
            batch, m, n, k = g, f, nb * oh * ow, cin * kh * kw
            pre = ["b"] if layout == "ngchw" else []
            load_a = c.L.load(ib, c.dtype(ib), f"{'b * ' + str(f * k) + ' + ' if pre else ''}m * {k} + k")
            operands = (ib, ia)
            if k % 4 == 0:
                vec4_off = (f"{'b * ' + str(f * k) + ' + ' if pre else ''}m * {k} + k", None)
            if k % 8 == 0 and c.dtype(ib) in ("f16", "bf16") and c.dtype(ia) == "f32":
                # a 16-bit filter (a weight converted at compile time, passes/convert_weights.py):
                # 8 along K as one 16-byte copy (the mma.sync GEMM's cp.async staging)
                vec_off = (f"{'b * ' + str(f * k) + ' + ' if pre else ''}m * {k} + k", None)
            xc = (["nn", "b", "ci", "ih", "iw"] if pre else ["nn", "ci", "ih", "iw"])
            im2col_k = [f"int ci = k / {kh * kw};", f"int ki = (k / {kw}) % {kh};", f"int kj = k % {kw};"]
            im2col_n = [f"int nn = n / {oh * ow};", f"int oy = (n / {ow}) % {oh};", f"int ox = n % {ow};"]
            load_b = "hb_im2col(b, k, n)"
            if (kh, kw) == (1, 1) and st == [1, 1] and not any(pads):
                # a 1x1 stride-1 unpadded conv reads B[k][n] = x[n / HW][k][n % HW]: runs along n
                # are contiguous within an image (the mma.sync GEMM loads them as vectors)
                hw = h * w
                b_run = ((f"(n / {hw}) * {xs[-4] * cin * hw if pre else cin * hw} + "
                          f"{'b * ' + str(cin * hw) + ' + ' if pre else ''}k * {hw} + n % {hw}"), hw)
            # im2col split in a pixel part (n: computed once per thread) and a filter-tap part (k:
            # once per k step and row), for the mma.sync GEMM's B loads; x[...] = B[nbase + kbase]
            nstride = (xs[-4] * cin * h * w) if pre else cin * h * w
            im2col = {"n": [f"int nn = n / {oh * ow};", f"int oy = (n / {ow}) % {oh};", f"int ox = n % {ow};",
                            f"int ihb = oy * {st[0]} - {pads[0]};", f"int iwb = ox * {st[1]} - {pads[1]};",
                            (f"int nbase = nn * {nstride} + {'b * ' + str(cin * h * w) + ' + ' if pre else ''}"
                             f"ihb * {w} + iwb;")],
                      "k": [f"int ci = k / {kh * kw};", f"int kh_ = ((k / {kw}) % {kh}) * {dl[0]};",
                            f"int kw_ = (k % {kw}) * {dl[1]};", f"int kbase = ci * {h * w} + kh_ * {w} + kw_;"],
                      "H": h, "W": w, "pad": pad_v, "load": c.L.load(ia, c.dtype(ia), "nbase + kbase"),
                      # 4-byte cp.async of f32 elements (tf32), zero-filling the padding
                      "buf": f"B{ia}", "zero": _zero(a.get("pad_value", 0.0)) and c.dtype(ia) == "f32",
                      "taps": kh * kw}
            out = ([f"(n / {oh * ow})", "b", "m", f"((n / {ow}) % {oh})", f"(n % {ow})"] if pre else
                   [f"(n / {oh * ow})", "m", f"((n / {ow}) % {oh})", f"(n % {ow})"])
            a_kc, b_nc = True, True
            fn_k, fn_n = im2col_k, im2col_n
            g_off = f" + b * {cin * h * w}" if pre else ""
            pix = [f"int nn = n / {oh * ow}; int oy = (n / {ow}) % {oh}; int ox = n % {ow};",
                   f"return make_int3(nn * {g * cin * h * w}{g_off}, oy * {st[0]} - {pads[0]}, ox * {st[1]} - {pads[1]});"]
            tap = [f"int ci = k / {kh * kw}; int ki = (k / {kw}) % {kh}; int kj = k % {kw};",
                   f"int ih = p.y + ki * {dl[0]}; int iw = p.z + kj * {dl[1]};",
                   f"return (uint(ih) < {h}u && uint(iw) < {w}u) ? p.x + ci * {h * w} + ih * {w} + iw : -1;"]
            one = kh == kw == 1 and st == [1, 1] and pads == [0, 0, 0, 0] and (oh * ow) % 4 == 0
            ktab = None
            if kh * kw > 1 and 8 * k <= _KTAB_BYTES:
                # k -> (ci, ki, kj) by table: per k, the offset of its tap from the pixel's
                # (top-left) element and its (row, column) displacement, packed in 16 bits each;
                # a warp's lanes read one k (the tile's rows are K), a constant-cache broadcast
                ktab = [(ci * h * w + ki * dl[0] * w + kj * dl[1], (ki * dl[0] << 16) | (kj * dl[1]))
                        for ci in range(cin) for ki in range(kh) for kj in range(kw)]
                pix[-1] = (f"return make_int3(nn * {g * cin * h * w}{g_off} + (oy * {st[0]} - {pads[0]}) * {w} + "
                           f"ox * {st[1]} - {pads[1]}, oy * {st[0]} - {pads[0]}, ox * {st[1]} - {pads[1]});")
                tap = ["int2 v = hb_ktab[k];", "int ih = p.y + (v.y >> 16); int iw = p.z + (v.y & 0xffff);",
                       f"return (uint(ih) < {h}u && uint(iw) < {w}u) ? p.x + v.x : -1;"]
            portable = _portable_im2col(nb=g * cin * h * w, g_off=g_off, hw=(h, w), ohw=(oh, ow), kk=(kh, kw), st=st,
                                   dl=dl, pads=pads, pad=pad_v, load=c.L.load(ia, c.dtype(ia), "o"))
            srcs = {"a": {"kind": "dense", "buf": f"B{ib}", "off": f"{'b * ' + str(f * k) + ' + ' if pre else ''}m * {k} + k",
                          "vec": False, "dtype": c.dtype(ib)},
                    # a 1x1 stride-1 unpadded convolution reads 4 neighbouring pixels of one channel
                    # at once where an image's pixels come in whole 4s
                    "b": {"kind": "im2col", "buf": f"B{ia}", "pix": pix, "tap": tap, "n": n, "vec": one, "ktab": ktab,
                          "off": f"(n / {oh * ow}) * {g * cin * oh * ow}{g_off} + k * {oh * ow} + n % {oh * ow}",
                          "dtype": c.dtype(ia)}}
            if c.d.prologue is not None:
                # B is a fused depthwise convolution's result (passes/fuse_depthwise.py): each
                # element computed as it is staged, through registers (no copy can compute it)
                dw_ctx = _dw_prologue(c, c.d.prologue, oh, ow)
                load_b = "hb_dw_not_staged_here"  # only gemm.j2's register staging (DW) computes it
                im2col = portable = b_run = None
                srcs = {}
        else:  # nhwc_hwcf / nhwc_fhwc: M = pixels, N = F
            nb, h, w, cin = xs
            if layout == "nhwc_hwcf":
                kh, kw, _, f = ws
            else:
                f, kh, kw, _ = ws
            oh, ow = oshape[1], oshape[2]
            batch, m, n, k = 1, nb * oh * ow, f, kh * kw * cin
            xc = ["nn", "ih", "iw", "ci"]
            fn_k = [f"int ki = k / {kw * cin};", f"int kj = (k / {cin}) % {kw};", f"int ci = k % {cin};"]
            fn_n = [f"int nn = n / {oh * ow};", f"int oy = (n / {ow}) % {oh};", f"int ox = n % {ow};"]
            load_a = "hb_im2col(b, k, m)"
            load_b = c.L.load(ib, c.dtype(ib), f"k * {f} + n" if layout == "nhwc_hwcf" else f"n * {k} + k")
            if layout == "nhwc_hwcf" and f % 4 == 0:
                vec4_off = (None, f"k * {f} + n")
            out = [f"(m / {oh * ow})", f"((m / {ow}) % {oh})", f"(m % {ow})", "n"]
            a_kc, b_nc = True, layout == "nhwc_hwcf"
            pix = [f"int nn = n / {oh * ow}; int oy = (n / {ow}) % {oh}; int ox = n % {ow};",
                   f"return make_int3(nn * {h * w * cin}, oy * {st[0]} - {pads[0]}, ox * {st[1]} - {pads[1]});"]
            tap = [f"int ki = k / {kw * cin}; int kj = (k / {cin}) % {kw}; int ci = k % {cin};",
                   f"int ih = p.y + ki * {dl[0]}; int iw = p.z + kj * {dl[1]};",
                   f"return (uint(ih) < {h}u && uint(iw) < {w}u) ? p.x + (ih * {w} + iw) * {cin} + ci : -1;"]
            srcs = {"a": {"kind": "im2col", "buf": f"B{ia}", "pix": pix, "tap": tap, "n": m, "vec": False,
                          "dtype": c.dtype(ia)},
                    "b": {"kind": "dense", "buf": f"B{ib}",
                          "off": f"k * {f} + n" if layout == "nhwc_hwcf" else f"n * {k} + k",
                          "vec": layout == "nhwc_hwcf" and f % 4 == 0, "dtype": c.dtype(ib)}}
        x_ld = c.ld(ia, xc)
        conds = f"uint(ih) < {h}u && uint(iw) < {w}u"
        if c.d.prologue is None:
            helpers.append(("float", "hb_im2col", "int b, int k, int n", [
                *fn_k, *fn_n, f"int ih = oy * {st[0]} - {pads[0]} + ki * {dl[0]};",
                f"int iw = ox * {st[1]} - {pads[1]} + kj * {dl[1]};",
                f"float v = {pad_v};", f"if ({conds}) v = {x_ld};", "return v;"]))
    finish = "\n".join(c.finish(out, "{{VALUE}}"))
    for virt in c.virtual.values():  # a fused prologue's value has no binding to read
        if any(f"B{virt}[" in text for text in (load_a, load_b, *("\n".join(h[3]) for h in helpers))):
            raise CompileError(f"dispatch {c.d.name}: the GEMM reads its fused prologue's value from memory")
    problem = {"M": m, "N": n, "K": k, "load_a": load_a, "load_b": load_b, "a_kc": a_kc, "b_nc": b_nc,
               "out": out, "finish": finish, "finish4": _finish4(c, out, n) if c.L.name in STORE4_LANGS and GEMM_STORE4 else None,
               "batch": batch, "name": c.d.name}
    in_dt = c.dtype(ia)
    # --precision (compile._mark_precision): f32 operands rounded to tf32 / f16 / bf16 as they are
    # staged in shared memory, on matrix units where the target has them for that type, else on
    # the scalar GEMM below (the same rounding, f32 FMAs). An operand already of that type (a
    # weight converted at compile time, passes/convert_weights.py) is staged as it is.
    precision = a.get("precision", "fp32") if _rounded_gemm(c, op) else "fp32"
    if precision != "fp32":
        in_dt = "f32"
    if precision != "fp32":
        # Matrix units where they were measured to win on the H100: matmuls (MiniLM b8 tf32 0.62x,
        # f16 0.48x of fp32) and f16 / bf16 convolutions, but not a GEMM that split-K spreads over
        # the machine (ResNet-50 b1: tf32 2.8x, f16 1.9x slower than fp32 on matrix units) nor a tf32
        # convolution (ResNet-50 b8 1.24x slower): those round on the scalar GEMM.
        # On sm_80+ the mma.sync GEMM (two stages, cp.async, gemm_mma_sync.j2) takes every GEMM
        # and convolution, tf32 ones included, and the split-K ones where it measured faster
        # (tuning.mma_sync_takes_split): ResNet-50 on the H100, tf32 / f16 b8 4.05 / 3.72 ms on
        # WMMA and the rounded scalar GEMM, 2.23 / 1.71 here; b1 1.17 / 1.12 -> 0.85 / 0.67.
        if mma_sync_ok(t):
            wins = True
            st = mma_sync_tiles(t, precision, m, n, k, batch, **_conv_shape(op, im2col, precision))
            whole = not _rule_splits(c) or (st is not None and mma_sync_takes_split(t, st, m, n, k, batch))
        else:
            wins = op.kind in ("matmul", "batch_matmul") or precision in ("f16", "bf16")
            # the matrix GEMM splits K itself where the language has a device-scope fence
            whole = not _rule_splits(c) or (MMA_SPLIT_K and c.L.scratch_ok)
        frag = mma_fragment(t, precision) if wins and whole else None
    else:
        frag = mma_fragment(t, in_dt) if c.dtype(ib) == in_dt else None
    if dw_ctx is not None:
        frag = None  # (fp32 only, passes/fuse_depthwise.py): the register-staged scalar GEMM computes B
    kind = precision if precision != "fp32" else in_dt
    wg_op = (im2col is not None and WGMMA_CONVS) or (WGMMA_MATMULS and op.kind != "conv2d")
    wg_op = wg_op and c.dtype(ia) == c.dtype(ib)  # the wgmma GEMM takes no converted weight (yet)
    if frag is not None and wg_op and wgmma_ok(t, kind):
        # sm_90a: the warpgroup-MMA GEMM (gemm_wgmma.j2), where tuning.WGMMA_CONVS / _MATMULS allow
        wops = _wgmma_operands(c, op, srcs, im2col, load_a, load_b, a_kc, b_nc, m, n)
        wp = _plan_wgmma(c, t, kind, problem, wops, batch)
        if wp is not None:
            return wp
    shape = _conv_shape(op, im2col, kind)
    st_ = mma_sync_tiles(t, kind, m, n, k, batch, **shape) if frag is not None and mma_sync_ok(t) else None
    if st_ is not None:
        sp = gemm_split(c.d, c.g) if c.L.scratch_ok else None
        st_ = mma_sync_split(t, st_, kind, m, n, k, batch, sp.room if sp is not None else 1, shape["conv"])
        split = None
        if st_.split > 1 and sp is not None:
            per = -(-k // st_.split)
            depth = -(-per // st_.bk) * st_.bk  # whole BK steps per slice
            split = {"SPLIT": -(-k // depth), "DEPTH": depth, "PART": 0, "CTR": sp.partial_words,
                     "SB": len(c.d.values) + uses_extract(c.d)}
        rounded = tuple(precision != "fp32" and c.dtype(i) == "f32" for i in operands)
        # tf32 weights rounded at compile time (passes/convert_weights.py) go to the tensor cores
        # as they are; others are rounded (cvt.rna) as each fragment is read
        raw = tuple(kind == "tf32" and _tf32_weight(c, i) for i in operands)
        return _plan_mma_sync(c.L, st_, kind, rounded, problem, helpers, operands,
                              vec_off, vec4_off, b_run, batch, im2col, mma_sync_dynamic(t, st_, kind), split,
                              raw=raw)
    # split-K as the rule splits the scalar GEMM (tuning.split_k), the slices' workgroups
    # counted when the tiles are picked; each slice whole BK steps deep
    sp = gemm_split(c.d, c.g) if frag is not None and MMA_SPLIT_K and c.L.scratch_ok else None
    slices = sp.slices if sp is not None else 1
    mt = mma_tiles(t, frag, m, n, k, batch * slices) if frag is not None else None
    if mt is not None and sp is not None:
        slices = mma_split_slices(t, mt, m, n, k, batch, sp.room, slices)
    if mt is not None:
        ctx, shared = mma_context(c.L, mt, precision if precision != "fp32" else in_dt)
        ctx.update(problem)
        ctx["SPLIT"] = 1
        if sp is not None and slices > 1:
            per = -(-k // slices)
            depth = -(-per // mt.bk) * mt.bk
            slices = -(-k // depth)
        if sp is not None and slices > 1:
            ctx.update(SPLIT=slices, DEPTH=depth, PART=0, CTR=sp.partial_words,
                       SB=len(c.d.values) + uses_extract(c.d), GX=-(-n // mt.bn), GY=-(-m // mt.bm))
        else:
            slices = 1
        if precision != "fp32":  # f32 operands: 4 per 16-byte vector; 16-bit ones (converted weights): 8
            vec_off = tuple(off if c.dtype(i) != "f32" else None  # type: ignore[assignment]
                            for i, off in zip(operands, vec_off))
            vec4_off = tuple(off if c.dtype(i) == "f32" else None  # type: ignore[assignment]
                             for i, off in zip(operands, vec4_off))
        else:
            vec4_off = (None, None)
        if b_run is not None and vec_off[1] is None and vec4_off[1] is None:
            # a 1x1 conv's B: runs along n within an image (ResNet-50 b8 f16 on the H100's Vulkan)
            if c.dtype(operands[1]) == "f32" and precision != "fp32" and b_run[1] % 4 == 0:
                vec4_off = (vec4_off[0], b_run[0])
            elif c.dtype(operands[1]) in ("f16", "bf16") and b_run[1] % 8 == 0:
                vec_off = (vec_off[0], b_run[0])
        ctx["vec_a"], ctx["vec_b"] = (None if off is None else vector_load(c.L, i, off)
                                      for i, off in zip(operands, vec_off))
        ctx["vec4_a"], ctx["vec4_b"] = (None if off is None else c.L.load4(i, f"({off}) / 4")
                                        for i, off in zip(operands, vec4_off))
        # an NCHW conv's element-wise B through PIX (as the register-staged GEMM's): the pixel of
        # each owned column once, the tap per step (ResNet-50 b8 f16 on the H100's Vulkan)
        ctx["PIX"] = None
        if (portable is not None and problem["b_nc"] and c.L.name in _PIX_LANGS
                and ctx["vec_b"] is None and ctx["vec4_b"] is None):
            ctx["PIX"], ctx["PIXN"] = portable, mt.bn // math.gcd(mt.threads, mt.bn)
            if "hb_im2col" not in load_a:
                helpers = [h for h in helpers if h[1] != "hb_im2col"]
        gx, gy = -(-n // mt.bn), -(-m // mt.bm)
        p = Plan("gemm_mma.j2", ctx, (mt.threads, 1, 1), (gx, gy, batch * slices), shared, helpers=helpers)
        p.vec4 = {i for i, off in zip(operands, vec_off) if off is not None}
        p.vec4 |= {i for i, off in zip(operands, vec4_off) if off is not None}
        p.features.add("mma")
        p.matrix = _matrix_choice("coopmat" if c.L.name == "glsl" else "wmma",
                                  precision if precision != "fp32" else in_dt, ctx, slices)
        return p
    sp = gemm_split(c.d, c.g)
    cfg, source, key = gemm_config(c, t, m, n, k, batch, sp)
    tiles, slices, depth = cfg.tiles, 1, k
    if cfg.split > 1 and sp is not None:
        slices, depth = (sp.slices, sp.depth) if cfg.split == sp.slices else _slices(k, cfg.split)
    gx, gy = -(-n // tiles.bn), -(-m // tiles.bm)
    ctx = {"BM": tiles.bm, "BN": tiles.bn, "BK": tiles.bk, "TM": tiles.tm, "TN": tiles.tn,
           "TX": tiles.bn // tiles.tn, "TY": tiles.bm // tiles.tm, "WG": tiles.threads, "PAD": 4,
           "SPLIT": slices, "DEPTH": depth, "GX": gx, "GY": gy,
           "SB": len(c.d.values) + uses_extract(c.d), "PART": 0,
           "CTR": sp.partial_words if sp is not None else 0,
           "ROUND": round_expr(c.L, precision), "AK": 0, **problem}
    # Threads own runs of 4 rows / columns (cfg.runs) and read each run as one 16-byte shared
    # load (VEC) where the tile allows; WGSL keeps scalar reads.
    vec = cfg.runs and _vec_ok(c.L.name, tiles.tm, tiles.tn)
    ctx["VEC"] = vec
    ctx["ROW"] = _owned(tiles.tm, tiles.bm, "ty", cfg.runs)
    ctx["COL"] = _owned(tiles.tn, tiles.bn, "tx", cfg.runs)
    ctx["FRAG"] = cfg.frag and t.api in GEMM_FRAGMENTS
    # finish4: runs of 4 owned columns, N in whole 4s (gemm.j2 stores a run at once). SPLIT4: the
    # same runs of a split GEMM store and read their partial sums (laid out [slice][b][m][n]
    # whatever the output's layout) 16 bytes at a time, where the language has 16-byte scratch
    # access; its fix-up then runs finish4 where there is one, else the epilogue per element.
    runs4 = vec and tiles.tn % 4 == 0 and n % 4 == 0
    # (16-byte aligned: the scratch binding's offset is a multiple of 256, PART of 4 words)
    split4 = runs4 and slices > 1 and GEMM_SPLIT4 and c.L.scratch4_ok and ctx["PART"] % 4 == 0
    f4 = problem["finish4"] if runs4 and (slices == 1 or split4) else None
    ctx["finish4"] = f4[0] if f4 else None
    ctx["SPLIT4"] = split4
    ctx["FRAG_AHEAD"] = FRAG_AHEAD  # FRAG: fragments loaded this many K steps before their FMAs
    ctx["MIN_BLOCKS"] = gemm_min_blocks(t, cfg)  # 0: __launch_bounds__ without a block count
    sa, sb = tiles.bk * (tiles.bm + 4), tiles.bk * (tiles.bn + 4)
    if vec and c.L.name == "glsl":
        shared = [("vec4", "As", sa // 4), ("vec4", "Bs", sb // 4)]
    elif vec:
        shared = [("__align__(16) float", "As", sa), ("__align__(16) float", "Bs", sb)]
    else:
        shared = [("float", "As", sa), ("float", "Bs", sb)]
    stages = gemm_stages(t, tiles) if _async_ok(c, srcs, precision, a.get("pad_value", 0.0)) else 0
    ctx["ASYNC"] = stages
    # The register-staged path (Vulkan) reads an NCHW conv's B through PIX: per owned column the
    # pixel decomposed once before the K loop, per step only the filter tap (not hb_im2col's
    # six divisions per element and step). GLSL only: HIP, WGSL and CUDA sm_75 keep hb_im2col.
    ctx["PIX"] = portable if portable is not None and not stages and c.L.name in _PIX_LANGS else None
    staging = _glsl_staging(c, t, cfg, slices, depth, operands, vec4_off, srcs, sa + sb) if not stages else {}
    ctx.update({"DB": False, "VA": None, "VB": None, **staging})
    ctx["DW"] = dw_ctx
    if dw_ctx is not None:
        if stages or ctx["VB"] is not None or ctx["PIX"] is not None or not problem["b_nc"]:
            raise CompileError(f"dispatch {c.d.name}: a fused depthwise convolution needs the register-staged GEMM")
        ctx["DWN"] = tiles.bn // math.gcd(tiles.threads, tiles.bn)
    if ctx["VB"] is not None:
        ctx["PIX"] = None  # B comes in runs of 4 pixels (a 1x1 convolution), not through the taps
    p_vec4 = {i for i, x in zip(operands, ("VA", "VB")) if ctx[x] is not None}
    p_vec4 |= f4[1] if f4 else set()  # (GLSL: the outputs' vec4 views)
    if ctx["PIX"] is not None:
        helpers = [h for h in helpers if h[1] != "hb_im2col"]
        # element e of a thread is column (lid + e * WG) % BN: PIXN distinct ones, e's is e % PIXN
        ctx["PIXN"] = tiles.bn // math.gcd(tiles.threads, tiles.bn)
    if ctx["VB"] is not None and "hb_im2col" not in load_a:  # (an NHWC conv's A still reads it)
        helpers = [h for h in helpers if h[1] != "hb_im2col"]
    if ctx["DB"]:
        shared = [(ty_, name, 2 * size) for ty_, name, size in shared]
    if stages:
        ctx.update(_async_ctx(srcs, tiles))
        helpers = [h for h in helpers if h[1] != "hb_im2col"]
        for name in ("a", "b"):
            src = srcs[name]
            if src["kind"] == "im2col":
                bound = "M" if name == "a" else "N"
                helpers += [("int3", "hb_pix", "int b, int n",
                             [f"if (n >= {ctx[bound]}) return make_int3(0, -(1 << 28), 0);", *src["pix"]]),
                            ("int", "hb_tap", "int3 p, int k", src["tap"])]
                if src.get("ktab"):
                    ctx["constants"] = [("int2", "hb_ktab", src["ktab"])]
        # AK: A, contiguous along K in memory, copied 16 bytes (4 along K) at a time into a
        # K-contiguous tile As[m][k]; a thread then reads 4 steps of one owned row at once.
        lda_k = tiles.bk + 4
        if (GEMM_AK and srcs["a"]["kind"] == "dense" and problem["a_kc"] and k % 4 == 0 and tiles.bk % 4 == 0
                and depth % 4 == 0 and stages * 4 * (tiles.bm * lda_k + sb) <= t.shared_bytes):
            ctx["AK"] = lda_k
            sa = tiles.bm * lda_k
        shared = [("__align__(16) float", "As", sa * stages), ("__align__(16) float", "Bs", sb * stages)]
    if slices > 1:
        shared.append(("int", "hb_last", 1))
    p = Plan("gemm.j2", ctx, (tiles.threads, 1, 1), (gx, gy, batch * slices), shared, helpers=helpers)
    p.vec4 = p_vec4
    p.gemm = {"problem": config_problem(c.d.root, c.g.types), "key": key, "config": cfg.to_dict(),
              "source": source}
    return p


def _dw_prologue(c: _Ctx, pro: dict[str, Any], oh: int, ow: int) -> dict[str, Any]:
    """gemm.j2's DW: B[k][n] of a 1x1 convolution computed by the fused depthwise convolution
    (NCHW, passes/fuse_depthwise.py) at channel ``k`` and pixel ``n`` (image, row, column of its
    ``oh`` x ``ow`` output). ``pix``: from ``n``, the offset ``xb`` of the window's top-left input
    element of channel 0 and ``xm``, a bit per tap inside the input (the others read the padding
    value, so nothing outside the input is read); ``load[t]``: tap t's input at ``o`` (``xb`` +
    the channel's plane); ``wload[t]``: its filter value for channel ``k``; ``epi``: the
    depthwise epilogue (bias, clip) from the window's sum ``r`` back into ``r``."""
    dw, ep = pro["root"], pro["epilogue"]
    a = dw.attrs
    x, w = c.b(dw.inputs[0]), c.b(dw.inputs[1])
    _, ch, h, wd = c.shape(x)
    _, kh, kw = c.shape(w)
    st, dl = [int(v) for v in a["strides"]], [int(v) for v in a["dilations"]]
    pads = [int(p) for p in a.get("pads", [0, 0, 0, 0])]
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    pix = [f"int dwn = n / {oh * ow}; int dwy = (n / {ow}) % {oh}; int dwx = n % {ow};",
           f"int ih0 = dwy * {st[0]} - {pads[0]}; int iw0 = dwx * {st[1]} - {pads[1]};",
           f"int xb = dwn * {ch * h * wd} + ih0 * {wd} + iw0;", "uint xm = 0u;"]
    for t, (i, j) in enumerate(taps):
        pix.append(f"if (uint(ih0 + {i * dl[0]}) < {h}u && uint(iw0 + {j * dl[1]}) < {wd}u) xm |= {1 << t}u;")
    ctx = {"T": len(taps), "HW": h * wd, "pix": pix, "pad": c.L.lit(a.get("pad_value", 0.0), "f32"),
           "load": [c.L.load(x, c.dtype(x), f"o + {i * dl[0] * wd + j * dl[1]}") for i, j in taps],
           "wload": [c.L.load(w, c.dtype(w), f"k * {kh * kw} + {t}") for t in range(len(taps))], "epi": []}
    if ep is None:
        return ctx
    ea = ep.attrs
    slot = ep.inputs.index(dw.outputs[0])
    coords = ["dwn", "k", "dwy", "dwx"]
    dim_of = {int(r[1]): coords[j] for j, r in enumerate(ea["maps"][slot]) if r[0] == "d"}

    def arg(i: int, dtype: str) -> str:
        if i == slot:
            return "r"
        return c.ld(c.b(ep.inputs[i]), c.map_coords(ea["maps"][i], lambda d: dim_of[d]))

    def extract(i: int, idx: list[str], dtype: str) -> str:
        raise CompileError(f"dispatch {c.d.name}: a fused depthwise epilogue cannot gather")

    body, ys = emit_body(ea["body"], c.L, arg, lambda d: dim_of[d], extract, "dwe")
    ctx["epi"] = [f"int dwn = n / {oh * ow}; int dwy = (n / {ow}) % {oh}; int dwx = n % {ow};",
                  *body, f"r = float({ys[0]});"]
    return ctx


#: What the GLSL register-staged GEMM may use (_glsl_staging): True (wherever it applies),
#: False, or for ``vec4_b`` "wide" (thread tiles of 32+ outputs, unsplit). Measured on the H100
#: through Vulkan (ResNet-50 b8 fp32, tuned tiles, per kernel / whole model): two stages raised
#: registers 64 -> 105 and ran 0.85-1.46x (whole 1.12x slower); A in 16-byte loads 0.79-1.38x
#: (whole 1.04x slower); B in 16-byte loads 0.77-0.80x on the 128x64 8x4 tiles of 1x1
#: convolutions, up to 1.21x on 4x4 tiles (whole 0.99x).
GLSL_STAGING: dict[str, bool | str] = {"double": False, "vec4_a": False, "vec4_b": "wide"}


def _glsl_staging(c: _Ctx, t: Tuning, cfg: GemmConfig, slices: int, depth: int, operands: tuple[int, int],
                  vec4_off: tuple[str | None, str | None], srcs: dict[str, dict[str, Any]],
                  words: int) -> dict[str, Any]:
    """gemm.j2's register staging on GLSL (Vulkan has no cp.async): ``DB``, two shared stages
    (the tile of step i + 1 is stored while stragglers still multiply step i's, so one barrier
    per step, not two) where twice the tiles fit the target's shared memory; ``VA`` / ``VB``,
    the 16-byte load of 4 neighbours along K of A / along N of B (a load4 expression of ``m``,
    ``n``, ``k``, ``b``) where the operand is dense there, 16-byte aligned and every K slice
    starts and ends on a multiple of 4, so a run is either wholly inside the operand or wholly
    outside. GLSL_STAGING says which of them are on everywhere; a configuration's ``double`` and
    ``vec_a`` (the tuner's per-problem choice) turn DB and VA on for its GEMM. HIP, WGSL and CUDA
    without cp.async keep the scalar single-stage staging."""
    if c.L.name != "glsl":
        return {}
    tiles = cfg.tiles
    out: dict[str, Any] = {}
    shared_bytes = 4 * 2 * words + (4 if slices > 1 else 0)
    if (GLSL_STAGING["double"] or cfg.double) and shared_bytes <= t.shared_bytes:
        out["DB"] = True
    a_off, b_off = vec4_off  # set where K (A) / N (B) is a multiple of 4
    if b_off is None and srcs.get("b", {}).get("kind") == "im2col" and srcs["b"].get("vec"):
        b_off = srcs["b"]["off"]  # a 1x1 stride-1 unpadded NCHW convolution: n runs of 4 pixels
    # A's runs are along K: the step (BK) and each K slice (DEPTH) in whole 4s
    if ((GLSL_STAGING["vec4_a"] or cfg.vec_a) and a_off is not None and c.dtype(operands[0]) == "f32" and tiles.bk % 4 == 0
            and (slices == 1 or depth % 4 == 0)):
        out["VA"] = c.L.load4(operands[0], f"({a_off}) / 4")
    wide = tiles.tm * tiles.tn >= 32 and slices == 1
    if ((GLSL_STAGING["vec4_b"] is True or (GLSL_STAGING["vec4_b"] == "wide" and wide))
            and b_off is not None and c.dtype(operands[1]) == "f32" and tiles.bn % 4 == 0):
        out["VB"] = c.L.load4(operands[1], f"({b_off}) / 4")
    return out


#: The languages whose register-staged GEMM reads an NCHW conv's B through gemm.j2's PIX (its
#: code is GLSL; CUDA C accepts it too, for register counts by ptxas off the GPU).
_PIX_LANGS = ("glsl",)


def _portable_im2col(nb: int, g_off: str, hw: tuple[int, int], ohw: tuple[int, int], kk: tuple[int, int],
                     st: list[int], dl: list[int], pads: list[int], pad: str, load: str) -> dict[str, Any] | None:
    """gemm.j2's PIX: an NCHW convolution's im2col operand B[k][n] for the register-staged GEMM,
    split in a pixel part (``pix``: from ``n``, the thread's fixed column, computed once before
    the K loop) and a tap part (``tap``: from ``k`` each step). The pixel part is two ints, ``xb``
    (the offset of the pixel's top-left input element, outside the input where it is padding) and
    ``xq`` (its input row and column, 16 bits each); where no tap can reach the padding (no pads)
    the padding test and ``xq`` are left out, the reads being in range by the output's size. The
    tap part ends in ``int o`` (the input offset), read where ``cond`` holds, else ``pad``.
    None where the coordinates do not fit in 16 bits (hb_im2col then)."""
    (h, w), (oh, ow), (kh, kw) = hw, ohw, kk
    rows = (-pads[0], (oh - 1) * st[0] - pads[0])
    cols = (-pads[1], (ow - 1) * st[1] - pads[1])
    reach = (rows[1] + (kh - 1) * dl[0], cols[1] + (kw - 1) * dl[1])
    if min(rows + cols) < -(1 << 15) + 1 or max(rows + cols + reach) >= (1 << 15) - 1:
        return None
    padded = min(rows + cols) < 0 or reach[0] >= h or reach[1] >= w
    pix = [f"int nn = n / {oh * ow}; int oy = (n / {ow}) % {oh}; int ox = n % {ow};",
           f"int ih0 = oy * {st[0]} - {pads[0]}; int iw0 = ox * {st[1]} - {pads[1]};",
           f"int xb = nn * {nb}{g_off} + ih0 * {w} + iw0;"]
    if padded:
        pix.append("int xq = (ih0 << 16) | (iw0 & 0xffff);")
    if kh * kw == 1:
        tap = ["int ci = k; int ki = 0; int kj = 0;"]
    else:
        # k >= 0: unsigned divisions by the constants (no sign fix-up)
        tap = [f"int ci = int(uint(k) / {kh * kw}u); int r = k - ci * {kh * kw};",
               f"int ki = int(uint(r) / {kw}u); int kj = r - ki * {kw};"]
    tap.append(f"int o = xb + ci * {h * w} + ki * {dl[0] * w} + kj * {dl[1]};")
    cond = None
    if padded:
        tap.append(f"int ih = (xq >> 16) + ki * {dl[0]}; int iw = ((xq << 16) >> 16) + kj * {dl[1]};")
        cond = f"uint(ih) < {h}u && uint(iw) < {w}u"
    return {"pix": pix, "tap": tap, "cond": cond, "packed": padded, "pad": pad, "load": load}


#: The largest im2col k table (8 bytes per k) in CUDA constant memory (64 KiB per module).
_KTAB_BYTES = 48 * 1024


def _zero(pad_value: Any) -> bool:
    """Whether a convolution's padding value is +0.0 (what a zero-filling copy writes)."""
    pv = float(pad_value)
    return pv == 0.0 and math.copysign(1.0, pv) > 0


def _tf32_weight(c: _Ctx, i: int) -> bool:
    """Whether binding ``i`` of ``c`` is (a view of) a weight whose values are rounded to tf32."""
    w = c.g.weights.get(c.g.root(c.d.values[i]))
    return w is not None and w.rounded == "tf32"


def _rounded_gemm(c: _Ctx, op: Op) -> bool:
    """Whether ``op`` is an f32 GEMM whose operands --precision rounds: f32 ones, or ones already
    of the staged type (weights converted at compile time: passes/convert_weights.py)."""
    staged = ("f32", op.attrs.get("precision", "fp32"))
    return c.g.types[op.outputs[0]].dtype == "f32" and all(c.g.types[v].dtype in staged for v in op.inputs[:2])


def _async_ok(c: _Ctx, srcs: dict[str, dict[str, Any]], precision: str, pad_value: Any) -> bool:
    """Whether the scalar GEMM of ``c`` may stage through cp.async (CUDA C only, sm_80+ decided by
    tuning.gemm_stages): both operands f32 and read as they are (no --precision rounding of the
    staged values), and an im2col view padded with zeros (what a zero-filling copy writes)."""
    if c.L.name != "cuda" or not srcs or precision != "fp32":
        return False
    if any(src["dtype"] != "f32" for src in srcs.values()):
        return False
    return _zero(pad_value)


def _async_ctx(srcs: dict[str, dict[str, Any]], tiles: Any) -> dict[str, Any]:
    """gemm.j2's cp.async context: per operand its source (SRC_A / SRC_B) and, where 16-byte
    copies apply, whether the tile's rows come in whole 4s (the source's ``vec`` already says
    the global side does)."""
    out = {}
    for name, size in (("a", tiles.bm), ("b", tiles.bn)):
        src = dict(srcs[name])
        src["vec"] = bool(src["vec"]) and size % 4 == 0
        out[f"SRC_{name.upper()}"] = src
    return out


def _plan_mma_sync(L: Lang, tiles: MmaTiles, kind: str, rounded: tuple[bool, bool], problem: dict[str, Any],
                   helpers: list[tuple[str, str, str, list[str]]], operands: tuple[int, int],
                   vec_off: tuple[str | None, str | None], vec4_off: tuple[str | None, str | None],
                   b_run: tuple[str, int] | None, batch: int, im2col: dict[str, Any] | None = None,
                   dynamic: int = 0, split: dict[str, int] | None = None,
                   raw: tuple[bool, bool] = (False, False)) -> Plan:
    """The mma.sync GEMM (sm_80+, gemm_mma_sync.j2) and how it stages each operand: cp.async of
    16 bytes where the operand's runs are contiguous, aligned and already of the staged type
    (f16 / bf16 tensors; f32 ones under tf32, rounded as fragments are read), a float4 load
    converted in registers for f32 ones under f16 / bf16, element loads otherwise; an NCHW
    convolution's B by its im2col pixel / tap split, copied element by element by 4-byte cp.async
    under tf32 where the padding is zero. ``dynamic``: bytes of dynamic shared memory for the
    stages (tuning.mma_sync_dynamic; 0: static arrays). ``split``: split-K (SPLIT slices of DEPTH,
    the scratch binding SB with partial sums from word PART and tile counters from CTR; as the
    scalar GEMM's, kernels.GemmSplit), None: unsplit. ``rounded``: per operand (A, B), whether it
    is f32 rounded to ``kind`` as it is staged (False: already of the staged type). ``raw``: per
    operand, whether a tf32 one's values are rounded already (a weight: passes/convert_weights.py),
    so its fragments skip the cvt.rna."""
    ctx, shared = mma_sync_context(tiles, kind, dynamic)
    ctx["RAW"] = dict(zip("ab", raw))
    slices = 1
    if split is not None:
        slices = split["SPLIT"]
        ctx.update(split)
    ctx.update(problem)
    # runs of 4 f32 / 8 16-bit elements, per operand
    offs = tuple(v4 if r else v8 for r, v4, v8 in zip(rounded, vec4_off, vec_off))
    if b_run is not None and offs[1] is None and b_run[1] % (4 if rounded[1] else 8) == 0:
        offs = (offs[0], b_run[0])
    modes, ptrs, bases, widths, vec4s, vec = {}, {}, {}, {}, {}, set()
    for x, i, off, r in zip("ab", operands, offs, rounded):
        modes[x] = "el"
        if off is None:
            continue
        vec.add(i)
        if not r or kind == "tf32":
            modes[x], ptrs[x], bases[x], widths[x] = "cp", f"(B{i} + ({off}))", f"B{i}", 4 if r else 8
        else:
            modes[x], vec4s[x], widths[x] = "v4", L.load4(i, f"({off}) / 4"), 4
    if modes["b"] == "el" and im2col is not None:
        # ResNet-50 b8 f16 on the H100: 2.62 -> 2.12 ms against element loads through hb_im2col
        nt = 32 if tiles.bn >= 128 else 16  # threads along n (coalesced), the rest along k
        if tiles.bn % nt == 0 and tiles.threads % nt == 0 and tiles.bk % (tiles.threads // nt) == 0:
            # tf32 B stages raw f32 (cvt.rna as fragments are read): cp.async where padding is 0
            modes["b"] = "cpi" if kind == "tf32" and im2col.get("zero") else "im2col"
            ctx.update(I2C=im2col, NT=nt, KT=tiles.threads // nt)
    ctx.update(MODE=modes, PTR=ptrs, BASE=bases, VEC=widths, VEC4=vec4s)
    gx, gy = -(-problem["N"] // tiles.bn), -(-problem["M"] // tiles.bm)
    ctx.update(GX=gx, GY=gy)
    p = Plan("gemm_mma_sync.j2", ctx, (tiles.threads, 1, 1), (gx, gy, batch * slices), shared, helpers=helpers,
             dynamic_shared=dynamic)
    p.vec4 = vec
    p.features.add("mma")
    p.matrix = _matrix_choice("mma.sync", kind, ctx, slices)
    if any(raw):
        p.matrix["rounded"] = "".join(x for x, r in zip("ab", raw) if r)
    return p


def _wgmma_operands(c: _Ctx, op: Op, srcs: dict[str, dict[str, Any]], im2col: dict[str, Any] | None,
                    load_a: str, load_b: str, a_kc: bool, b_nc: bool, m: int, n: int) -> tuple[dict, dict]:
    """What the wgmma GEMM needs of each operand (wgmma.wgmma_context): its binding, type, the
    offset of K-contiguous runs, the element load, an NCHW convolution's im2col split."""
    sa, sb = srcs["a"], srcs["b"]
    ka = sa["off"] if op.kind == "conv2d" or a_kc else None
    a = {"buf": sa["buf"], "index": int(sa["buf"][1:]), "dtype": sa["dtype"], "off": ka, "load": load_a,
         "lim": m}
    if im2col is not None:
        b = {"buf": sb["buf"], "index": int(sb["buf"][1:]), "dtype": sb["dtype"], "off": None, "load": load_b,
             "i2c": im2col, "lim": n}
    else:
        b = {"buf": sb["buf"], "index": int(sb["buf"][1:]), "dtype": sb["dtype"],
             "off": sb["off"] if not b_nc else None, "load": load_b, "lim": n}
    return a, b


def _plan_wgmma(c: _Ctx, t: Tuning, kind: str, problem: dict[str, Any], ops: tuple[dict, dict],
                batch: int) -> Plan | None:
    """The wgmma GEMM (sm_90a, gemm_wgmma.j2) with the tiles of tuning.wgmma_tiles, split along K
    where they say so and the schedule reserved scratch; None where no tile fits the target."""
    m, n, k = problem["M"], problem["N"], problem["K"]
    sp = gemm_split(c.d, c.g) if c.L.scratch_ok else None
    copied = all(wgmma_mode(kind, k, o) != "reg" for o in ops)
    tiles = wgmma_tiles(t, m, n, k, batch, sp.room if sp is not None else 1, copied)
    if tiles is None:
        return None
    ctx = wgmma_context(tiles, kind, k, *ops, load4=c.L.load4)
    slices, dynamic = 1, tiles.shared_bytes()
    if tiles.split > 1 and sp is not None:
        per_slice = -(-k // tiles.split)
        depth = -(-per_slice // ctx["BK"]) * ctx["BK"]  # whole BK steps per slice
        slices = -(-k // depth)
        ctx.update(SPLIT=slices, DEPTH=depth, PART=0, CTR=sp.partial_words,
                   SB=len(c.d.values) + uses_extract(c.d))
        dynamic += 16  # the last-slice flag after the stages
    ctx.update(problem)
    gx, gy = -(-n // tiles.bn), -(-m // tiles.bm)
    ctx.update(GX=gx, GY=gy)
    p = Plan("gemm_wgmma.j2", ctx, (tiles.threads, 1, 1), (gx, gy, batch * slices), [],
             dynamic_shared=dynamic)
    p.vec4 = wgmma_vec_bindings(ctx)
    p.features.add("mma")
    p.matrix = _matrix_choice("wgmma", kind, ctx, slices)
    return p


def _conv_shape(op: Op, im2col: dict[str, Any] | None, kind: str) -> dict[str, bool]:
    """What the mma.sync tile rule knows of a convolution (tuning.mma_sync_tiles): ``conv``, and
    ``gathered``: its B operand is the im2col of a kernel larger than 1x1 staged through
    registers (the mma.sync GEMM copies a tf32 one padded with zeros by cp.async instead)."""
    copied = kind == "tf32" and im2col is not None and im2col.get("zero")
    return {"conv": op.kind == "conv2d",
            "gathered": im2col is not None and im2col.get("taps", 1) > 1 and not copied}


def _matrix_choice(kernel: str, operands: str, ctx: dict[str, Any], slices: int) -> dict[str, Any]:
    """What the manifest records of a matrix-unit GEMM (manifest_schema.MatrixChoiceDoc)."""
    out = {"kernel": kernel, "operands": operands, "bm": ctx["BM"], "bn": ctx["BN"], "bk": ctx["BK"],
           "split": slices}
    if ctx.get("STAGES"):
        out["stages"] = ctx["STAGES"]
    return out


def _rule_splits(c: _Ctx) -> bool:
    """Whether the split-K rule (tuning.split_k) splits the GEMM of ``c``: what decides the
    matrix-unit paths under --precision, whatever scratch the schedule reserved beyond it."""
    sp = gemm_split(c.d, c.g)
    return sp is not None and sp.slices > 1


def _slices(k: int, split: int) -> tuple[int, int]:
    """(slices, depth) for ``split`` K slices of whole 16-deep steps (no slice left empty)."""
    per = -(-k // split)
    depth = -(-per // 16) * 16
    return -(-k // depth), depth


def _vec_ok(lang: str, tm: int, tn: int) -> bool:
    """Whether runs of 4 can be read as 16-byte shared loads in ``lang`` (GLSL and CUDA C)."""
    return lang in ("glsl", "cuda") and tm % 4 == 0 and tn % 4 == 0


def rule_config(t: Tuning, lang: str, m: int, n: int, k: int, batch: int, slices: int,
                conv: bool = False) -> GemmConfig:
    """The configuration the rules pick (tuning.gemm_tiles, split_k): runs of 4 wherever they
    can be read as 16-byte shared loads, and always on Vulkan (measured faster on the H100);
    strided elsewhere."""
    tiles = gemm_tiles(t, m, n, k, batch * slices, conv)
    runs = _vec_ok(lang, tiles.tm, tiles.tn) or t.api == "vulkan"
    return GemmConfig(tiles.bm, tiles.bn, tiles.bk, tiles.tm, tiles.tn, slices, runs)


def gemm_config(c: _Ctx, t: Tuning, m: int, n: int, k: int, batch: int,
                sp: GemmSplit | None) -> tuple[GemmConfig, str, str]:
    """(configuration, "tuned" or "rule", problem key) of the scalar GEMM of ``c``: the target's
    measured one for this problem when it has one that fits, else the rule's."""
    ok = sp is not None and c.L.scratch_ok
    key = problem_key(config_problem(c.d.root, c.g.types))
    tuned = dict(t.gemm_configs).get(key)
    if tuned is not None and tuned.problem(t, sp.room if ok else 1) is None:  # type: ignore[union-attr]
        return tuned, "tuned", key
    return (rule_config(t, c.L.name, m, n, k, batch, sp.slices if ok else 1,  # type: ignore[union-attr]
                        c.d.root.kind == "conv2d"), "rule", key)


def round_expr(lang: Lang, precision: str) -> str:
    """An f32 value (``{}``) rounded to ``precision`` and back, round-to-nearest-even: what the
    scalar GEMM stages under ``--precision`` where the target has no matrix units for it (the
    matrix GEMM rounds in its own conversion, matrix.mma_context)."""
    if precision == "f16":
        return lang.round_half("{}")
    return {"fp32": "{}", "bf16": "hb_round_bf16({})", "tf32": "hb_round_tf32({})"}[precision]


def _owned(t: int, b: int, var: str, contiguous: bool) -> list[str]:
    """The tile rows (or columns) a thread owns, as expressions of its index ``var``: with
    ``contiguous``, runs of 4 adjacent ones where ``t`` allows (the runs sit ``b / (t / 4)``
    apart), else ``t`` strided by the number of threads along that axis. On the H100, runs made
    Vulkan's ResNet-50 / MiniLM at batch 8 2-6% faster and CUDA's 5-14% slower."""
    if t % 4 == 0 and contiguous:
        runs = t // 4
        return [f"{var} * 4 + {(i // 4) * (b // runs) + i % 4}" for i in range(t)]
    stride = b // t
    return [f"{var} + {i * stride}" for i in range(t)]


def plan_dispatch(d: Any, g: Graph, t: Tuning, lang: Lang) -> Plan:
    """The kernel plan of dispatch ``d`` for target ``t`` in ``lang``."""
    plan = _plan_kind(d, g, t, lang)
    plan.status = uses_extract(d)
    plan.scratch = gemm_split(d, g) is not None
    return plan


@dataclass(frozen=True)
class GemmSplit:
    """A split-K GEMM's scratch binding and the rule's slices: ``room x batch x M x N`` f32
    partial sums (padded to a binding alignment), then ``counters`` uint32 words (one per output
    tile of the finest tiling, zero before and after every run; also padded). The counters come
    last so that the schedule can give every dispatch of a scratch slot the same counter words
    (compile._schedule). ``slices`` / ``depth``: what the rule picks (tuning.split_k; 1 / K: it
    runs unsplit unless a tuned configuration splits it); ``room``: the most slices any variant
    may use (tuning.split_k_room, at least ``slices``)."""

    slices: int
    depth: int
    counters: int

    batch: int
    m: int
    n: int
    room: int = 0

    @property
    def partial_words(self) -> int:
        """The partial sums' words, padded to 64 (256 bytes: the binding alignment)."""
        return -(-(max(self.room, self.slices) * self.batch * self.m * self.n) // 64) * 64

    @property
    def partial_bytes(self) -> int:
        return 4 * self.partial_words

    @property
    def counter_bytes(self) -> int:
        return 4 * self.counters

    @property
    def nbytes(self) -> int:
        return self.partial_bytes + self.counter_bytes


def _gemm_dims(op: Op, g: Graph) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a matmul, batch_matmul or conv2d as _plan_gemm sees it."""
    sa, sb = g.types[op.inputs[0]].shape, g.types[op.inputs[1]].shape
    a = op.attrs
    if op.kind in ("matmul", "batch_matmul"):
        batch = g.types[op.outputs[0]].shape[0] if op.kind == "batch_matmul" else 1
        m, k = (sa[-1], sa[-2]) if a.get("transpose_a") else (sa[-2], sa[-1])
        n = sb[-2] if a.get("transpose_b") else sb[-1]
        return int(batch), int(m), int(n), int(k)
    oshape = g.types[op.outputs[0]].shape
    if a["layout"] in ("nchw", "ngchw"):
        g_ = sa[1] if a["layout"] == "ngchw" else 1
        cin = sa[-3]
        return int(g_), int(sb[-4]), int(sa[0] * oshape[-2] * oshape[-1]), int(cin * sb[-2] * sb[-1])
    kh, kw = (sb[0], sb[1]) if a["layout"] == "nhwc_hwcf" else (sb[1], sb[2])
    f = sb[3] if a["layout"] == "nhwc_hwcf" else sb[0]
    return 1, int(sa[0] * oshape[1] * oshape[2]), int(f), int(kh * kw * sa[3])


class _Stores:
    """A Lang whose stores keep the value in a register ``hb_s{binding}_{j}`` and record where it
    goes (_finish4)."""

    def __init__(self, lang: Lang, c: Any):
        self._lang, self._c = lang, c
        self.j = 0
        self.stores: dict[int, list[tuple[str, str]]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lang, name)

    def store(self, i: int, dtype: str, off: str, value: str) -> str:
        if dtype != "f32" or int(self._c.shape(i)[-1]) % 4:
            raise _NotVector
        self.stores.setdefault(i, []).append((off, f"hb_s{i}_{self.j}"))
        return f"float hb_s{i}_{self.j} = {value};"


class _NotVector(Exception):
    pass


def _finish4(c: _Ctx, out: list[str], n: int) -> tuple[str, frozenset[int]] | None:
    """The GEMM's epilogue for 4 neighbouring columns ``n .. n + 3`` (values ``{{VALUE0}}`` ..
    ``{{VALUE3}}``) whose every store is one 16-byte store (Lang.store4), and the bindings it
    stores so: each output f32, its last axis the GEMM's n (so the 4 are contiguous) and a
    multiple of 4 long (so they are 16-byte aligned). None where that does not hold (gemm.j2 then
    stores element by element)."""
    if not out or out[-1] != "n" or n % 4:
        return None
    cap = _Stores(c.L, c)
    lines: list[str] = []
    saved = c.L
    try:
        c.L = cap  # type: ignore[assignment]
        for j in range(4):
            cap.j = j
            lines += c.finish([*out[:-1], f"(n + {j})"], f"{{{{VALUE{j}}}}}", prefix=f"v{j}_")
    except _NotVector:
        return None
    finally:
        c.L = saved
    for i, st in cap.stores.items():
        if len(st) != 4:
            return None
        offs = [off for off, _ in st]
        base = offs[0].replace("(n + 0)", "n")
        for j, off in enumerate(offs):
            last = f"(n + {j})"
            if off.count(last) != 1 or not (off == last or off.endswith(" + " + last)) \
                    or off.replace(last, "n") != base:
                return None
        lines.append(saved.store4(i, f"({base}) / 4", [v for _, v in st]))
    return "\n".join(lines), frozenset(cap.stores)


#: gemm.j2 finish4 (CUDA, GLSL): a run of 4 owned output columns stored as one 16-byte store (_finish4).
GEMM_STORE4 = True
STORE4_LANGS = ("cuda", "glsl")

#: gemm.j2 SPLIT4 (CUDA, GLSL): a split GEMM whose threads own runs of 4 columns (N in whole 4s)
#: stores and sums its partials 16 bytes at a time.
GEMM_SPLIT4 = True

#: gemm.j2 AK (cp.async GEMMs whose A is contiguous along K): A staged K-contiguous, 16 bytes a copy.
GEMM_AK = True

#: gemm.j2 FRAG: how many K steps ahead of its FMAs a thread's fragments are read from shared
#: memory (register sets: one more than this).
FRAG_AHEAD = 1


def gemm_split(d: Any, g: Graph) -> GemmSplit | None:
    """How dispatch ``d`` may split its f32 GEMM along K on GPUs (tuning.split_k for the rule's
    slices, tuning.split_k_room for the reservation), or None where no split is possible.

    A function of the dispatch alone, so that the schedule reserves one scratch range that every
    GPU variant of it may use (a variant may also run unsplit and leave the binding alone)."""
    op = as_dispatch(d).root
    if op.kind not in ("matmul", "batch_matmul", "conv2d"):
        return None
    # f32 GEMMs, a weight converted at compile time to the staged type included
    staged = ("f32", op.attrs.get("precision", "f32"))
    if g.types[op.outputs[0]].dtype != "f32" or any(g.types[v].dtype not in staged for v in op.inputs[:2]):
        return None
    batch, m, n, k = _gemm_dims(op, g)
    conv = op.kind == "conv2d"
    slices, depth = split_k(m, n, k, batch, conv)
    room = split_k_room(m, n, k, batch, conv)
    if room < 2:
        return None
    counters = -(-batch * -(-m // 8) * -(-n // 8) // 64) * 64  # 8x8: the finest tiling; 256-B aligned
    return GemmSplit(slices, depth, counters, batch, m, n, room)


def _plan_kind(d: Any, g: Graph, t: Tuning, lang: Lang) -> Plan:
    disp = as_dispatch(d)
    c = _Ctx(disp, g, lang)
    kind = disp.root.kind
    if kind == "generic":
        return _plan_generic(c, t)
    if kind == "row":  # a fused softmax / layer norm (passes/fuse_rows.py)
        from halbench.compiler.codegen.rows import plan_row

        return plan_row(c, t)
    if kind == "attention":  # a fused attention block (passes/fuse_attention.py)
        from halbench.compiler.codegen.attention import plan_attention

        return plan_attention(c, t)
    if kind in ("pad", "concat", "slice", "insert_slice", "copy", "reshape"):
        return _plan_move(c, t)
    if kind in ("depthwise_conv2d", "pool"):
        return _plan_window(c, t)
    if kind in ("matmul", "batch_matmul") and g.types[disp.root.outputs[0]].dtype not in ("f32", "f16", "bf16"):
        return _plan_dot(c, t)  # f64 and integer GEMMs: exact, in their own type
    if kind in ("matmul", "batch_matmul", "conv2d"):
        return _plan_gemm(c, t)
    if kind in ("scan", "sort", "scatter"):
        return _plan_ordered(c, t)
    if kind == "winograd_input":
        return _plan_winograd_input(c, t)
    if kind == "winograd_output":
        return _plan_winograd_output(c, t)
    raise CompileError(f"GPU codegen has no kernel for '{kind}' (dispatch {disp.name})")


def uses_extract(d: Any) -> bool:
    """Whether dispatch ``d`` indexes at computed indices (a body ``extract``, or a scatter's
    index rows): its kernel then takes the status binding (Plan.status), on every backend, the
    local one included."""
    disp = as_dispatch(d)
    if disp.root.kind == "scatter":
        return True
    for op in (disp.root, disp.epilogue):
        body = (getattr(op, "attrs", None) or {}).get("body") if op is not None else None
        if body is not None and any(n.op == "extract" for n in body.nodes):
            return True
    return False
