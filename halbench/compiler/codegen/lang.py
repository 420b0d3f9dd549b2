"""What GLSL, CUDA C and HIP C disagree on, behind one small interface, plus the body emitter.

The kernel templates are written once in the subset of C the three languages share (``int``,
``uint``, ``float``, ``for``, ``?:``, functional casts ``float(x)``), with the differences behind
names a :class:`Lang` provides: buffer loads and stores per element type, thread and group ids,
barriers, literals and math function names. ``emit_body`` turns a generic's :class:`Body` into
one line per node.

Element types: every floating value is *computed* in f32 (f16 / bf16 are loaded, widened,
computed, rounded on store), as the local oracle does per node; integers are ``int`` (i8..i32,
sign-extended), ``int64_t`` (i64) and ``bool`` (i1, stored as a byte).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from halbench.errors import CompileError

__all__ = ["FLOATS", "Lang", "ctype", "emit_body", "kernel_failure", "lin"]

FLOATS = ("f16", "bf16", "f32", "f64")
_CTYPE = {"f16": "float", "bf16": "float", "f32": "float", "f64": "double", "i1": "bool",
          "i8": "int", "i16": "int", "i32": "int", "i64": "int64_t", "u8": "uint", "u16": "uint",
          "u32": "uint", "u64": "uint64_t"}
_UNSIGNED = {"int": "uint", "int64_t": "uint64_t", "uint": "uint", "uint64_t": "uint64_t", "bool": "uint"}


def kernel_failure(error: Exception, source: str, name: str, suffix: str) -> CompileError:
    """A generated kernel its compiler rejected (a bug in halbench's code generator): one line
    with the compiler's message and where the kernel's source was kept for the bug report
    (``cache_dir()/failed``, named by the source's hash; not kept where that cannot be written)."""
    import hashlib

    from halbench.files import atomic_write
    from halbench.tools import cache_dir

    first = " ".join(str(error).split())
    path = cache_dir() / "failed" / f"{name}-{hashlib.sha256(source.encode()).hexdigest()[:12]}.{suffix}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, source, "generated kernel")
        where = f"; its source is in {path} (a bug in halbench's code generator: please report it with that file)"
    except Exception:  # noqa: BLE001 -- the error itself matters more than the copy
        where = " (a bug in halbench's code generator: please report it)"
    return CompileError(f"{first}{where}")


def ctype(dtype: str) -> str:
    try:
        return _CTYPE[dtype]
    except KeyError:
        raise CompileError(f"GPU codegen does not support element type '{dtype}'") from None


def lin(shape: Sequence[int], coords: Sequence[str]) -> str:
    """Row-major offset of ``coords`` in ``shape`` with constant strides (size-1 axes dropped)."""
    terms, stride = [], 1
    for size, c in reversed(list(zip(shape, coords))):
        if size != 1:
            terms.append(c if stride == 1 else f"({c}) * {stride}")
        stride *= int(size)
    return " + ".join(reversed(terms)) if terms else "0"


class Lang:
    """The C dialect shared by the templates; subclasses fill in what differs."""

    name = "c"
    lid = "threadIdx.x"
    group_x = "blockIdx.x"
    group_y = "blockIdx.y"
    group_z = "blockIdx.z"
    barrier = "__syncthreads();"
    #: unary float functions: IR name -> function name
    unary: ClassVar[dict[str, str]] = {}
    binary: ClassVar[dict[str, str]] = {}

    # -- buffers (binding i holds elements of ``dtype``) --------------------------------
    def ref(self, i: int, off: str) -> str:
        return f"B{i}[{off}]"

    def load(self, i: int, dtype: str, off: str) -> str:
        raise NotImplementedError

    def store(self, i: int, dtype: str, off: str, value: str) -> str:
        raise NotImplementedError

    def load4(self, i: int, off4: str) -> str:
        """A 16-byte load of 4 f32 (``off4`` counts vec4s); components .x .y .z .w."""
        raise NotImplementedError

    def store4(self, i: int, off4: str, values: Sequence[str]) -> str:
        raise NotImplementedError

    vec4 = "float4"

    # -- split-K scratch (kernels.GemmSplit): f32 partial sums then uint32 counters, visible
    #    device-wide; the fence orders a workgroup's stores before its counter increment -------
    scratch_ok = True  # the language has a device-scope fence (WGSL does not)
    scratch_fence = "__threadfence();"

    def scratch_store(self, i: int, off: str, value: str) -> str:
        return f"((volatile float*)B{i})[{off}] = {value};"

    def scratch_load(self, i: int, off: str) -> str:
        return f"((volatile float*)B{i})[{off}]"

    def scratch_add(self, i: int, off: str) -> str:
        """Atomically add 1 to counter ``off``; the expression is the old value."""
        return f"int(atomicAdd(&B{i}[{off}], 1u))"

    #: 16-byte partial sums (gemm.j2 SPLIT4): ``off4`` counts vec4s of the f32 partials
    scratch4_ok = False

    def scratch_store4(self, i: int, off4: str, values: Sequence[str]) -> str:
        raise NotImplementedError

    def scratch_load4(self, i: int, off4: str) -> str:
        raise NotImplementedError

    def scratch_clear(self, i: int, off: str) -> str:
        return f"B{i}[{off}] = 0u;"

    # -- scalars -----------------------------------------------------------------------
    def float_lit(self, v: float) -> str:
        if math.isnan(v) or math.isinf(v):
            bits = struct.unpack("<I", struct.pack("<f", v))[0]
            return self.bits_to_float(f"0x{bits:08x}")
        r = repr(float(struct.unpack("<f", struct.pack("<f", v))[0]))
        if "e" not in r and "." not in r:
            r += ".0"
        return r + "f"

    def bits_to_float(self, bits: str) -> str:
        raise NotImplementedError

    def float_to_bits(self, x: str) -> str:
        raise NotImplementedError

    def lit(self, v: Any, dtype: str) -> str:
        t = ctype(dtype)
        if dtype == "i1":
            return "true" if v else "false"
        if t == "float":
            return self.float_lit(float(v))
        if t == "double":
            if math.isnan(float(v)) or math.isinf(float(v)):
                return f"double({self.float_lit(float(v))})"  # inf/nan by their float bits
            return f"double({float(v)!r})"
        iv = int(v)
        if t == "int":
            if iv == -(2 ** 31):
                return "int(0x80000000u)"
            return f"int({iv})" if iv < 0 else str(iv)
        if t == "uint":
            return f"{iv & 0xFFFFFFFF}u"
        return f"{t}({iv})" if abs(iv) < 2 ** 31 else f"{t}({iv}ll)".replace("ll)", self.ll_suffix + ")")

    ll_suffix = "ll"

    def round_half(self, x: str) -> str:
        """``x`` rounded to f16 and back (truncf to f16)."""
        raise NotImplementedError

    def fn(self, name: str) -> str:
        return self.unary.get(name) or self.binary[name]


def _pred(p: str, a: str, b: str, unsigned: Callable[[str], str]) -> str:
    ordered = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "une": "!="}
    if p in ordered:
        return f"({a} {ordered[p]} {b})"
    neg = {"ugt": "<=", "uge": "<", "ult": ">=", "ule": ">"}
    if p in neg:
        return f"(!({a} {neg[p]} {b}))"
    ints = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">="}
    if p in ints:
        return f"({a} {ints[p]} {b})"
    uints = {"ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}
    if p in uints:
        return f"({unsigned(a)} {uints[p]} {unsigned(b)})"
    return {"false": "false", "true": "true",
            "one": f"(({a} != {b}) && ({a} == {a}) && ({b} == {b}))",
            "ord": f"(({a} == {a}) && ({b} == {b}))",
            "ueq": f"(!(({a} < {b}) || ({a} > {b})))",
            "uno": f"(({a} != {a}) || ({b} != {b}))"}[p]


def emit_body(body: Any, lang: Lang, arg: Callable[[int, str], str], index: Callable[[int], str],
              extract: Callable[[int, list[str], str], str], prefix: str,
              out: Callable[[int], str] | None = None) -> tuple[list[str], list[str]]:
    """One C statement per node of ``body`` (a :class:`~halbench.compiler.ir.Body`).

    ``arg(k, dtype)`` gives the expression of operand ``k`` at the current point, ``index(d)``
    the current coordinate of iteration dim ``d``, ``extract(k, index_exprs, dtype)`` a gather
    from captured operand ``k`` (an expression, or ``(guard lines, expression)``). Returns
    (lines, yield expressions).
    """
    lines: list[str] = []
    names: list[str] = []
    nodes = body.nodes
    for i, n in enumerate(nodes):
        a = [names[j] for j in n.args]
        adt = [nodes[j].dtype for j in n.args]
        t = ctype(n.dtype)
        if n.op == "out":  # a sequential reduction's accumulator
            if out is None:
                raise CompileError("an accumulator is read outside a sequential reduction")
            names.append(out(int(n.value)))
            continue
        e = _expr(n, a, adt, t, lang, arg, index, extract)
        if isinstance(e, tuple):  # an extract with its bounds guard: the guard's lines come first
            lines += e[0]
            e = e[1]
        name = f"{prefix}{i}"
        lines.append(f"{t} {name} = {e};")
        names.append(name)
    return lines, [names[y] for y in body.yields]


#: GLSL built-ins with double overloads (the rest go through float).
_GLSL_DOUBLE_FNS = frozenset({"abs", "floor", "ceil", "sqrt", "inversesqrt", "roundEven", "min", "max", "fma",
                              "trunc", "sign"})


def _expr(n: Any, a: list[str], adt: list[str], t: str, L: Lang, arg: Callable[[int, str], str],
          index: Callable[[int], str], extract: Callable[[int, list[str], str], str]) -> str:
    op = n.op
    src_t = ctype(adt[0]) if adt else t

    def u(x: str, ty: str = src_t) -> str:
        return f"{_UNSIGNED.get(ty, ty)}({x})"

    if op == "arg":
        return arg(int(n.value), n.dtype)
    if op == "const":
        return L.lit(n.value, n.dtype)
    if op == "index":
        if L.name == "glsl" and t in ("int64_t", "uint64_t"):
            # A loop coordinate is never negative: widen it unsigned. lavapipe (Mesa 22.3) gets a
            # signed compare of a sign-extended coordinate against a constant wrong (test_triu_one_row).
            return f"{t}(uint({index(int(n.value))}))"
        return f"{t}({index(int(n.value))})"
    if op == "extract":
        return extract(int(n.value), [f"int({x})" for x in a], n.dtype)
    if op in ("cmpf", "cmpi"):
        p = str(n.value)
        if src_t == "bool" and p not in ("eq", "ne"):
            return _pred(p, f"int({a[0]})", f"int({a[1]})", lambda x, ty="int": f"uint({x})")
        uints = {"ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}
        if op == "cmpi" and p in uints:  # unsigned integer compare (for floats these are unordered)
            return f"({u(a[0])} {uints[p]} {u(a[1])})"
        return _pred(p, a[0], a[1], u)
    if op == "select":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if op == "fma":
        return f"{L.fn('fma')}({a[0]}, {a[1]}, {a[2]})"
    if op == "negf":
        return f"(-{a[0]})"
    if op == "divf" and L.name == "glsl" and src_t == "float":
        # Vulkan allows a division 2.5 ULP off, and NVIDIA's is: x / scale then rounded to an
        # integer (DynamicQuantizeLinear) landed on the wrong side of a tie on the H100.
        return f"hb_div({a[0]}, {a[1]})"
    if op in ("addf", "subf", "mulf", "divf"):
        return f"({a[0]} {'+-*/'[['addf', 'subf', 'mulf', 'divf'].index(op)]} {a[1]})"
    if op in ("addi", "subi", "muli", "andi", "ori", "xori") and src_t == "bool":
        return {"addi": f"({a[0]} != {a[1]})", "subi": f"({a[0]} != {a[1]})", "muli": f"({a[0]} && {a[1]})",
                "andi": f"({a[0]} && {a[1]})", "ori": f"({a[0]} || {a[1]})", "xori": f"({a[0]} != {a[1]})"}[op]
    if op in ("shli", "shrsi", "shrui") and src_t in ("int", "uint", "int64_t", "uint64_t"):
        # A shift by the width or more (or by a negative amount) is undefined in C and GLSL:
        # give what NumPy gives (0, or the sign for an arithmetic right shift).
        width = 64 if "64" in src_t else 32
        ok = f"({u(a[1])} < {u(str(width))})"
        if op == "shli":
            return f"({ok} ? ({a[0]} << {a[1]}) : {src_t}(0))"
        if op == "shrsi":
            return f"({ok} ? ({a[0]} >> {a[1]}) : ({a[0]} < {src_t}(0) ? {src_t}(-1) : {src_t}(0)))"
        return f"({ok} ? {src_t}({u(a[0])} >> {u(a[1])}) : {src_t}(0))"
    simple = {"addi": "+", "subi": "-", "muli": "*", "andi": "&", "ori": "|", "xori": "^", "shli": "<<",
              "shrsi": ">>", "divsi": "/"}
    if op in simple:
        return f"({a[0]} {simple[op]} {a[1]})"
    if op == "remsi":
        # C's remainder (sign of the dividend); GLSL's % on negative ints is not that.
        return f"({a[0]} - {a[1]} * ({a[0]} / {a[1]}))"
    if op in ("divui", "remui", "shrui"):
        sym = {"divui": "/", "remui": "%", "shrui": ">>"}[op]
        return f"{t}({u(a[0])} {sym} {u(a[1])})"
    if op == "floordivsi":
        return (f"({a[0]} / {a[1]} - ((({a[0]} - {a[1]} * ({a[0]} / {a[1]})) != {t}(0) && "
                f"(({a[0]} < {t}(0)) != ({a[1]} < {t}(0)))) ? {t}(1) : {t}(0)))")
    if op == "ceildivsi":
        return (f"({a[0]} / {a[1]} + ((({a[0]} - {a[1]} * ({a[0]} / {a[1]})) != {t}(0) && "
                f"(({a[0]} < {t}(0)) == ({a[1]} < {t}(0)))) ? {t}(1) : {t}(0)))")
    if op in ("maxsi", "minsi"):
        return f"{op[:3]}({a[0]}, {a[1]})"
    if op in ("maxui", "minui"):
        return f"{t}({op[:3]}({u(a[0])}, {u(a[1])}))"
    if op == "absi":
        return f"abs({a[0]})"
    # -- casts -------------------------------------------------------------------------
    if op == "sitofp":
        return f"{t}({a[0]})"
    if op == "uitofp":
        if src_t == "bool":
            return f"{t}({a[0]})"
        mask = {"i8": "0xFF", "i16": "0xFFFF"}.get(adt[0])  # narrow ints live sign-extended in an int
        return f"{t}({u(a[0])} & {mask}u)" if mask else f"{t}({u(a[0])})"
    if op in ("fptosi", "fptoui"):
        return f"{t}({a[0]})" if op == "fptosi" else f"{t}({_UNSIGNED.get(t, t)}({a[0]}))"
    if op == "extf":
        return a[0] if t == src_t else f"{t}({a[0]})"
    if op == "truncf":
        # (from f64: through f32 first, the helpers take a float; glslang rejected a double)
        x = a[0] if src_t == "float" else f"float({a[0]})"
        if n.dtype == "f16":
            return L.round_half(x)
        if n.dtype == "bf16":
            return f"hb_round_bf16({x})"
        return f"{t}({a[0]})"
    if op == "extsi":
        return f"({a[0]} ? {t}(-1) : {t}(0))" if src_t == "bool" else f"{t}({a[0]})"
    if op == "extui":
        if src_t == "bool":
            return f"({a[0]} ? {t}(1) : {t}(0))"
        mask = {"i8": "0xFF", "i16": "0xFFFF"}.get(adt[0])
        if mask:
            return f"{t}({a[0]} & {mask})"
        return f"{t}({u(a[0])})"
    if op == "trunci":
        if n.dtype == "i1":
            return f"(({a[0]} & {src_t}(1)) != {src_t}(0))"
        shift = {"i8": 24, "i16": 16}.get(n.dtype)
        if shift:
            return f"((int({a[0]}) << {shift}) >> {shift})"
        return f"{t}({a[0]})"
    if op in ("index_cast", "index_castui"):
        if op == "index_castui" and src_t != "bool":
            return f"{t}({u(a[0])})"
        return f"{t}({a[0]})"
    if op == "bitcast":
        if t == src_t:
            return a[0]
        if t == "float":
            return L.bits_to_float(a[0])
        return f"{t}({L.float_to_bits(a[0])})"
    if op == "fpowi":
        if t == "double" and L.name == "glsl":
            return f"double({L.fn('powf')}(float({a[0]}), float({a[1]})))"
        return f"{L.fn('powf')}({a[0]}, float({a[1]}))"
    if op in L.unary or op in L.binary:
        fn = L.unary.get(op) or L.binary[op]
        if t == "double" and L.name == "glsl" and fn not in _GLSL_DOUBLE_FNS:
            # GLSL's transcendental built-ins (and halbench's helpers) take float only.
            return f"double({fn}({', '.join(f'float({x})' for x in a)}))"
        return f"{fn}({', '.join(a)})"
    raise CompileError(f"GPU codegen has no lowering for body op '{op}'")
