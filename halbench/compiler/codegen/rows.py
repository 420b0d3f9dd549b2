"""The row kernel: a fused softmax / layer norm (passes/fuse_rows.py) in one dispatch.

One workgroup per row; each thread owns the row elements ``lid + e * B`` (``B`` threads). Rows of
up to ``MAX_SLOTS * B`` elements are read once: each element's value of every member lives in
registers (unrolled slots, no local arrays, so the same C subset translates to WGSL), and later
members reuse it. Longer rows (a 30k-vocabulary softmax) loop over the row once per reduction and
recompute element-wise members from the inputs (re-read from memory, L2-resident).

Reductions combine each thread's partial with subgroup arithmetic where the target has it (GLSL
``subgroupAdd``/``subgroupMax``..., CUDA ``__shfl_xor_sync``, HIP ``__shfl_xor``), then one value
per subgroup through shared memory; elsewhere (WebGPU, targets without subgroup arithmetic) a
shared-memory tree. Every thread ends with the row's value. Indices: a slot past the row end is
clamped to the last element (its value is computed but neither combined nor stored), and every
operand index comes from an iteration point inside the member's dims, checked in bounds by
fuse_rows.
"""

from __future__ import annotations

from typing import Any

from halbench.compiler.codegen.kernels import Plan, _combine, _coords, _Ctx, _neutral
from halbench.compiler.codegen.lang import ctype, emit_body, lin
from halbench.compiler.codegen.tuning import Tuning, fold_groups

__all__ = ["MAX_SLOTS", "plan_row", "row_threads"]

#: Elements per thread kept in registers; longer rows loop and recompute.
MAX_SLOTS = 8

_GLSL_SUBGROUP = {"add": "subgroupAdd", "mul": "subgroupMul", "max": "subgroupMax", "min": "subgroupMin"}


def row_threads(t: Tuning, length: int) -> int:
    """Threads per row: about 4 elements each, a power of two of at least one subgroup (warp,
    wave), at most the target's 1-D block."""
    lo = max(32, t.subgroup_size if t.api in ("cuda", "hip") else 1)
    hi = max(t.block, lo)
    b = 1
    while b < -(-length // 4):
        b *= 2
    b = min(max(b, lo), hi)
    while b & (b - 1):  # the shared-memory tree halves: a power of two
        b &= b - 1
    return b


def _subgroup_width(t: Tuning) -> int | None:
    """Lanes of a CUDA / HIP shuffle reduction, or None for the shared-memory tree."""
    if not t.subgroup_arithmetic:
        return None
    if t.api == "cuda":
        return 32
    if t.api == "hip":
        return t.subgroup_size if t.subgroup_size in (32, 64) else None
    return None


def _reduce(c: _Ctx, t: Tuning, kind: str, acc: str, typ: str, dtype: str, threads: int,
            name: str, shared: list[tuple[str, str, int]], extensions: set[str]) -> tuple[list[str], str]:
    """Lines that combine every thread's ``acc`` of the workgroup; the expression of the total
    (the same in every thread). ``name`` is this reduction's shared array."""
    neutral = _neutral(c, kind, dtype)
    scalar = typ in ("float", "int", "uint", "double")
    if t.api == "vulkan" and t.subgroup_arithmetic and scalar:
        extensions |= {"GL_KHR_shader_subgroup_basic", "GL_KHR_shader_subgroup_arithmetic"}
        shared.append((typ, name, threads))  # gl_NumSubgroups <= threads
        if t.subgroup_sizes and min(t.subgroup_sizes) >= threads:
            # On the target the workgroup is one subgroup and the subgroup sum is the total. A
            # device with smaller subgroups (lavapipe's 8 lanes running an h100 bundle) takes the
            # general path: gl_NumSubgroups is uniform, so the branch and its barrier are too.
            return [f"{acc} = {_GLSL_SUBGROUP[kind]}({acc});",
                    f"{typ} {acc}_t = {acc};",
                    "if (gl_NumSubgroups > 1) {",
                    f"  if (subgroupElect()) {name}[min(int(gl_SubgroupID), {threads - 1})] = {acc};",
                    f"  {c.L.barrier}",
                    f"  {acc}_t = {neutral};",
                    (f"  for (int s = 0; s < min(int(gl_NumSubgroups), {threads}); s++) "
                     f"{acc}_t = {_combine(kind, f'{acc}_t', f'{name}[s]')};"),
                    "}"], f"{acc}_t"
        return [f"{acc} = {_GLSL_SUBGROUP[kind]}({acc});",
                f"if (subgroupElect()) {name}[min(int(gl_SubgroupID), {threads - 1})] = {acc};",
                c.L.barrier,
                f"{typ} {acc}_t = {neutral};",
                (f"for (int s = 0; s < min(int(gl_NumSubgroups), {threads}); s++) "
                 f"{acc}_t = {_combine(kind, f'{acc}_t', f'{name}[s]')};")], f"{acc}_t"
    w = _subgroup_width(t) if scalar else None
    if w is not None and threads % w == 0:
        shfl = "__shfl_xor_sync(0xffffffffu, {v}, {o})" if t.api == "cuda" else "__shfl_xor({v}, {o})"
        lines = [(f"for (int o = {w // 2}; o > 0; o >>= 1) "
                  f"{acc} = {_combine(kind, acc, shfl.format(v=acc, o='o'))};")]
        n = threads // w
        if n == 1:  # one warp per row: the butterfly left the total in every lane
            return lines, acc
        shared.append((typ, name, n))
        lines += [f"if ((lid & {w - 1}) == 0) {name}[min(lid / {w}, {n - 1})] = {acc};", c.L.barrier,
                  f"{typ} {acc}_t = {neutral};",
                  f"for (int s = 0; s < {n}; s++) {acc}_t = {_combine(kind, f'{acc}_t', f'{name}[s]')};"]
        return lines, f"{acc}_t"
    shared.append((typ, name, threads))
    lines = [f"{name}[lid] = {acc};", c.L.barrier,
             f"for (int s = {threads // 2}; s > 0; s >>= 1) {{",
             f"  if (lid < s) {name}[lid] = {_combine(kind, f'{name}[lid]', f'{name}[lid + s]')};",
             f"  {c.L.barrier}", "}",
             f"{typ} {acc}_t = {name}[0];"]
    return lines, f"{acc}_t"


def plan_row(c: _Ctx, t: Tuning) -> Plan:
    op = c.d.root
    a = op.attrs
    rows, length = int(a["rows"]), int(a["length"])
    members, roles, sources = a["ops"], a["roles"], a["sources"]
    threads = row_threads(t, length)
    slots = -(-length // threads)
    unrolled = slots <= MAX_SLOTS
    producer = {v: (k, i) for k, m in enumerate(members) for i, v in enumerate(m.outputs)}
    lines: list[str] = []
    shared: list[tuple[str, str, int]] = []
    extensions: set[str] = set()
    # Each member's row coordinates, from the workgroup id; members over the same dims share
    # them (and so share their loads of an input element).
    spaces: dict[tuple[int, ...], str] = {}
    prefix: list[str] = []
    for k, m in enumerate(members):
        dims = [int(x) for x in m.attrs["dims"]]
        outer = tuple(dims if roles[k] == "scalar" else dims[:-1])
        if outer not in spaces:
            spaces[outer] = f"q{len(spaces)}_"
            lines += _coords(outer, spaces[outer], "gid") if outer else []
        prefix.append(spaces[outer])
    if unrolled:
        for e in range(slots):
            j = f"lid + {e * threads}" if e else "lid"
            lines.append(f"int j{e} = min({j}, {length - 1});")

    row_vals: dict[tuple[int, int], str] = {}  # (member, output) -> per-row value in every thread
    memo: dict[tuple[Any, int], list[str]] = {}  # (slot, member) -> yields at that element
    loads: dict[tuple[Any, str], str] = {}  # (slot, load expression) -> its variable

    def coord_fn(k: int, slot: Any) -> Any:
        rank = len(members[k].attrs["dims"])

        def coord(x: int) -> str:
            if roles[k] == "scalar":
                return f"{prefix[k]}{x}"
            return (f"j{slot}" if unrolled else "j") if x == rank - 1 else f"{prefix[k]}{x}"
        return coord

    def evaluate(k: int, slot: Any, out: list[str], tag: str) -> list[str]:
        """Emit member ``k``'s body at ``slot`` (element) into ``out``; its yields."""
        m = members[k]
        ma = m.attrs
        coord = coord_fn(k, slot)

        def arg(i: int, dtype: str) -> str:
            v = m.inputs[i]
            if v in sources:
                pk, pi = producer[sources[v]]
                if roles[pk] != "full":
                    return row_vals[(pk, pi)]
                return element(pk, pi, slot, out, tag)
            b = c.b(v)
            load = c.ld(b, c.map_coords(ma["maps"][i], coord))
            if roles[k] == "scalar":
                return load
            key = (slot, load)  # each input element is loaded once per thread, then reused
            if key not in loads:
                loads[key] = f"x{len(loads)}{tag}"
                out.append(f"{ctype(c.dtype(b))} {loads[key]} = {load};")
            return loads[key]

        body, ys = emit_body(ma["body"], c.L, arg, coord, lambda *_: "", f"m{k}{tag}s{slot}_")
        out += body
        return ys

    def element(k: int, i: int, slot: Any, out: list[str], tag: str) -> str:
        key = (slot, k)
        if key not in memo:
            memo[key] = evaluate(k, slot, out, tag)
        return memo[key][i]

    def store(k: int, i: int, value: str, slot: Any) -> str | None:
        v = members[k].outputs[i]
        if v not in c.d.outputs:
            return None
        b = c.b(v, True)
        m = members[k].attrs["maps"][len(members[k].inputs) + i]
        st = c.L.store(b, c.dtype(b), lin(c.shape(b), c.map_coords(m, coord_fn(k, slot))), value)
        if roles[k] != "full":
            return f"if (lid == 0) {st}"
        return f"if (lid + {slot * threads} < {length}) {st}" if unrolled else st

    def loop(k: int, tag: str, each: Any) -> None:
        """Emit ``each(slot, out)`` over the thread's elements of the row."""
        if unrolled:
            for e in range(slots):
                each(e, lines, tag)
        else:
            memo.clear()
            loads.clear()
            inner: list[str] = []
            each("", inner, tag)
            lines.append(f"for (int j = lid; j < {length}; j += {threads}) {{")
            lines.extend("  " + ln for ln in inner)
            lines.append("}")
            memo.clear()
            loads.clear()

    for k, m in enumerate(members):
        ma = m.attrs
        n_out = len(m.outputs)
        if roles[k] == "scalar":
            ys = evaluate(k, "r", lines, "")
            for i in range(n_out):
                row_vals[(k, i)] = ys[i]
                st = store(k, i, ys[i], 0)
                if st:
                    lines.append(st)
        elif roles[k] == "full":
            if any(v in c.d.outputs for v in m.outputs):
                def each(slot: Any, out: list[str], tag: str, k: int = k, n_out: int = n_out) -> None:
                    for i in range(n_out):
                        val = element(k, i, slot, out, tag)
                        st = store(k, i, val, slot if slot != "" else 0)
                        if st:
                            out.append(st)
                loop(k, f"p{k}", each)
        else:  # reduce
            kinds = ma["reduce"]
            ytypes = [ma["body"].nodes[y].dtype for y in ma["body"].yields]
            accs = [f"acc{k}_{i}" for i in range(n_out)]
            for i in range(n_out):
                lines.append(f"{ctype(ytypes[i])} {accs[i]} = {_neutral(c, kinds[i], ytypes[i])};")

            def each(slot: Any, out: list[str], tag: str, k: int = k, accs: list[str] = accs,
                     kinds: Any = kinds) -> None:
                for i, acc in enumerate(accs):
                    val = element(k, i, slot, out, tag)
                    upd = _combine(kinds[i], acc, val)
                    if unrolled and (slot + 1) * threads > length:
                        upd = f"(lid + {slot * threads} < {length}) ? ({upd}) : {acc}"
                    out.append(f"{acc} = {upd};")
            loop(k, f"r{k}", each)
            for i, acc in enumerate(accs):
                red, total = _reduce(c, t, kinds[i], acc, ctype(ytypes[i]), ytypes[i], threads,
                                     f"hb_red{k}_{i}", shared, extensions)
                lines += red
                if ma["inits"][i] is not None:
                    idx = ma["inits"][i]
                    init = arg_row(c, m, idx, coord_fn(k, 0), sources, producer, row_vals)
                else:
                    init = c.L.lit(ma["init_consts"][i], ytypes[i])
                lines.append(f"{ctype(ytypes[i])} row{k}_{i} = {_combine(kinds[i], init, total)};")
                row_vals[(k, i)] = f"row{k}_{i}"
                st = store(k, i, f"row{k}_{i}", 0)
                if st:
                    lines.append(st)
    groups = fold_groups(rows)
    ctx = {"rows": rows, "groups_x": groups[0], "lines": lines, "name": c.d.name,
           "extensions": sorted(extensions)}
    return Plan("row.j2", ctx, (threads, 1, 1), groups, shared)


def arg_row(c: _Ctx, m: Any, i: int, coord: Any, sources: dict[str, str],
            producer: dict[str, tuple[int, int]], row_vals: dict[tuple[int, int], str]) -> str:
    """A reduction's initial value (operand ``i``, one per row)."""
    v = m.inputs[i]
    if v in sources:
        return row_vals[producer[sources[v]]]
    return c.ld(c.b(v), c.map_coords(m.attrs["maps"][i], lambda x: coord(x)))
