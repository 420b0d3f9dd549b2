"""CUDA codegen: a dispatch -> CUDA C (the shared templates) -> cubin for the exact arch + PTX.

``generate_cuda(dispatch, graph, target)`` returns a ``cuda-cubin-v1`` variant for the target's
arch (``sm_90`` ...) and a ``cuda-ptx-v1`` fallback the driver JIT-compiles on later GPUs. The
kernel is ``hb_main`` in the source and ``main`` in the binary (NVRTC renames it; CUDA C cannot
name a kernel ``main``). ABI: one pointer per binding, no uint32 parameters (shapes are baked
in); block = the entry's workgroup_size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

from halbench.arch import is_sm, parse_sm
from halbench.compiler.codegen.glsl import GpuVariant, _needs, render
from halbench.compiler.codegen.kernels import Plan, as_dispatch, plan_dispatch
from halbench.compiler.codegen.lang import Lang, kernel_failure
from halbench.compiler.codegen.tuning import Tuning, tuning_for
from halbench.compiler.ir import Graph
from halbench.errors import CompileError, KernelRejected
from halbench.hal import EntryPoint

__all__ = ["CUDA", "cuda_source", "generate_cuda"]

_STYPE = {"f32": "float", "f16": "__half", "bf16": "unsigned short", "f64": "double", "i1": "unsigned char",
          "i8": "signed char", "i16": "short", "i32": "int", "i64": "long long", "u8": "unsigned char",
          "u16": "unsigned short", "u32": "unsigned int", "u64": "unsigned long long"}

CUDA_HEADER = "#include <cuda_fp16.h>"


class CUDA(Lang):
    name = "cuda"
    vec4 = "float4"
    unary: ClassVar[dict[str, str]] = {"exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "tanh": "tanhf", "erf": "erff",
             "sqrt": "sqrtf", "rsqrt": "rsqrtf", "absf": "fabsf", "ceil": "ceilf", "floor": "floorf",
             "round": "roundf", "roundeven": "rintf", "sin": "sinf", "cos": "cosf", "atan": "atanf",
             "expm1": "expm1f", "log1p": "log1pf", "tan": "tanf", "acos": "acosf", "asin": "asinf",
             "acosh": "acoshf", "asinh": "asinhf", "atanh": "atanhf", "cosh": "coshf", "sinh": "sinhf"}
    binary: ClassVar[dict[str, str]] = {"maximumf": "fmaxf", "minimumf": "fminf", "maxnumf": "fmaxf", "minnumf": "fminf",
              "remf": "fmodf", "powf": "powf", "atan2": "atan2f", "copysign": "copysignf", "fma": "fmaf"}

    def load(self, i: int, dtype: str, off: str) -> str:
        r = f"B{i}[{off}]"
        return {"f16": f"__half2float({r})", "bf16": f"__uint_as_float(uint({r}) << 16)",
                "i1": f"({r} != 0)", "i8": f"int({r})", "i16": f"int({r})", "u8": f"uint({r})",
                "u16": f"uint({r})"}.get(dtype, r)

    def store(self, i: int, dtype: str, off: str, value: str) -> str:
        v = {"f16": f"__float2half({value})", "bf16": f"(unsigned short)hb_f2bf({value})",
             "i1": f"(unsigned char)({value} ? 1 : 0)", "i8": f"(signed char)({value})",
             "i16": f"(short)({value})", "u8": f"(unsigned char)({value})",
             "u16": f"(unsigned short)({value})"}.get(dtype, value)
        return f"B{i}[{off}] = {v};"

    def load4(self, i: int, off4: str) -> str:
        return f"reinterpret_cast<const float4*>(B{i})[{off4}]"

    def store4(self, i: int, off4: str, values: Sequence[str]) -> str:
        return f"reinterpret_cast<float4*>(B{i})[{off4}] = make_float4({', '.join(values)});"

    # L2 only (ld.cg / st.cg): another workgroup's partials are never read from a stale L1 line
    scratch4_ok = True

    def scratch_store4(self, i: int, off4: str, values: Sequence[str]) -> str:
        return f"__stcg(reinterpret_cast<float4*>(B{i}) + ({off4}), make_float4({', '.join(values)}));"

    def scratch_load4(self, i: int, off4: str) -> str:
        return f"__ldcg(reinterpret_cast<const float4*>(B{i}) + ({off4}))"

    def bits_to_float(self, bits: str) -> str:
        return f"__int_as_float(int({bits}))"

    def float_to_bits(self, x: str) -> str:
        return f"__float_as_int({x})"

    def round_half(self, x: str) -> str:
        return f"__half2float(__float2half({x}))"


#: Kernels for sm_90 and later wait for the grids they depend on themselves (griddepcontrol.wait,
#: PTX 7.8) and are marked EntryPoint.dependent_launch, so the CUDA driver may launch each one
#: programmatically after its kernel predecessor (drivers/_gpu/command_buffer.py): its launch then
#: overlaps the end of the previous kernel instead of following its completion. H200, whole
#: models: 1-7% faster (MobileNetV2 b1 0.237 -> 0.222 ms; docs/examples/h200-dependent-launch.txt).
DEPENDENT_LAUNCH = True


def dependent_launch(arch: str) -> bool:
    """Whether kernels for ``arch`` wait for their predecessor grids themselves (sm_90+)."""
    return DEPENDENT_LAUNCH and is_sm(arch) and parse_sm(arch).major >= 9


def _render(plan: Plan, d: Any, g: Graph, lang: Lang, header: str, griddep: bool = False) -> str:
    disp = as_dispatch(d)
    body = render(plan.template, L=lang, **plan.ctx)
    need = _needs(body + "\n".join("\n".join(h[3]) for h in plan.helpers))
    if plan.ctx.get("ASYNC"):  # the scalar GEMM stages through cp.async (gemm.j2)
        need.add("hb_cp_async")
    bindings = []
    for i, v in enumerate(disp.values):
        dt = g.types[v].dtype
        if dt not in _STYPE:
            raise CompileError(f"CUDA codegen does not support element type '{dt}' (value {v})")
        bindings.append({"i": i, "stype": _STYPE[dt], "input": i < len(disp.inputs)})
    if plan.status:  # the gather bounds status slot (kernels.Plan.status)
        bindings.append({"i": len(disp.values), "stype": "unsigned int", "input": False})
    if plan.scratch:  # split-K partial sums and counters (kernels.GemmSplit)
        bindings.append({"i": len(disp.values) + plan.status, "stype": "unsigned int", "input": False})
    # The matrix GEMM needs mma.h (and cuda_bf16.h) on top of the language's header.
    header = "\n".join((header, *plan.ctx.get("includes", ())))
    return render("cuda_module.j2", header=header, name=plan.ctx.get("name", disp.name), wg=plan.workgroup_size,
                  bindings=bindings, shared=plan.shared, helpers=plan.helpers, body=body,
                  constants=plan.ctx.get("constants", ()), min_blocks=plan.ctx.get("MIN_BLOCKS", 0),
                  library=render("cuda_library.j2", need=need), griddep=griddep)


def cuda_source(d: Any, g: Graph, target: Any = None, tuning: Tuning | None = None) -> tuple[Plan, str]:
    """The kernel plan and its CUDA C source (no compilation)."""
    t = tuning or tuning_for(target, "cuda")
    L = CUDA()
    plan = plan_dispatch(d, g, t, L)
    return plan, _render(plan, d, g, L, CUDA_HEADER, griddep=dependent_launch(t.arch))


def generate_cuda(d: Any, g: Graph, target: Any = None, *, formats: Sequence[str] = ("cubin", "ptx")) -> list[GpuVariant]:
    """cubin (for the target's exact arch) then PTX variants of dispatch ``d``."""
    from halbench.compiler.backends.nvrtc import compile_cuda

    t = tuning_for(target, "cuda")
    if not is_sm(t.arch):
        raise CompileError(f"CUDA target '{t.arch}' is not an sm_XY arch")
    plan, src = cuda_source(d, g, tuning=t)
    disp = as_dispatch(d)
    name = re.sub(r"[^A-Za-z0-9_]+", "_", disp.name)
    entry = EntryPoint("main", len(disp.values) + plan.status + plan.scratch, 0, plan.workgroup_size,
                       plan.dynamic_shared, dependent_launch(t.arch))
    out = []
    for fmt in formats:
        try:
            data = compile_cuda(src, arch=t.arch, output=fmt, name=name, rename={"hb_main": "main"})
        except KernelRejected as e:  # (NVRTC missing stays its own one-line error)
            raise kernel_failure(e, src, f"{name}-{t.arch}", "cu") from None
        out.append(GpuVariant(f"cuda-{fmt}-v1", t.arch, data, entry, plan.workgroups, (), src, fmt, gemm=plan.gemm,
                              matrix=plan.matrix))
    return out
