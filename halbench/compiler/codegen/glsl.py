"""Vulkan codegen: a dispatch -> GLSL (jinja2 templates) -> SPIR-V (glslang), for both ABIs.

``generate_vulkan(dispatch, graph, target, abi)`` returns one :class:`GpuVariant` per ABI
(``all``: BDA first, then descriptors), each carrying what a bundle variant needs: format,
target, payload, entry point, workgroup count and constants. Both ABIs share one kernel body;
only the buffer declarations differ. Every module passes spirv-val (compile_glsl validates).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import jinja2

from halbench.compiler.backends.glslang import spirv_requirements
from halbench.compiler.codegen.kernels import Plan, as_dispatch, plan_dispatch
from halbench.compiler.codegen.lang import Lang, kernel_failure
from halbench.compiler.codegen.tuning import Tuning, tuning_for
from halbench.compiler.codegen.variant import GpuVariant
from halbench.compiler.ir import Graph
from halbench.errors import CompileError, KernelRejected
from halbench.hal import EntryPoint

__all__ = ["ABIS", "GLSL", "GpuVariant", "generate_vulkan", "glsl_sources", "render"]

ABIS = {"bda": "vulkan-spirv-bda-v1", "descriptors": "vulkan-spirv-descriptors-v1"}

_STYPE = {"f32": "float", "f16": "float16_t", "bf16": "uint16_t", "f64": "double", "i1": "uint8_t",
          "i8": "int8_t", "i16": "int16_t", "i32": "int", "i64": "int64_t", "u8": "uint8_t",
          "u16": "uint16_t", "u32": "uint", "u64": "uint64_t"}


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render(template: str, **ctx: Any) -> str:
    return _env().get_template(template).render(**ctx)


class GLSL(Lang):
    name = "glsl"
    lid = "gl_LocalInvocationID.x"
    group_x = "gl_WorkGroupID.x"
    group_y = "gl_WorkGroupID.y"
    group_z = "gl_WorkGroupID.z"
    barrier = "barrier();"
    vec4 = "vec4"
    ll_suffix = "l"
    unary: ClassVar[dict[str, str]] = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "tanh": "hb_tanh",
             "erf": "hb_erf", "sqrt": "sqrt", "rsqrt": "inversesqrt", "absf": "abs", "ceil": "ceil",
             "floor": "floor", "round": "hb_round", "roundeven": "roundEven", "sin": "sin", "cos": "cos",
             "atan": "atan", "expm1": "hb_expm1", "log1p": "hb_log1p", "tan": "tan", "acos": "acos", "asin": "asin", "acosh": "acosh", "asinh": "asinh", "atanh": "atanh", "cosh": "cosh", "sinh": "sinh"}
    binary: ClassVar[dict[str, str]] = {"maximumf": "max", "minimumf": "min", "maxnumf": "max", "minnumf": "min", "remf": "hb_fmod",
              "powf": "hb_pow", "atan2": "atan", "copysign": "hb_copysign", "fma": "fma"}

    def load(self, i: int, dtype: str, off: str) -> str:
        r = f"B{i}[{off}]"
        return {"f16": f"float({r})", "bf16": f"uintBitsToFloat(uint({r}) << 16)", "i1": f"({r} != uint8_t(0))",
                "i8": f"int({r})", "i16": f"int({r})", "u8": f"uint({r})", "u16": f"uint({r})"}.get(dtype, r)

    def store(self, i: int, dtype: str, off: str, value: str) -> str:
        v = {"f16": f"float16_t({value})", "bf16": f"uint16_t(hb_f2bf({value}))",
             "i1": f"uint8_t({value} ? 1 : 0)", "i8": f"int8_t({value})", "i16": f"int16_t({value})",
             "u8": f"uint8_t({value})", "u16": f"uint16_t({value})"}.get(dtype, value)
        return f"B{i}[{off}] = {v};"

    def load4(self, i: int, off4: str) -> str:
        return f"V{i}[{off4}]"

    def store4(self, i: int, off4: str, values: Sequence[str]) -> str:
        return f"V{i}[{off4}] = vec4({', '.join(values)});"

    scratch_fence = "memoryBarrierBuffer();"

    def scratch_store(self, i: int, off: str, value: str) -> str:
        return f"B{i}[{off}] = floatBitsToUint({value});"

    def scratch_load(self, i: int, off: str) -> str:
        return f"uintBitsToFloat(B{i}[{off}])"

    def scratch_add(self, i: int, off: str) -> str:
        return f"int(atomicAdd(B{i}[{off}], 1u))"

    # through the scratch binding's coherent uvec4 view (glsl.py declares it where SPLIT4 is on)
    scratch4_ok = True

    def scratch_store4(self, i: int, off4: str, values: Sequence[str]) -> str:
        return f"V{i}[{off4}] = floatBitsToUint(vec4({', '.join(values)}));"

    def scratch_load4(self, i: int, off4: str) -> str:
        return f"uintBitsToFloat(V{i}[{off4}])"

    def bits_to_float(self, bits: str) -> str:
        if bits.startswith("0x"):
            return f"uintBitsToFloat({bits}u)"
        return f"intBitsToFloat(int({bits}))"

    def float_to_bits(self, x: str) -> str:
        return f"floatBitsToInt({x})"

    def round_half(self, x: str) -> str:
        return f"hb_round_f16({x})"


_LIB_FUNCS = ("hb_erf", "hb_tanh", "hb_expm1", "hb_log1p", "hb_round", "hb_fmod", "hb_pow", "hb_copysign",
              "hb_f2bf", "hb_round_bf16", "hb_round_tf32", "hb_round_f16", "hb_div")


def _needs(text: str) -> set[str]:
    return {f for f in _LIB_FUNCS if re.search(rf"\b{f}\(", text)}


def glsl_sources(d: Any, g: Graph, target: Any = None, abis: Sequence[str] = ("bda", "descriptors"),
                 tuning: Tuning | None = None) -> tuple[Plan, dict[str, str]]:
    """The kernel plan and the GLSL source per ABI (no compilation)."""
    t = tuning or tuning_for(target, "vulkan")
    L = GLSL()
    plan = plan_dispatch(d, g, t, L)
    disp = as_dispatch(d)
    body = render(plan.template, L=L, **plan.ctx)
    helpers_text = "\n".join("\n".join(h[3]) for h in plan.helpers)
    need = _needs(body + helpers_text)
    library = render("glsl_library.j2", need=need)
    n_in = len(disp.inputs)
    bindings = []
    for i, v in enumerate(disp.values):
        dt = g.types[v].dtype
        if dt not in _STYPE:
            raise CompileError(f"Vulkan codegen does not support element type '{dt}' (value {v})")
        bindings.append({"i": i, "stype": _STYPE[dt], "access": "readonly" if i < n_in else ("" if plan.reads_outputs else "writeonly"),
                         "vec4": i in plan.vec4, "align": 8 if dt in ("i64", "u64", "f64") else 4,
                         # 16-bit data read 8 at a time keeps its bits in a uvec4 view
                         "vtype": "uvec4" if dt in ("f16", "bf16") else "vec4"})
    if plan.status:  # the gather bounds status slot (kernels.Plan.status)
        bindings.append({"i": len(disp.values), "stype": "uint", "access": "writeonly", "vec4": False,
                         "align": 4, "vtype": "vec4"})
    if plan.scratch:  # split-K partial sums and counters (kernels.GemmSplit), read across workgroups
        bindings.append({"i": len(disp.values) + plan.status, "stype": "uint", "access": "coherent",
                         "vec4": bool(plan.ctx.get("SPLIT4")), "align": 4, "vtype": "uvec4"})
    sources = {}
    for abi in abis:
        sources[abi] = render("glsl_module.j2", abi=abi, name=plan.ctx.get("name", disp.name),
                              wg=plan.workgroup_size, bindings=bindings, shared=plan.shared, library=library,
                              helpers=plan.helpers, body=body, extensions=sorted(plan.ctx.get("extensions", ())))
    return plan, sources


def generate_vulkan(d: Any, g: Graph, target: Any = None, abi: str = "all", *,
                    validate: bool = True) -> list[GpuVariant]:
    """SPIR-V variants of dispatch ``d`` for ``target`` (a ``targets.Target``, a name, or None
    for the safe default). ``abi``: ``descriptors``, ``bda`` or ``all`` (BDA first)."""
    if abi not in ("all", "bda", "descriptors"):
        raise CompileError(f"--vulkan-dispatch-abi must be descriptors, bda or all, not '{abi}'")
    abis = ("bda", "descriptors") if abi == "all" else (abi,)
    t = tuning_for(target, "vulkan")
    plan, sources = glsl_sources(d, g, abis=abis, tuning=t)
    disp = as_dispatch(d)
    out = []
    for a in abis:
        name = re.sub(r"[^A-Za-z0-9_]+", "_", f"{disp.name}_{a}")
        spirv = _compile(sources[a], name, validate)
        entry = EntryPoint("main", len(disp.values) + plan.status + plan.scratch, 0, plan.workgroup_size)
        needs = spirv_requirements(spirv) + ((f"subgroupSize{plan.min_subgroup}",) if plan.min_subgroup > 1 else ())
        out.append(GpuVariant(ABIS[a], t.name, spirv, entry, plan.workgroups, (), sources[a], "spv",
                              needs, plan.gemm, plan.matrix))
    return out


def _compile(source: str, name: str, validate: bool) -> bytes:
    from halbench.compiler.backends.glslang import compile_glsl

    try:
        return compile_glsl(source, name=name, validate=validate)
    except KernelRejected as e:  # (a missing glslang stays its own one-line error)
        raise kernel_failure(e, source, name, "comp") from None
