"""HIP codegen: the CUDA kernels with a HIP header, compiled to a code object by hipRTC.

HIP C accepts the CUDA C the templates emit (``__global__``, ``__shared__``, ``threadIdx``,
``__launch_bounds__``, ``__half`` from hip_fp16.h, ``__int_as_float``), so only the header
differs. UNTESTED on hardware: there is no ROCm here; tests check the source and skip the
compile when hipRTC is missing. Wave64 targets (CDNA) get 256-thread blocks like the others.
"""

from __future__ import annotations

import re
from typing import Any

from halbench.compiler.codegen.cuda import CUDA, _render
from halbench.compiler.codegen.kernels import Plan, as_dispatch, plan_dispatch
from halbench.compiler.codegen.tuning import Tuning, tuning_for
from halbench.compiler.codegen.variant import GpuVariant
from halbench.compiler.ir import Graph
from halbench.errors import CompileError
from halbench.hal import EntryPoint

__all__ = ["HIP_HEADER", "generate_hip", "hip_source"]

HIP_HEADER = "#include <hip/hip_runtime.h>\n#include <hip/hip_fp16.h>"


def hip_source(d: Any, g: Graph, target: Any, tuning: Tuning | None = None) -> tuple[Plan, str]:
    t = tuning or tuning_for(target, "hip")
    L = CUDA()
    plan = plan_dispatch(d, g, t, L)
    # hipRTC keeps extern "C" names as written, and a kernel cannot be called main: the code
    # object's symbol is hb_main, renamed like CUDA's once hipRTC exposes the renaming.
    return plan, _render(plan, d, g, L, HIP_HEADER)


def generate_hip(d: Any, g: Graph, target: Any) -> list[GpuVariant]:
    """A ``hip-hsaco-v1`` variant of dispatch ``d`` for the target's gfx arch."""
    from halbench.compiler.backends.nvrtc import compile_hip

    t = tuning_for(target, "hip")
    if not re.fullmatch(r"gfx[0-9a-f]+", t.arch):
        raise CompileError(f"HIP target '{t.arch}' is not a gfx arch")
    plan, src = hip_source(d, g, None, tuning=t)
    disp = as_dispatch(d)
    data = compile_hip(src, arch=t.arch, name=re.sub(r"[^A-Za-z0-9_]+", "_", disp.name))
    entry = EntryPoint("hb_main", len(disp.values) + plan.status + plan.scratch, 0, plan.workgroup_size)
    return [GpuVariant("hip-hsaco-v1", t.arch, data, entry, plan.workgroups, (), src, "hsaco", gemm=plan.gemm)]
