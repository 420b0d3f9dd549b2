"""The fused attention kernel (passes/fuse_attention.py): flash attention, one dispatch.

Workgroups: one per (batch*head, block of ``R`` query rows). Each query row is owned by ``G``
consecutive threads (lanes); a row's lanes split the keys (lane ``j`` takes keys ``j, j + G``..
of each tile), so each lane keeps its own online softmax: the running max, the running sum and
the ``Dv`` output accumulators, all in registers (unrolled scalars, no local arrays, so the
same C subset translates to WGSL), with the row's ``Dk`` query values. The keys are streamed
in tiles of ``TN``: the workgroup stages the K and V tile in shared memory (rows padded by one
element against bank conflicts; zeros past the sequence end), then each lane computes its
scores, applies the scale / mask links (their operands read at the score's coordinates), and
folds them into its softmax and accumulators. Scores never reach memory.

At the end the ``G`` lanes of a row combine (max, then rescaled sums of l and every output
element): with warp shuffles on CUDA (``__shfl_xor_sync``) and HIP (``__shfl_xor``) where the
target has subgroup arithmetic; through shared memory elsewhere (Vulkan, WebGPU: the tiles'
array, every lane's values at once, three barriers). Lane ``j`` stores the output elements
``d`` with ``d % G == j``. One shared array holds both tiles and the combine, sized within the
target's shared memory (smaller tiles / row blocks where it is small).

Indices: query rows past M are clamped to M - 1 for their loads and never stored; tile loads
clamp the key to N - 1 and store 0 past the end; shared indices stay below the array sizes by
the loop bounds (e < TN * Dk, j < TN, lane < G); the scale / mask operands' maps were proved in
bounds by the pass. Where the pass absorbed the transposes around the block, Q, K and V are read
(and O written) at the permuted coordinates of the transpose's other side: a permutation of
in-range coordinates (plus, for a head split out of merge_gemms' merged Q/K/V projection, the
constant index of Q, K or V, below its dim's size by construction), so in range too; the tile loop then walks whichever dim is contiguous in
memory fastest (coalesced loads).
"""

from __future__ import annotations

from typing import Any

from halbench.compiler.codegen.kernels import Plan, _coords, _Ctx
from halbench.compiler.codegen.lang import emit_body, lin
from halbench.compiler.codegen.rows import _subgroup_width
from halbench.compiler.codegen.tuning import Tuning, fold_groups

__all__ = ["attention_shape", "plan_attention"]

#: Keys per shared-memory tile.
TILE_KEYS = 128


def _pow2_floor(x: int) -> int:
    b = 1
    while b * 2 <= x:
        b *= 2
    return b


def _pow2_ceil(x: int) -> int:
    b = 1
    while b < x:
        b *= 2
    return b


def attention_shape(t: Tuning, m: int, n: int, dk: int, dv: int, bh: int = 1) -> dict[str, Any]:
    """Lanes per row ``G`` (about 16 keys each, at most 32), rows per workgroup ``R``, threads
    ``T``, keys per tile ``TN``, the combine (``shuffle`` width, or None: shared memory) and the
    shared floats: the K and V tiles, reused by the shared-memory combine ((Dv + 2) x T), within
    the target's shared memory (16 KiB on WebGPU). Where the ``bh`` heads give fewer workgroups
    than the target has compute units (MiniLM at batch 1: 12 heads), row blocks halve down to
    64 threads, so more units take part."""
    g = min(32, _pow2_floor(max(1, n // 16)))
    w = _subgroup_width(t)
    limit = max(1, min(128, t.max_invocations))
    g = min(g, _pow2_floor(limit))
    shuffle = w if (w is not None and 1 < g <= w <= limit) else None
    r = max(1, min(limit // g, _pow2_ceil(m)))
    while t.compute_units and r * g > 64 and bh * -(-m // r) < t.compute_units:
        r //= 2
    if shuffle is not None:  # every lane of a warp takes part in a shuffle
        r = max(r, shuffle // g)
    tn = max(g, min(TILE_KEYS, _pow2_ceil(n)))
    room = max(1024, int(t.shared_bytes or 16384) // 4)

    def floats(r: int, tn: int) -> int:
        combine = (dv + 2) * r * g if (g > 1 and shuffle is None) else 0
        return max(tn * (dk + 1 + dv + 1), combine)

    while floats(r, tn) > room and (tn > g or (r > 1 and shuffle is None)):
        if tn > g and (tn * (dk + dv + 2) >= (dv + 2) * r * g or r == 1 or shuffle is not None):
            tn //= 2
        else:
            r //= 2
    return {"G": g, "R": r, "T": r * g, "TN": tn, "shuffle": shuffle, "floats": floats(r, tn)}


def plan_attention(c: _Ctx, t: Tuning) -> Plan:
    L = c.L
    op = c.d.root
    a = op.attrs
    bh, M, N, DK, DV = (int(a[k]) for k in ("bh", "m", "n", "dk", "dv"))
    sh = attention_shape(t, M, N, DK, DV, bh)
    G, R, T, TN, shuffle = sh["G"], sh["R"], sh["T"], sh["TN"], sh["shuffle"]
    blocks = -(-M // R)
    qk, pv = a["qk"], a["pv"]
    neg_inf = L.float_lit(float("-inf"))
    exp = L.fn("exp")
    lines: list[str] = []
    shared: list[tuple[str, str, int]] = [("float", "hb_sm", sh["floats"])]  # K tile, V tile; the combine
    vbase = TN * (DK + 1)

    loads = a.get("loads") or {}
    store = a.get("store")
    roles = {qk.inputs[0]: "q", qk.inputs[1]: "k", pv.inputs[1]: "v"}
    lead: dict[tuple[int, ...], list[str]] = {}  # leading dims -> bh unravelled over them

    def unravel_bh(dims: tuple[int, ...]) -> list[str]:
        if dims not in lead:
            names = [f"hbh{len(lead)}_{i}" for i in range(len(dims))]
            lines.extend(_coords(dims, "", "bh", names))
            lead[dims] = names
        return lead[dims]

    def through(tr: Any, value_coords: list[str]) -> tuple[int, list[str]]:
        """Binding and coordinates of transpose ``tr``'s input at its output's coordinates."""
        m = tr.attrs["maps"][0]  # dims of the transpose's output, or constants (merge_gemms' Q/K/V index)
        return c.b(tr.inputs[0]), [value_coords[int(k)] if kind == "d" else str(int(k)) for kind, k in m]

    def operand(v: str, rows: str, cols: str) -> tuple[int, list[str]]:
        """Binding and coordinates of ``v`` (rank 3 with the batch, or 2: shared) at (rows, cols),
        through the transpose that produced it where the pass absorbed it."""
        tr = loads.get(roles.get(v, ""))
        if tr is not None:
            shape = tuple(int(x) for x in c.g.types[tr.outputs[0]].shape)
            return through(tr, unravel_bh(shape[:-2]) + [rows, cols])
        b = c.b(v)
        return b, (["bh"] if len(c.shape(b)) == 3 else []) + [rows, cols]

    lines += [f"int bh = gid / {blocks};",
              f"int mblk = gid - bh * {blocks};",
              f"int lane = lid % {G};" if G > 1 else "int lane = 0;",
              f"int r = lid / {G};" if G > 1 else "int r = lid;",
              f"int m = mblk * {R} + r;",
              f"bool live = m < {M};",
              f"int mq = min(m, {M - 1});",
              f"int rw = bh * {M} + mq;"]
    # the batch coordinates of every absorbed transpose, declared once, before the loops
    for tr in loads.values():
        unravel_bh(tuple(int(x) for x in c.g.types[tr.outputs[0]].shape)[:-2])
    if store is not None:
        unravel_bh(tuple(int(x) for x in c.g.types[store.inputs[0]].shape)[:-2])
    # the query row in registers
    for k in range(DK):
        b, co = operand(qk.inputs[0], str(k) if qk.attrs.get("transpose_a") else "mq",
                        "mq" if qk.attrs.get("transpose_a") else str(k))
        lines.append(f"float hq{k} = {c.ld(b, co)};")
    # the scale / mask links' row coordinates (their last coordinate is the key)
    prefixes: list[str] = []
    spaces: dict[tuple[int, ...], str] = {}
    for p in a["pre"]:
        outer = tuple(int(x) for x in p.attrs["dims"][:-1])
        if outer not in spaces:
            spaces[outer] = f"hc{len(spaces)}_"
            lines += _coords(outer, spaces[outer], "rw") if outer else []
        prefixes.append(spaces[outer])
    lines += [f"float hmx = {neg_inf};", "float hl = 0.0f;"] + [f"float ho{d} = 0.0f;" for d in range(DV)]

    # -- the key tiles ------------------------------------------------------------------------
    lines.append(f"for (int n0 = 0; n0 < {N}; n0 += {TN}) {{")
    body: list[str] = [L.barrier]  # the previous tile is consumed

    def cols_fast(v: str) -> bool:
        """Whether ``v``'s columns (last logical dim) are contiguous in the memory read."""
        tr = loads.get(roles.get(v, ""))
        if tr is None:
            return True
        m = tr.attrs["maps"][0]
        return tuple(m[-1]) == ("d", len(tr.attrs["dims"]) - 1)

    def stage(v: str, depth: int, transposed: bool, dst: str) -> None:
        """Copy a tile of ``TN`` keys x ``depth`` of operand ``v`` (keys along its rows when
        ``transposed``) into shared ``dst``; the loop walks the contiguous dim of memory fastest."""
        keys_fast = cols_fast(v) != transposed
        body.append(f"for (int e = lid; e < {TN * depth}; e += {T}) {{")
        if keys_fast:
            body.extend([f"  int jn = e % {TN};", f"  int kk = e / {TN};"])
        else:
            body.extend([f"  int jn = e / {depth};", f"  int kk = e % {depth};"])
        body.append(f"  int nn = min(n0 + jn, {N - 1});")
        b, co = operand(v, "nn" if transposed else "kk", "kk" if transposed else "nn")
        body.append(f"  hb_sm[{dst}jn * {depth + 1} + kk] = (n0 + jn < {N}) ? {c.ld(b, co)} : 0.0f;")
        body.append("}")

    # K: [Dk, N] (keys fastest) or, transposed, [N, Dk]; V: [N, Dv] or, transposed, [Dv, N]
    kt = bool(qk.attrs.get("transpose_b"))
    stage(qk.inputs[1], DK, kt, "")
    vt = bool(pv.attrs.get("transpose_b"))
    stage(pv.inputs[1], DV, not vt, f"{vbase} + ")
    body.append(L.barrier)

    inner: list[str] = ["int n = n0 + j;"]
    dot = " + ".join(f"hq{k} * hb_sm[j * {DK + 1} + {k}]" for k in range(DK))
    inner.append(f"float hs = {dot};")
    cur = "hs"
    for i, p in enumerate(a["pre"]):
        pa = p.attrs
        rank = len(pa["dims"])
        slot = a["slots"][i]
        prefix = prefixes[i]

        def coord(x: int, rank: int = rank, prefix: str = prefix) -> str:
            return "n" if x == rank - 1 else f"{prefix}{x}"

        def arg(k: int, dtype: str, p: Any = p, slot: int = slot, cur: str = cur, coord: Any = coord) -> str:
            if k == slot:
                return cur
            return c.ld(c.b(p.inputs[k]), c.map_coords(p.attrs["maps"][k], coord))

        def extract(*_: Any) -> str:
            raise AssertionError("fuse_attention admits no gathers")

        blines, ys = emit_body(pa["body"], L, arg, coord, extract, f"hp{i}_")
        inner += blines
        cur = ys[0]
    inner += [f"if ({cur} > hmx) {{",
              f"  float hsc = (hmx > {neg_inf}) ? {exp}(hmx - {cur}) : 0.0f;",
              "  hl = hl * hsc;"] + [f"  ho{d} = ho{d} * hsc;" for d in range(DV)] + [f"  hmx = {cur};", "}",
              f"float hpe = ({cur} > {neg_inf}) ? {exp}({cur} - hmx) : 0.0f;",
              "hl = hl + hpe;"] + [f"ho{d} = ho{d} + hpe * hb_sm[{vbase} + j * {DV + 1} + {d}];" for d in range(DV)]
    body.append(f"for (int j = lane; j < {TN}; j += {G}) {{")
    body.append(f"  if (n0 + j < {N}) {{")
    body += ["    " + ln for ln in inner]
    body += ["  }", "}"]
    lines += ["  " + ln for ln in body]
    lines.append("}")

    # -- the row's lanes combine ---------------------------------------------------------------
    quantities = ["hl"] + [f"ho{d}" for d in range(DV)]
    if G > 1 and shuffle is not None:
        shfl = "__shfl_xor_sync(0xffffffffu, {v}, o)" if t.api == "cuda" else "__shfl_xor({v}, o)"
        lines += ["float hmt = hmx;",
                  (f"for (int o = {G // 2}; o > 0; o >>= 1) {{ float y = {shfl.format(v='hmt')}; "
                   "hmt = (y > hmt) ? y : hmt; }"),
                  f"float hsc = (hmx > {neg_inf}) ? {exp}(hmx - hmt) : 0.0f;"]
        lines += [f"{q} = {q} * hsc;" for q in quantities]
        lines.append(f"for (int o = {G // 2}; o > 0; o >>= 1) {{")
        lines += [f"  {q} = {q} + {shfl.format(v=q)};" for q in quantities]
        lines.append("}")
    elif G > 1:  # through shared memory, once the last tile is consumed: maxima, then every sum
        base = f"min(r * {G}, {T - G})"
        lines += [L.barrier, "hb_sm[lid] = hmx;", L.barrier, f"float hmt = {neg_inf};",
                  f"for (int s = 0; s < {G}; s++) {{ float y = hb_sm[{base} + s]; hmt = (y > hmt) ? y : hmt; }}",
                  f"float hsc = (hmx > {neg_inf}) ? {exp}(hmx - hmt) : 0.0f;"]
        lines += [f"hb_sm[{(i + 1) * T} + lid] = {q} * hsc;" for i, q in enumerate(quantities)]
        lines.append(L.barrier)
        for i, q in enumerate(quantities):
            lines += [f"{q} = 0.0f;", f"for (int s = 0; s < {G}; s++) {q} = {q} + hb_sm[{(i + 1) * T} + {base} + s];"]
    ob = c.b(c.d.outputs[0], True)
    if store is not None:  # O is written through the transpose that read it: input coords -> its output's
        perm = [int(k) for _, k in store.attrs["maps"][0]]
        vin = tuple(int(x) for x in c.g.types[store.inputs[0]].shape)
        outer = unravel_bh(vin[:-2])

    def out_coords(d: int) -> list[str]:
        if store is None:
            return ["bh", "m", str(d)]
        src = outer + ["m", str(d)]
        it = [""] * len(perm)
        for j, k in enumerate(perm):
            it[k] = src[j]
        return it

    lines += ["if (live) {", "  float hinv = 1.0f / hl;"]
    for d in range(DV):
        st = L.store(ob, c.dtype(ob), lin(c.shape(ob), out_coords(d)), f"ho{d} * hinv")
        lines.append(f"  if (lane == {d % G}) {st}" if G > 1 else f"  {st}")
    lines.append("}")
    groups = fold_groups(bh * blocks)
    ctx = {"rows": bh * blocks, "groups_x": groups[0], "lines": lines, "name": c.d.name, "extensions": []}
    return Plan("row.j2", ctx, (T, 1, 1), groups, shared)
