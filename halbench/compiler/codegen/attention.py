"""The fused attention kernel (passes/fuse_attention.py): flash attention, one dispatch.

Workgroups: one per (batch*head, block of ``BM`` query rows). A thread owns ``RM`` query rows
(its row group's rows ``grp, grp + RG, ..``) and one of the ``G`` lanes of that row group; the
lanes split the keys (lane ``j`` takes keys ``j, j + G, ..`` of each tile). So each thread keeps
its own online softmax for its ``RM`` rows (running max, running sum, the ``Dv`` output
accumulators) in registers, with the rows' ``Dk`` query values: unrolled scalars, no local
arrays, so the same C subset translates to WGSL. Lanes never talk until the last tile is done.

The keys are streamed in tiles of ``TN``: the workgroup stages the K and V tile in shared
memory as 16-byte vectors (a key's row padded to an odd number of vectors: the 8 keys a quarter
warp reads fall in different banks), read from memory as 16-byte loads where the head dim is
contiguous and a multiple of 4, else 4 scalar loads per vector. Per tile a thread computes a
register tile of ``RM x TN/G`` scores (each shared vector feeds ``4 RM`` FMAs, and the lanes of
a warp's row groups read the same keys: broadcasts), applies the scale / mask links (their
operands read at the score's coordinates), folds the tile into its softmax once (one rescale
per tile), and accumulates P·V the same way (a shared vector of V feeds ``4 RM`` FMAs).

At the end the ``G`` lanes of a row combine (max, then the rescaled sums of l and every output
element): with warp shuffles on CUDA (``__shfl_xor_sync``) and HIP (``__shfl_xor``), with
``subgroupShuffleXor`` on Vulkan targets with subgroup shuffles (``Target.subgroup_shuffle``,
from the device's subgroup operations; there the row groups are
made of subgroup invocations: ``gl_SubgroupID`` / ``gl_SubgroupInvocationID``, so no layout
of invocations into subgroups is assumed, only full subgroups: the workgroup is a multiple of
every subgroup size the target may run, and G is at most the smallest). Where G divides Dv the
outputs are reduce-scattered (a lane sends the half of its elements its partner keeps, each
step: lane ``j`` ends with elements ``E j .. E j + E - 1``, E = Dv / G, one 16-byte store where
E is a multiple of 4); else every lane sums them all and lane ``j`` stores the vectors ``c``
with ``c % G == j``. Elsewhere (WebGPU, Vulkan without subgroups) through shared memory: every
thread's maxima, then its rescaled sums in passes, each summed by the lane that stores it.

Shape (attention_shape): 8 lanes per row, 2 rows per thread where Dk + Dv <= 64, 128 threads;
where the heads give fewer workgroups than the target has compute units, fewer rows per thread,
then up to 16 lanes per row, then smaller workgroups. The query rows live in registers, or with
``Q_SHARED`` in shared memory beside the tiles (fewer registers: 152 -> 128 for MiniLM on sm_90,
but the same time on the H100). H100, MiniLM-L6 (seq 128, 12 heads, head dim 32), per layer:
CUDA b8 35 -> 16 us, b1 20 -> 8.3 us; Vulkan b8 44 -> 16.8 us, b1 18.5 -> 6.7 us.

Indices: query rows past M are clamped to M - 1 for their loads and never stored; tile loads
clamp the key to N - 1 (V's rows past N are stored as 0, scores past N are -inf) and the head
dim to Dk - 1 / Dv - 1; the scale / mask operands are read at the clamped key. Shared indices
stay below the array's size by the loop bounds: ``e < TN * Dk4`` in the staging loops, keys
``lane + G * i < TN`` (lane < G, i < TN / G) times the padded row, the combine's slots
``p * T + lid < P * T`` and ``grp * G + s < T``; a row group computed from subgroup built-ins is
clamped below ``T / G``; the reduce-scatter's lane stores ``E lane + j < E G = Dv``. The scale / mask operands' maps were proved in bounds by the pass.
Where the pass absorbed the transposes around the block, Q, K and V are read (and O written) at
the permuted coordinates of the transpose's other side: a permutation of in-range coordinates
(plus, for a head split out of merge_gemms' merged Q/K/V projection, the constant index of Q, K
or V, below its dim's size by construction), so in range too; the staging loops walk whichever
dim is contiguous in memory fastest (coalesced loads).
"""

from __future__ import annotations

from typing import Any

from halbench.compiler.codegen.kernels import Plan, _coords, _Ctx
from halbench.compiler.codegen.lang import emit_body, lin
from halbench.compiler.codegen.rows import _subgroup_width
from halbench.compiler.codegen.tuning import Tuning, fold_groups

__all__ = ["attention_shape", "plan_attention"]

#: Keys per shared-memory tile (at most): on CUDA / HIP, and elsewhere. Measured on the H100
#: (MiniLM-L6 b8, 128 keys): 128 keys in one tile made NVRTC's kernel 24.4 -> 17.2 us (126
#: registers instead of 222); NVIDIA's Vulkan compiler did best with 64 (18.9 us vs 22+).
TILE_KEYS_CUDA = 128
TILE_KEYS = 64
#: Lanes per query row (at most): each lane takes every G-th key of a tile.
ROW_LANES = 8
#: Lanes per query row (at most) where the heads give few workgroups (attention_shape).
ROW_LANES_FEW = 16
#: The workgroup's query rows in shared memory (read as 16-byte vectors beside the keys) rather
#: than in each thread's registers.
Q_SHARED = False
#: Threads per workgroup (at most), before halving for more workgroups.
THREADS = 128
#: The lanes of a row combine their outputs by a reduce-scatter (each ends with Dv / G of them)
#: where G divides Dv, rather than every lane summing all Dv (_Emit.combine_shuffle).
REDUCE_SCATTER = True
#: Stands for the head-dim coordinate while a 16-byte access is checked (_Emit.vec_off).
_DEPTH = "hDEPTH"
#: Registers for a thread's query rows and output rows: RM * (Dk + Dv) at most this.
ROW_REGISTERS = 128


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


def _odd(x: int) -> int:
    """``x`` vectors, padded to an odd count (a key's row in shared memory)."""
    return x if x % 2 else x + 1


def attention_shape(t: Tuning, m: int, n: int, dk: int, dv: int, bh: int = 1) -> dict[str, Any]:
    """The kernel's shape for ``bh`` heads of M x N scores, head dims Dk, Dv: lanes per row
    ``G``, rows per thread ``RM``, threads ``T``, query rows per workgroup ``BM``, keys per
    tile ``TN``, the lanes' combine (``shuffle``: CUDA / HIP, ``subgroup``: Vulkan, ``shared``,
    or None for one lane), the padded rows of the K and V tiles (``SK4``, ``SV4`` vectors), the
    shared vectors and the shared combine's quantities per pass ``P``. Where the heads give fewer
    workgroups than the target has compute units (MiniLM at batch 1: 12 heads), a thread takes
    fewer rows, then workgroups get smaller, so more units take part."""
    limit = max(1, min(256, t.max_invocations))
    gmax = min(ROW_LANES_FEW, _pow2_floor(max(1, n // 8)), _pow2_floor(limit))  # keys >= 8 per lane
    g = min(ROW_LANES, gmax)
    combine: str | None = None
    tmin = g
    if g > 1:
        w = _subgroup_width(t)
        sizes = tuple(s for s in t.subgroup_sizes if s > 0)
        if t.api in ("cuda", "hip") and w is not None and g <= w <= limit:
            combine, tmin, gmax = "shuffle", w, min(gmax, w)
        elif t.api == "vulkan" and t.subgroup_shuffle and sizes and min(sizes) >= 2 \
                and max(sizes) <= limit:
            g = min(g, _pow2_floor(min(sizes)))
            combine, tmin, gmax = "subgroup", max(sizes), min(gmax, _pow2_floor(min(sizes)))
        else:
            combine = "shared"
    rm = 4
    while rm > 1 and (rm * (dk + dv) > ROW_REGISTERS or rm > _pow2_ceil(m)):
        rm //= 2
    threads = max(tmin, min(THREADS, limit, g * _pow2_ceil(-(-m // rm))))

    def blocks(rm: int, threads: int) -> int:
        return bh * -(-m // (rm * threads // g))

    while t.compute_units and blocks(rm, threads) < t.compute_units:
        if rm > 1:
            rm //= 2
        elif g > 1 and 2 * g <= min(gmax, threads):  # more lanes per row, fewer keys per lane
            g *= 2
        elif threads > max(tmin, 32):
            threads //= 2
        else:
            break
    tn = max(g, min(TILE_KEYS_CUDA if t.api in ("cuda", "hip") else TILE_KEYS, _pow2_ceil(n)))
    sk4, sv4 = _odd(-(-dk // 4)), _odd(-(-dv // 4))
    room = max(256, int(t.shared_bytes or 16384) // 16)
    while tn * (sk4 + sv4) > room and tn > g:
        tn //= 2
    tiles = tn * (sk4 + sv4) + (rm * threads // g * sk4 if Q_SHARED else 0)
    quantities = -(-rm // 4) + rm * -(-dv // 4)  # the shared combine's vectors per thread
    p = max(1, min(quantities, tiles // threads))
    vectors = max(tiles, p * threads if combine == "shared" else 0)
    return {"G": g, "RM": rm, "T": threads, "BM": rm * threads // g, "TN": tn, "combine": combine,
            "SK4": sk4, "SV4": sv4, "vectors": vectors, "P": p}


class _Emit:
    """One fused attention dispatch's lines, top to bottom."""

    def __init__(self, c: _Ctx, t: Tuning):
        self.c, self.t, self.L = c, t, c.L
        a = c.d.root.attrs
        self.a = a
        self.bh, self.M, self.N, self.DK, self.DV = (int(a[k]) for k in ("bh", "m", "n", "dk", "dv"))
        self.sh = attention_shape(t, self.M, self.N, self.DK, self.DV, self.bh)
        self.G, self.RM, self.T, self.BM, self.TN = (self.sh[k] for k in ("G", "RM", "T", "BM", "TN"))
        self.RG = self.T // self.G  # row groups
        self.CK = self.TN // self.G  # keys per lane and tile
        self.DK4, self.DV4 = -(-self.DK // 4), -(-self.DV // 4)
        self.qk, self.pv = a["qk"], a["pv"]
        self.loads = a.get("loads") or {}
        self.store = a.get("store")
        self.roles = {self.qk.inputs[0]: "q", self.qk.inputs[1]: "k", self.pv.inputs[1]: "v"}
        self.lead: dict[tuple[int, ...], list[str]] = {}  # leading dims -> bh unravelled over them
        self.lines: list[str] = []
        self.vec4: set[int] = set()
        self.neg_inf = self.L.float_lit(float("-inf"))
        self.exp = self.L.fn("exp")
        self.make4 = "make_float4" if self.L.vec4 == "float4" else "vec4"
        self.q_shared = Q_SHARED
        self.qbase = self.TN * (self.sh["SK4"] + self.sh["SV4"])  # after the K and V tiles

    # -- operands -------------------------------------------------------------------------------
    def unravel_bh(self, dims: tuple[int, ...]) -> list[str]:
        if dims not in self.lead:
            names = [f"hbh{len(self.lead)}_{i}" for i in range(len(dims))]
            self.lines.extend(_coords(dims, "", "bh", names))
            self.lead[dims] = names
        return self.lead[dims]

    def operand(self, v: str, rows: str, cols: str) -> tuple[int, list[str]]:
        """Binding and coordinates of ``v`` (rank 3 with the batch, or 2: shared) at (rows, cols),
        through the transpose that produced it where the pass absorbed it (its input's
        coordinates: the transpose's output coordinates permuted, or a constant select)."""
        c = self.c
        tr = self.loads.get(self.roles.get(v, ""))
        if tr is not None:
            shape = tuple(int(x) for x in c.g.types[tr.outputs[0]].shape)
            value = self.unravel_bh(shape[:-2]) + [rows, cols]
            m = tr.attrs["maps"][0]
            return c.b(tr.inputs[0]), [value[int(k)] if kind == "d" else str(int(k)) for kind, k in m]
        b = c.b(v)
        return b, (["bh"] if len(c.shape(b)) == 3 else []) + [rows, cols]

    def vec_off(self, b: int, co: list[str], depth_coord: str, depth: int) -> str | None:
        """The vector offset of 4 elements of binding ``b`` at coordinates ``co``, from the depth
        coordinate ``depth_coord`` (a multiple of 4; ``co`` names it ``_DEPTH``) on, where they are
        one aligned 16-byte access: the depth is the innermost, contiguous dim of ``b``, a multiple
        of 4 long (so every other stride is too), f32 at 256-byte aligned offsets; else None."""
        if depth % 4 or co[-1] != _DEPTH or int(self.c.shape(b)[-1]) % 4 or self.c.dtype(b) != "f32":
            return None
        self.vec4.add(b)
        return f"({lin(self.c.shape(b), [depth_coord if x == _DEPTH else x for x in co])}) / 4"

    def keys_fast(self, v: str, transposed: bool) -> bool:
        """Whether a tile of ``v`` (keys along its rows when ``transposed``) has its keys
        contiguous in memory."""
        _, co = self.operand(v, "hROW", "hCOL")
        return co[-1] == ("hCOL" if not transposed else "hROW")

    # -- the kernel -----------------------------------------------------------------------------
    def prologue(self) -> None:
        G, RG, M, BM = self.G, self.RG, self.M, self.BM
        blocks = -(-M // BM)
        self.lines += [f"int bh = gid / {blocks};", f"int mblk = gid - bh * {blocks};"]
        if self.sh["combine"] == "subgroup":  # row groups of subgroup invocations (module docstring)
            self.lines += [f"int lane = int(gl_SubgroupInvocationID) % {G};",
                           (f"int grp = min(int(gl_SubgroupID) * (int(gl_SubgroupSize) / {G}) + "
                            f"int(gl_SubgroupInvocationID) / {G}, {RG - 1});")]
        else:
            self.lines += [f"int lane = lid % {G};" if G > 1 else "int lane = 0;",
                           f"int grp = lid / {G};" if G > 1 else "int grp = lid;"]
        for r in range(self.RM):
            self.lines += [f"int m{r} = mblk * {BM} + {r * RG} + grp;", f"int mq{r} = min(m{r}, {M - 1});",
                           f"int rw{r} = bh * {M} + mq{r};"]
        # the batch coordinates of every absorbed transpose, declared once, before the loops
        for tr in self.loads.values():
            self.unravel_bh(tuple(int(x) for x in self.c.g.types[tr.outputs[0]].shape)[:-2])
        if self.store is not None:
            self.unravel_bh(tuple(int(x) for x in self.c.g.types[self.store.inputs[0]].shape)[:-2])

    def query_rows(self) -> None:
        """The thread's query rows in registers (``hq{r}_{k}``), or with Q_SHARED the workgroup's
        rows in shared memory after the K and V tiles (row ``r RG + grp`` of the block)."""
        c, L, DK = self.c, self.L, self.DK
        ta = bool(self.qk.attrs.get("transpose_a"))
        if self.q_shared:
            self.lines += self.stage_q()
            return
        for r in range(self.RM):
            for k4 in range(self.DK4):
                b, co = self.operand(self.qk.inputs[0], _DEPTH if ta else f"mq{r}", f"mq{r}" if ta else _DEPTH)
                off = self.vec_off(b, co, str(4 * k4), DK)
                if off is not None:
                    self.lines.append(f"{L.vec4} hqv{r}_{k4} = {L.load4(b, off)};")
                    self.lines += [f"float hq{r}_{4 * k4 + j} = hqv{r}_{k4}.{'xyzw'[j]};" for j in range(4)]
                    continue
                for k in range(4 * k4, min(DK, 4 * k4 + 4)):
                    b, co = self.operand(self.qk.inputs[0], str(k) if ta else f"mq{r}", f"mq{r}" if ta else str(k))
                    self.lines.append(f"float hq{r}_{k} = {c.ld(b, co)};")

    def vec4_at(self, v: str, c4: str, depth: int, at: Any) -> str:
        """Elements ``4 * c4`` .. ``+ 3`` of operand ``v`` along its depth dim as one vector: a
        16-byte load where aligned, else 4 scalars (indices past ``depth`` clamped to its last).
        ``at(k)`` gives the operand's (row, column) for depth index ``k``."""
        b, co = self.operand(v, *at(_DEPTH))
        off = self.vec_off(b, co, f"(4 * {c4})", depth)
        if off is not None:
            return self.L.load4(b, off)
        d4 = -(-depth // 4)
        comps = []
        for j in range(4):
            kk = f"min(4 * {c4} + {j}, {depth - 1})" if 4 * (d4 - 1) + j >= depth else f"4 * {c4} + {j}"
            b, co = self.operand(v, *at(kk))
            comps.append(self.c.ld(b, co))
        return f"{self.make4}({', '.join(comps)})"

    def stage_q(self) -> list[str]:
        """Lines that copy the block's ``BM`` query rows (clamped below M) into shared vectors
        ``hb_sm[qbase + row * SK4 + c]``; the key loop's barriers make them visible."""
        T, DK, DK4, SK4 = self.T, self.DK, self.DK4, self.sh["SK4"]
        ta = bool(self.qk.attrs.get("transpose_a"))
        total = self.BM * DK4
        out: list[str] = []
        for u in range(-(-total // T)):
            e, row, c4, mq = (f"hq{x}{u}" for x in ("e", "r", "c", "m"))
            out.append(f"int {e} = min(lid + {u * T}, {total - 1});" if total % T else f"int {e} = lid + {u * T};")
            out += [f"int {row} = {e} / {DK4};", f"int {c4} = {e} - {row} * {DK4};",
                    f"int {mq} = min(mblk * {self.BM} + {row}, {self.M - 1});"]
            value = self.vec4_at(self.qk.inputs[0], c4, DK, lambda k, mq=mq: (k, mq) if ta else (mq, k))
            st = f"hb_sm[{self.qbase} + {row} * {SK4} + {c4}] = {value};"
            out.append(f"if (lid + {u * T} < {total}) {st}" if total % T else st)
        return out

    def stage(self, v: str, depth: int, transposed: bool, base: int, stride: int, zero: bool,
              tag: str) -> tuple[list[str], list[str]]:
        """Lines that copy a tile of ``TN`` keys x ``depth`` of operand ``v`` (keys along its rows
        when ``transposed``) into shared vectors ``hb_sm[base + key * stride + c]``: 16-byte
        loads where they are aligned, else 4 clamped scalars; keys past N as 0 with ``zero``.
        Unrolled: the loads (every one in flight at once), then the stores, apart so that the
        barrier before the stores waits while the loads are under way."""
        L, TN, N, T = self.L, self.TN, self.N, self.T
        d4 = -(-depth // 4)
        total = TN * d4
        kfast = self.keys_fast(v, transposed)
        loads: list[str] = []
        stores: list[str] = []
        for u in range(-(-total // T)):
            e, jn, c4, nn = (f"h{tag}{x}{u}" for x in ("e", "j", "c", "n"))
            loads.append(f"int {e} = min(lid + {u * T}, {total - 1});" if total % T else f"int {e} = lid + {u * T};")
            if kfast:
                loads += [f"int {jn} = {e} % {TN};", f"int {c4} = {e} / {TN};"]
            else:
                loads += [f"int {jn} = {e} / {d4};", f"int {c4} = {e} - {jn} * {d4};"]
            loads.append(f"int {nn} = min(n0 + {jn}, {N - 1});")
            value = self.vec4_at(v, c4, depth, lambda k, nn=nn: (nn, k) if transposed else (k, nn))
            if zero and N % TN:
                value = f"(n0 + {jn} < {N}) ? {value} : {self.make4}(0.0f, 0.0f, 0.0f, 0.0f)"
            loads.append(f"{L.vec4} h{tag}g{u} = {value};")
            st = f"hb_sm[{base} + {jn} * {stride} + {c4}] = h{tag}g{u};"
            stores.append(f"if (lid + {u * T} < {total}) {st}" if total % T else st)
        return loads, stores

    def scores(self) -> list[str]:
        """The lane's register tile of scores ``hs{r}_{i}`` (key ``lane + G i`` of the tile),
        through the scale / mask links, -inf past N."""
        RM, CK, G, DK, SK4 = self.RM, self.CK, self.G, self.DK, self.sh["SK4"]
        out = [f"int hj{i} = lane + {G * i};" for i in range(CK)]
        out += [f"int hn{i} = min(n0 + hj{i}, {self.N - 1});" for i in range(CK)]
        if self.q_shared:  # per 4 dims: the rows' query vectors, then every key's
            for i in range(CK):
                out += [f"float hs{r}_{i} = 0.0f;" for r in range(RM)]
            for k4 in range(self.DK4):
                out += [f"{self.L.vec4} hqs{r}_{k4} = hb_sm[{self.qbase} + ({r * self.RG} + grp) * {SK4} + {k4}];"
                        for r in range(RM)]
                for i in range(CK):
                    out.append(f"{self.L.vec4} hk{i}_{k4} = hb_sm[hj{i} * {SK4} + {k4}];")
                    for j in range(min(4, DK - 4 * k4)):
                        x = "xyzw"[j]
                        out += [f"hs{r}_{i} = hs{r}_{i} + hqs{r}_{k4}.{x} * hk{i}_{k4}.{x};" for r in range(RM)]
        for i in range(CK if not self.q_shared else 0):
            out += [f"float hs{r}_{i} = 0.0f;" for r in range(RM)]
            for k4 in range(self.DK4):
                out.append(f"{self.L.vec4} hk{i}_{k4} = hb_sm[hj{i} * {SK4} + {k4}];")
                for j in range(min(4, DK - 4 * k4)):
                    out += [f"hs{r}_{i} = hs{r}_{i} + hq{r}_{4 * k4 + j} * hk{i}_{k4}.{'xyzw'[j]};"
                            for r in range(RM)]
        for r in range(RM):
            for i in range(CK):
                cur = self.links(out, r, i, f"hs{r}_{i}")
                if self.N % self.TN:
                    cur = f"((n0 + hj{i} < {self.N}) ? {cur} : {self.neg_inf})"
                if cur != f"hs{r}_{i}":
                    out.append(f"hs{r}_{i} = {cur};")
        return out

    def links(self, out: list[str], r: int, i: int, cur: str) -> str:
        """The scale / mask links at score (row ``r``, key ``i``): their lines appended to ``out``;
        the expression of the result."""
        c, a = self.c, self.a
        for p_i, p in enumerate(a["pre"]):
            pa = p.attrs
            rank = len(pa["dims"])
            slot = a["slots"][p_i]
            prefix = self.spaces[tuple(int(x) for x in pa["dims"][:-1])] + f"{r}_"

            def coord(x: int, rank: int = rank, prefix: str = prefix) -> str:
                return f"hn{i}" if x == rank - 1 else f"{prefix}{x}"

            def arg(k: int, dtype: str, p: Any = p, slot: int = slot, cur: str = cur, coord: Any = coord) -> str:
                if k == slot:
                    return cur
                return c.ld(c.b(p.inputs[k]), c.map_coords(p.attrs["maps"][k], coord))

            def extract(*_: Any) -> str:
                raise AssertionError("fuse_attention admits no gathers")

            blines, ys = emit_body(pa["body"], self.L, arg, coord, extract, f"hp{p_i}_{r}_{i}_")
            out += blines
            cur = ys[0]
        return cur

    def link_coords(self) -> None:
        """The scale / mask links' row coordinates per owned row (their last coordinate is the key)."""
        self.spaces: dict[tuple[int, ...], str] = {}
        for p in self.a["pre"]:
            outer = tuple(int(x) for x in p.attrs["dims"][:-1])
            if outer not in self.spaces:
                self.spaces[outer] = f"hc{len(self.spaces)}_"
                for r in range(self.RM):
                    self.lines += _coords(outer, f"{self.spaces[outer]}{r}_", f"rw{r}") if outer else []

    def softmax(self) -> list[str]:
        """Fold the tile's scores into each row's running max, sum and outputs (one rescale),
        then P·V: ``hs{r}_{i}`` becomes the probability."""
        RM, CK, DV, ni, exp = self.RM, self.CK, self.DV, self.neg_inf, self.exp
        out: list[str] = []
        for r in range(RM):
            out.append(f"float hmt{r} = hm{r};")
            out += [f"hmt{r} = (hs{r}_{i} > hmt{r}) ? hs{r}_{i} : hmt{r};" for i in range(CK)]
            out += [f"float hmu{r} = (hmt{r} > {ni}) ? hmt{r} : 0.0f;",  # all -inf so far: exp(-inf) = 0
                    f"float hsc{r} = {exp}(hm{r} - hmu{r});", f"hm{r} = hmt{r};"]
            out += [f"hs{r}_{i} = {exp}(hs{r}_{i} - hmu{r});" for i in range(CK)]
            out.append(f"hl{r} = hl{r} * hsc{r} + " + " + ".join(f"hs{r}_{i}" for i in range(CK)) + ";")
            out += [f"ho{r}_{d} = ho{r}_{d} * hsc{r};" for d in range(DV)]
        vb, SV4 = self.TN * self.sh["SK4"], self.sh["SV4"]
        for i in range(CK):
            for d4 in range(self.DV4):
                out.append(f"{self.L.vec4} hv{i}_{d4} = hb_sm[{vb} + hj{i} * {SV4} + {d4}];")
                for j in range(min(4, DV - 4 * d4)):
                    d = 4 * d4 + j
                    out += [f"ho{r}_{d} = ho{r}_{d} + hs{r}_{i} * hv{i}_{d4}.{'xyzw'[j]};" for r in range(RM)]
        return out

    def key_loop(self) -> None:
        RM, DK, DV = self.RM, self.DK, self.DV
        for r in range(RM):
            self.lines += [f"float hm{r} = {self.neg_inf};", f"float hl{r} = 0.0f;"]
            self.lines += [f"float ho{r}_{d} = 0.0f;" for d in range(DV)]
        # K: [Dk, N] (keys fastest) or, transposed, [N, Dk]; V: [N, Dv] or, transposed, [Dv, N]
        kt = bool(self.qk.attrs.get("transpose_b"))
        kl, ks = self.stage(self.qk.inputs[1], DK, kt, 0, self.sh["SK4"], False, "k")
        vt = bool(self.pv.attrs.get("transpose_b"))
        vl, vs = self.stage(self.pv.inputs[1], DV, not vt, self.TN * self.sh["SK4"], self.sh["SV4"], True, "v")
        body = kl + vl + [self.L.barrier] + ks + vs + [self.L.barrier]  # the previous tile is consumed first
        body += self.scores()
        body += self.softmax()
        self.lines.append(f"for (int n0 = 0; n0 < {self.N}; n0 += {self.TN}) {{")
        self.lines += ["  " + ln for ln in body]
        self.lines.append("}")

    # -- the lanes combine, the rows are stored -------------------------------------------------
    def combine_shuffle(self) -> None:
        G, exp, ni = self.G, self.exp, self.neg_inf
        if self.t.api == "cuda":
            shfl = "__shfl_xor_sync(0xffffffffu, {v}, {o})"
        elif self.t.api == "hip":
            shfl = "__shfl_xor({v}, {o})"
        else:
            shfl = "subgroupShuffleXor({v}, {o}u)"
        offsets = []
        o = G // 2
        while o:
            offsets.append(o)
            o //= 2
        E = self.DV // G if (G > 1 and self.DV % G == 0 and REDUCE_SCATTER) else 0
        if E:
            self.lines.append(f"bool hup{G // 2} = (lane & {G // 2}) != 0;")
            self.lines += [f"bool hup{o} = (lane & {o}) != 0;" for o in offsets[1:]]
        for r in range(self.RM):
            self.lines.append(f"float hmx{r} = hm{r};")
            for o in offsets:
                self.lines.append(f"{{ float y = {shfl.format(v=f'hmx{r}', o=o)}; hmx{r} = (y > hmx{r}) ? y : hmx{r}; }}")
            self.lines += [f"float hmu{r} = (hmx{r} > {ni}) ? hmx{r} : 0.0f;", f"float hsc{r} = {exp}(hm{r} - hmu{r});"]
            outs = [f"ho{r}_{d}" for d in range(self.DV)]
            self.lines += [f"{q} = {q} * hsc{r};" for q in [f"hl{r}"] + outs]
            for o in offsets:
                self.lines.append(f"hl{r} = hl{r} + {shfl.format(v=f'hl{r}', o=o)};")
                if not E:
                    self.lines += [f"{q} = {q} + {shfl.format(v=q, o=o)};" for q in outs]
                    continue
                # reduce-scatter: a lane keeps the half of its elements its offset bit selects
                # and sends the other half to its partner; after every step it holds E elements
                half = len(outs) // 2
                lo, hi = outs[:half], outs[half:]
                for x, y in zip(lo, hi):
                    send = shfl.format(v=f"(hup{o} ? {x} : {y})", o=o)
                    self.lines.append(f"{x} = (hup{o} ? {y} : {x}) + {send};")
                outs = lo
        for r in range(self.RM):
            self.lines.append(f"float hinv{r} = 1.0f / hl{r};")
            if E:  # the lane's elements: E lane .. E lane + E - 1
                step = 4 if E % 4 == 0 else 1  # 16-byte stores where E lane is a multiple of 4
                for c4 in range(0, E, step):
                    vals = [f"ho{r}_{c4 + j} * hinv{r}" for j in range(step)]
                    self.store_at(r, f"{E} * lane + {c4}", vals)
                continue
            for c4 in range(self.DV4):
                vals = [f"ho{r}_{4 * c4 + j} * hinv{r}" for j in range(min(4, self.DV - 4 * c4))]
                self.store_run(r, c4, vals, f"lane == {c4 % G}" if G > 1 else "")

    def combine_shared(self) -> None:
        """Through shared memory, once the last tile is consumed: every thread's maxima (one
        vector), then its rescaled sums in passes of P vectors, each summed by the lane that
        stores it (and l by every lane)."""
        G, T, RM, DV, exp, ni = self.G, self.T, self.RM, self.DV, self.exp, self.neg_inf
        mk, zero = self.make4, "0.0f"

        def pack(xs: list[str]) -> str:
            return f"{mk}({', '.join(xs + [zero] * (4 - len(xs)))})"

        base = f"grp * {G}"
        self.lines += [self.L.barrier, f"hb_sm[lid] = {pack([f'hm{r}' for r in range(RM)])};", self.L.barrier]
        self.lines += [f"float hmx{r} = {ni};" for r in range(RM)]
        self.lines.append(f"for (int s = 0; s < {G}; s++) {{")
        self.lines.append(f"  {self.L.vec4} y = hb_sm[{base} + s];")
        self.lines += [f"  hmx{r} = (y.{'xyzw'[r]} > hmx{r}) ? y.{'xyzw'[r]} : hmx{r};" for r in range(RM)]
        self.lines.append("}")
        for r in range(RM):
            self.lines += [f"float hmu{r} = (hmx{r} > {ni}) ? hmx{r} : 0.0f;", f"float hsc{r} = {exp}(hm{r} - hmu{r});"]
        # the vectors to sum: the l of each row (packed), then each row's output vectors
        qs: list[tuple[str, Any]] = []
        for r0 in range(0, RM, 4):
            qs.append((pack([f"hl{r} * hsc{r}" for r in range(r0, min(RM, r0 + 4))]), ("l", r0)))
        for r in range(RM):
            for c4 in range(self.DV4):
                qs.append((pack([f"ho{r}_{d} * hsc{r}" for d in range(4 * c4, min(DV, 4 * c4 + 4))]), ("o", r, c4)))
        P = self.sh["P"]
        for p0 in range(0, len(qs), P):
            chunk = qs[p0:p0 + P]
            self.lines.append(self.L.barrier)
            self.lines += [f"hb_sm[{k * T} + lid] = {q};" for k, (q, _) in enumerate(chunk)]
            self.lines.append(self.L.barrier)
            for k, (_, what) in enumerate(chunk):
                if what[0] == "l":
                    rows = range(what[1], min(RM, what[1] + 4))
                    self.lines += [f"float hlt{r} = 0.0f;" for r in rows]
                    self.lines.append(f"for (int s = 0; s < {G}; s++) {{")
                    self.lines.append(f"  {self.L.vec4} y = hb_sm[{k * T} + {base} + s];")
                    self.lines += [f"  hlt{r} = hlt{r} + y.{'xyzw'[r - what[1]]};" for r in rows]
                    self.lines.append("}")
                    continue
                _, r, c4 = what
                n = min(4, DV - 4 * c4)
                inner = [f"float ht{j} = 0.0f;" for j in range(n)]
                inner += [f"for (int s = 0; s < {G}; s++) {{", f"  {self.L.vec4} y = hb_sm[{k * T} + {base} + s];"]
                inner += [f"  ht{j} = ht{j} + y.{'xyzw'[j]};" for j in range(n)] + ["}"]
                save = self.lines
                self.lines = []
                self.store_run(r, c4, [f"ht{j} / hlt{r}" for j in range(n)], "")
                stores = self.lines
                self.lines = save
                cond = f"lane == {c4 % G}" if G > 1 else "true"
                self.lines += [f"if ({cond}) {{"] + ["  " + ln for ln in inner + stores] + ["}"]

    def store_run(self, r: int, c4: int, vals: list[str], cond: str) -> None:
        """Store output elements ``4 c4 ..`` of row ``r`` (a 16-byte store where aligned), if the
        row exists and ``cond`` holds."""
        c, L = self.c, self.L
        ob = c.b(c.d.outputs[0], True)
        guard = f"m{r} < {self.M}" + (f" && {cond}" if cond else "")
        off = self.vec_off(ob, self.out_coords(r, _DEPTH), str(4 * c4), self.DV) if len(vals) == 4 else None
        if off is not None:
            self.lines.append(f"if ({guard}) {L.store4(ob, off, vals)}")
            return
        sts = [L.store(ob, c.dtype(ob), lin(c.shape(ob), self.out_coords(r, str(4 * c4 + j))), v)
               for j, v in enumerate(vals)]
        self.lines.append(f"if ({guard}) {{ {' '.join(sts)} }}")

    def store_at(self, r: int, d: str, vals: list[str]) -> None:
        """Store output elements ``d ..`` (``d`` an expression, a multiple of 4 where there are 4
        values: the caller's promise) of row ``r`` if the row exists (a 16-byte store where aligned)."""
        c, L = self.c, self.L
        ob = c.b(c.d.outputs[0], True)
        off = self.vec_off(ob, self.out_coords(r, _DEPTH), f"({d})", self.DV) if len(vals) == 4 else None
        if off is not None:
            self.lines.append(f"if (m{r} < {self.M}) {L.store4(ob, off, vals)}")
            return
        sts = [L.store(ob, c.dtype(ob), lin(c.shape(ob), self.out_coords(r, f"({d} + {j})")), v)
               for j, v in enumerate(vals)]
        self.lines.append(f"if (m{r} < {self.M}) {{ {' '.join(sts)} }}")

    def out_coords(self, r: int, d: str) -> list[str]:
        """Output coordinates of (row ``r``, column ``d``): through the transpose that read O where
        the pass absorbed it (input coordinates -> its output's)."""
        if self.store is None:
            return ["bh", f"m{r}", d]
        perm = [int(k) for _, k in self.store.attrs["maps"][0]]
        vin = tuple(int(x) for x in self.c.g.types[self.store.inputs[0]].shape)
        src = self.unravel_bh(vin[:-2]) + [f"m{r}", d]
        it = [""] * len(perm)
        for j, k in enumerate(perm):
            it[k] = src[j]
        return it


def plan_attention(c: _Ctx, t: Tuning) -> Plan:
    e = _Emit(c, t)
    e.prologue()
    e.query_rows()
    e.link_coords()
    e.key_loop()
    if e.sh["combine"] == "shared":
        e.combine_shared()
    else:  # shuffles / subgroup shuffles, or one lane per row (no combine: offsets are empty)
        e.combine_shuffle()
    rows = e.bh * -(-e.M // e.BM)
    groups = fold_groups(rows)
    extensions = ["GL_KHR_shader_subgroup_basic", "GL_KHR_shader_subgroup_shuffle"] \
        if e.sh["combine"] == "subgroup" else []
    ctx = {"rows": rows, "groups_x": groups[0], "lines": e.lines, "name": c.d.name, "extensions": extensions}
    plan = Plan("row.j2", ctx, (e.T, 1, 1), groups, [(c.L.vec4, "hb_sm", e.sh["vectors"])])
    plan.vec4 = e.vec4
    if e.sh["combine"] == "subgroup":  # a row's G lanes shuffle within one subgroup
        plan.min_subgroup = int(e.sh["G"])
    return plan
