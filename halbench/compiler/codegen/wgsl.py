"""WebGPU codegen: a dispatch -> WGSL (format ``webgpu-wgsl-v1``, ABI in docs/webgpu.md).

The kernels are the same plans and templates as Vulkan, CUDA and HIP (kernels.py): they are
rendered in the C subset with a :class:`WGSL` Lang whose buffer accesses name small per-binding
helper functions, then translated to WGSL by parsing (c2wgsl.py). What WGSL cannot store
natively — 8- and 16-bit integers, bools and bf16 — lives packed in 32-bit words: reads extract
bits, writes of outputs go through ``atomicAnd``/``atomicOr`` on their word, so neighbouring
threads writing neighbouring bytes never lose each other's bytes. f16 needs the device's
``shader-f16`` and i64 its ``shader-int64``; f64 does not exist in WGSL and is refused by name.
WGSL has no matrix units: f16 GEMMs take the scalar tiled GEMM (the target has no matrix shapes).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any, ClassVar

from halbench.compiler.codegen.c2wgsl import C_TYPES, Scope, translate, translate_function
from halbench.compiler.codegen.glsl import render
from halbench.compiler.codegen.kernels import Plan, as_dispatch, plan_dispatch
from halbench.compiler.codegen.lang import Lang
from halbench.compiler.codegen.tuning import Tuning, tuning_for
from halbench.compiler.codegen.variant import GpuVariant
from halbench.compiler.ir import Graph
from halbench.errors import CompileError
from halbench.hal import EntryPoint

__all__ = ["FORMAT", "WGSL", "generate_webgpu", "wgsl_source"]

FORMAT = "webgpu-wgsl-v1"

#: element types WGSL stores natively (storage array element type)
_NATIVE = {"f32": "f32", "i32": "i32", "u32": "u32", "i64": "i64", "u64": "u64", "f16": "f16"}
#: packed types: (bits, value type the Lang's load yields, signed)
_PACKED = {"i8": (8, "i32", True), "u8": (8, "u32", False), "i1": (8, "bool", False),
           "i16": (16, "i32", True), "u16": (16, "u32", False), "bf16": (16, "f32", False)}


class WGSL(Lang):
    name = "wgsl"
    lid = "hb_lid.x"
    group_x = "hb_wid.x"
    group_y = "hb_wid.y"
    group_z = "hb_wid.z"
    barrier = "workgroupBarrier();"
    vec4 = "vec4"
    ll_suffix = "l"
    scratch_ok = False  # no device-scope fence: split-K GEMMs run unsplit here
    unary: ClassVar[dict[str, str]] = {
        "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "tanh": "hb_tanh", "erf": "hb_erf",
        "sqrt": "sqrt", "rsqrt": "inversesqrt", "absf": "abs", "ceil": "ceil", "floor": "floor", "round": "hb_round",
        "roundeven": "roundEven", "sin": "sin", "cos": "cos", "atan": "atan", "expm1": "hb_expm1", "log1p": "hb_log1p",
        "tan": "tan", "acos": "acos", "asin": "asin", "acosh": "acosh", "asinh": "asinh", "atanh": "atanh", "cosh": "cosh", "sinh": "sinh"}
    binary: ClassVar[dict[str, str]] = {
        "maximumf": "max", "minimumf": "min", "maxnumf": "max", "minnumf": "min", "remf": "hb_fmod", "powf": "hb_pow",
        "atan2": "atan2", "copysign": "hb_copysign", "fma": "fma"}

    def load(self, i: int, dtype: str, off: str) -> str:
        if dtype == "f16":
            return f"float(B{i}[{off}])"
        return f"B{i}[{off}]" if dtype in _NATIVE else f"hb_ld_{i}({off})"

    def store(self, i: int, dtype: str, off: str, value: str) -> str:
        if dtype in _NATIVE:
            return f"B{i}[{off}] = {value};"
        return f"hb_st_{i}({off}, {value});"

    def load4(self, i: int, off4: str) -> str:
        return f"hb_ld4_{i}({off4})"

    def store4(self, i: int, off4: str, values: Sequence[str]) -> str:
        return f"hb_st4_{i}({off4}, vec4({', '.join(values)}));"

    def bits_to_float(self, bits: str) -> str:
        return f"hb_bits_f32({bits}u)" if bits.startswith("0x") else f"hb_bits_f32(int({bits}))"

    def float_to_bits(self, x: str) -> str:
        return f"hb_f32_bits({x})"

    def round_half(self, x: str) -> str:
        return f"float(float16_t({x}))"


# -- the math library: the GLSL one, translated (it is written in the shared subset) --------

_LIB_FUNCS = ("hb_erf", "hb_tanh", "hb_expm1", "hb_log1p", "hb_round", "hb_fmod", "hb_pow", "hb_copysign",
              "hb_f2bf", "hb_round_bf16", "hb_round_tf32")
_FN = re.compile(r"^(float|uint|int)\s+(\w+)\(([^)]*)\)\s*\{", re.MULTILINE)


@cache
def _library_functions() -> dict[str, tuple[str, str, str, list[str]]]:
    """name -> (return type, name, params, body lines) of the shared math library."""
    text = render("glsl_library.j2", need=set(_LIB_FUNCS))
    text = re.sub(r"//[^\n]*", "", text)
    out = {}
    for m in _FN.finditer(text):
        depth, j = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out[m.group(2)] = (m.group(1), m.group(2), m.group(3), [text[m.end(): j - 1]])
    return out


def _needs(text: str) -> list[str]:
    need = [f for f in _LIB_FUNCS if re.search(rf"\b{f}\(", text)]
    lib = _library_functions()
    # a library function may call another (hb_round_bf16 -> hb_f2bf): close over those
    changed = True
    while changed:
        changed = False
        for f in list(need):
            for g in _LIB_FUNCS:
                if g not in need and re.search(rf"\b{g}\(", lib[f][3][0]):
                    need.append(g)
                    changed = True
    return [f for f in _LIB_FUNCS if f in need]  # in definition order


# -- bindings ---------------------------------------------------------------------------------

def _binding_decl(i: int, dtype: str, output: bool) -> tuple[str, str]:
    """(WGSL declaration, element type as the kernel sees ``B{i}[...]``)."""
    if dtype in _NATIVE:
        t = _NATIVE[dtype]
        return f"@group(0) @binding({i}) var<storage, read_write> B{i}: array<{t}>;", t
    if dtype in _PACKED:
        t = "atomic<u32>" if output else "u32"
        return f"@group(0) @binding({i}) var<storage, read_write> B{i}: array<{t}>;", "u32"
    if dtype == "f64":
        raise CompileError("WGSL has no f64: this dispatch cannot run on WebGPU (compile it for another API)")
    raise CompileError(f"WebGPU codegen does not support element type '{dtype}'")


def _packed_helpers(i: int, dtype: str, output: bool, used: str) -> list[str]:
    """hb_ld_i / hb_st_i for a packed binding: the element's bits within its 32-bit word."""
    bits, vtype, signed = _PACKED[dtype]
    per = 32 // bits
    word = f"B{i}[o >> {per.bit_length() - 1}u]" if not output else f"atomicLoad(&B{i}[o >> {per.bit_length() - 1}u])"
    sh = f"u32(o & {per - 1}) * {bits}u"
    out = []
    if f"hb_ld_{i}(" in used:
        raw = f"extractBits(bitcast<i32>({word}), {sh}, {bits}u)" if signed else f"extractBits({word}, {sh}, {bits}u)"
        value = {"bool": f"{raw} != 0u", "f32": f"bitcast<f32>({raw} << 16u)"}.get(vtype, raw)
        out.append(f"fn hb_ld_{i}(o: i32) -> {vtype} {{ return {value}; }}")
    if f"hb_st_{i}(" in used:
        if not output:
            raise CompileError(f"binding {i} is written but is not an output")
        bitsv = {"bool": "select(0u, 1u, v)", "f32": "hb_f2bf(v)"}.get(vtype, "bitcast<u32>(v)" if signed else "v")
        mask = (1 << bits) - 1
        out.append(f"fn hb_st_{i}(o: i32, v: {vtype}) {{\n"
                   f"  let w = o >> {per.bit_length() - 1}u;\n  let sh = {sh};\n"
                   f"  atomicAnd(&B{i}[w], ~({mask}u << sh));\n"
                   f"  atomicOr(&B{i}[w], ({bitsv} & {mask}u) << sh);\n}}")
    return out


def _vec4_helpers(i: int, used: str) -> list[str]:
    out = []
    if f"hb_ld4_{i}(" in used:
        out.append(f"fn hb_ld4_{i}(o: i32) -> vec4<f32> {{ let b = o * 4; "
                   f"return vec4<f32>(B{i}[b], B{i}[b + 1], B{i}[b + 2], B{i}[b + 3]); }}")
    if f"hb_st4_{i}(" in used:
        out.append(f"fn hb_st4_{i}(o: i32, v: vec4<f32>) {{ let b = o * 4; "
                   f"B{i}[b] = v.x; B{i}[b + 1] = v.y; B{i}[b + 2] = v.z; B{i}[b + 3] = v.w; }}")
    return out


# -- the module --------------------------------------------------------------------------------

def wgsl_source(d: Any, g: Graph, target: Any = None, tuning: Tuning | None = None) -> tuple[Plan, str]:
    """The kernel plan of dispatch ``d`` and its WGSL module (no validation)."""
    t = tuning or tuning_for(target, "webgpu")
    L = WGSL()
    plan = plan_dispatch(d, g, t, L)
    disp = as_dispatch(d)
    body = render(plan.template, L=L, **plan.ctx)
    helper_text = "\n".join("\n".join(h[3]) for h in plan.helpers)
    used = body + "\n" + helper_text
    n_in = len(disp.inputs)
    scope = Scope(vars={"hb_lid": "vec3<u32>", "hb_wid": "vec3<u32>"})
    decls, helpers = [], []
    for i, v in enumerate(disp.values):
        dt = g.types[v].dtype
        decl, elem = _binding_decl(i, dt, i >= n_in)
        decls.append(decl)
        scope.arrays[f"B{i}"] = elem
        if dt in _PACKED:
            helpers += _packed_helpers(i, dt, i >= n_in, used)
            _, vtype, _ = _PACKED[dt]
            scope.funcs[f"hb_ld_{i}"] = (f"hb_ld_{i}", vtype)
            scope.funcs[f"hb_st_{i}"] = (f"hb_st_{i}", "")
            scope.vars[f"$params:hb_st_{i}"] = f"i32,{vtype}"
            scope.vars[f"$params:hb_ld_{i}"] = "i32"
        if i in plan.vec4:
            helpers += _vec4_helpers(i, used)
            scope.funcs[f"hb_ld4_{i}"] = (f"hb_ld4_{i}", "vec4<f32>")
            scope.funcs[f"hb_st4_{i}"] = (f"hb_st4_{i}", "")
            scope.vars[f"$params:hb_ld4_{i}"] = "i32"
    if plan.status:  # the gather bounds status slot (kernels.Plan.status)
        s = len(disp.values)
        decls.append(f"@group(0) @binding({s}) var<storage, read_write> B{s}: array<u32>;")
        scope.arrays[f"B{s}"] = "u32"
    shared = []
    for ct, name, size in plan.shared:
        wt = C_TYPES.get(ct)
        if not wt:
            raise CompileError(f"WebGPU codegen: shared memory of type '{ct}'")
        shared.append(f"var<workgroup> {name}: array<{wt}, {size}>;")
        scope.arrays[name] = wt
    library = []
    need = _needs(used + "\n".join(helpers))
    lib = _library_functions()
    for f in need:
        library += translate_function(*lib[f], scope)
    for ret, fname, params, lines in plan.helpers:
        library += translate_function(ret, fname, params, lines, scope)
    main = translate(body, scope.child())
    wg = plan.workgroup_size
    text = "\n".join([
        *(["enable f16;"] if re.search(r"\bf16\b", "\n".join(decls + shared + main + library + helpers)) else []),
        f"// {plan.ctx.get('name', disp.name)}",
        *decls, *shared, *helpers, *library,
        f"@compute @workgroup_size({wg[0]}, {wg[1]}, {wg[2]})",
        "fn main(@builtin(local_invocation_id) hb_lid: vec3<u32>, @builtin(workgroup_id) hb_wid: vec3<u32>) {",
        *("  " + ln for ln in main), "}", ""])
    return plan, text


def generate_webgpu(d: Any, g: Graph, target: Any = None, *, validate: bool = True) -> list[GpuVariant]:
    """The ``webgpu-wgsl-v1`` variant of dispatch ``d``, validated by wgpu's WGSL front end when
    this machine has a WebGPU adapter."""
    t = tuning_for(target, "webgpu")
    try:
        plan, src = wgsl_source(d, g, tuning=t)
    except CompileError as e:
        raise CompileError(f"{e} (dispatch {as_dispatch(d).name}, WebGPU)") from None
    if validate:
        from halbench.compiler.backends.wgsl_check import validate_wgsl

        validate_wgsl(src, name=as_dispatch(d).name)
    disp = as_dispatch(d)
    # A split-K dispatch's scratch binding is bound but unused: WGSL has no device-scope fence,
    # so its GEMMs run unsplit (Lang.scratch_ok) and the explicit layout keeps the slot.
    entry = EntryPoint("main", len(disp.values) + plan.status + plan.scratch, 0, plan.workgroup_size)
    return [GpuVariant(FORMAT, t.name, src.encode(), entry, plan.workgroups, (), src, "wgsl", gemm=plan.gemm)]

