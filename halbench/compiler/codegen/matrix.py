"""The matrix-unit GEMM plans: ``gemm_mma.j2`` (cooperative matrix on Vulkan, WMMA on CUDA
before sm_80) and ``gemm_mma_sync.j2`` (CUDA sm_80+: mma.sync, ldmatrix, cp.async).

Chosen by ``kernels._plan_gemm`` when both GEMM operands are f16 (or bf16 on CUDA) and the
target has a fragment shape for them (:func:`~halbench.compiler.codegen.tuning.mma_fragment`);
every other GEMM, and every target without matrix units (lavapipe, the generic Vulkan target,
HIP for now), keeps the scalar f32 tiled GEMM. Kept apart from ``kernels.py`` so that module
needs no knowledge of fragment types, and this one none of IR ops.
"""

from __future__ import annotations

from typing import Any

from halbench.compiler.codegen.lang import Lang
from halbench.compiler.codegen.tuning import SYNC_PAD, MmaTiles

__all__ = ["mma_context", "mma_sync_context", "vector_load"]

# Shared-memory element type, the float -> element conversion ("{}" is the value) and the
# fragment's element type, per language and operand type. Values from f16 / bf16 buffers round
# trip exactly; f32 values (``--precision``) are rounded to nearest even here, as they are staged.
_HALF = {("glsl", "f16"): ("float16_t", "float16_t({})", "float16_t"),
         ("cuda", "f16"): ("__half", "__float2half_rn({})", "__half"),
         ("cuda", "bf16"): ("__nv_bfloat16", "__float2bfloat16_rn({})", "__nv_bfloat16"),
         # tf32 is staged as 32-bit floats whose low 13 mantissa bits are rounded away
         ("cuda", "tf32"): ("float", "nvcuda::wmma::__float_to_tf32({})", "nvcuda::wmma::precision::tf32")}

_GLSL_EXTENSIONS = ("GL_KHR_cooperative_matrix", "GL_KHR_memory_scope_semantics",
                    "GL_KHR_shader_subgroup_basic")
_CUDA_INCLUDES = ("#include <cuda_bf16.h>", "#include <mma.h>")

#: Padding of the shared rows, in elements: keeps every fragment's start and stride a multiple
#: of 16 bytes (cooperative-matrix and WMMA loads need it) while shifting rows across banks.
PAD_AB, PAD_C = 8, 4


def mma_context(lang: Lang, tiles: MmaTiles, in_dtype: str) -> tuple[dict[str, Any], list[tuple[str, str, int]]]:
    """The template context and the shared arrays (type, name, elements) of the matrix GEMM;
    the caller adds the problem (M, N, K, loads, epilogue) to the context. ``in_dtype``: the
    fragments' operand type (f16, bf16, tf32)."""
    half, to_half, frag = _HALF[(lang.name, in_dtype)]
    t = tiles
    lda, ldb, ldc = t.bk + PAD_AB, t.bn + PAD_AB, t.fn + PAD_C
    subgroups = t.threads // t.min_subgroup  # the most the driver can make of this workgroup
    ctx = {"BM": t.bm, "BN": t.bn, "BK": t.bk, "FM": t.fm, "FN": t.fn, "FK": t.fk,
           "WM": t.warps_m, "WN": t.warps_n, "FRM": t.frags_m, "FRN": t.frags_n, "SLOTS": t.slots,
           "WG": t.threads, "LDA": lda, "LDB": ldb, "LDC": ldc, "HALF": half, "TO_HALF": to_half, "FRAG": frag}
    if lang.name == "glsl":
        ctx["extensions"] = _GLSL_EXTENSIONS
        align = ""
    else:
        ctx["includes"] = _CUDA_INCLUDES
        align = "__align__(32) "  # WMMA wants 256-bit aligned fragment pointers
    shared = [(align + half, "As", t.bm * lda), (align + half, "Bs", t.bk * ldb),
              (align + "float", "Cs", subgroups * t.fm * ldc)]
    return ctx, shared


def vector_load(lang: Lang, binding: int, offset: str) -> str:
    """Eight f16 / bf16 elements from ``offset`` (a multiple of 8) of ``binding`` as one 16-byte
    load: a ``uvec4`` in GLSL (the binding's 16-byte view, uvec4 for 16-bit data), a ``uint4``
    in CUDA C."""
    if lang.name == "glsl":
        return f"V{binding}[({offset}) / 8]"
    return f"reinterpret_cast<const uint4*>(B{binding})[({offset}) / 8]"


# -- sm_80+: mma.sync (gemm_mma_sync.j2) ------------------------------------------------------

# Staged element type, its f32 -> staged conversion ("{}" the value), the 2-element type and its
# packing conversion, per fragment type. tf32 is staged as raw f32 and rounded as fragments are read.
_SYNC = {"f16": ("__half", "__float2half_rn({})", "__half2", "__floats2half2_rn"),
         "bf16": ("__nv_bfloat16", "__float2bfloat16_rn({})", "__nv_bfloat162", "__floats2bfloat162_rn"),
         "tf32": ("float", "{}", "float2", "make_float2")}

def mma_sync_context(tiles: MmaTiles, kind: str, dynamic: int = 0) -> tuple[dict[str, Any], list[tuple[str, str, int]]]:
    """The template context (tiles, stages, staged type, conversions) and shared arrays of the
    mma.sync GEMM for fragments of ``kind`` (f16, bf16, tf32); the caller adds the problem and the
    operands' load modes (``MODE``, ``PTR``, ``BASE``, ``VEC``, ``VEC4``). With ``dynamic`` (bytes,
    tuning.mma_sync_dynamic) the stages live in dynamic shared memory that the kernel carves
    itself (``DYN``), and no static array is declared."""
    st, conv, pair, conv2 = _SYNC[kind]
    t = tiles
    if t.frags_n % 2:  # ldmatrix .x4.trans loads the B fragments of two n8 tiles at once
        raise ValueError(f"mma.sync tiles need an even number of n8 fragments, not {t.frags_n}")
    pa, pb = SYNC_PAD[kind]
    lda, ldb = t.bk + pa, t.bn + pb
    ctx = {"KIND": kind, "BM": t.bm, "BN": t.bn, "BK": t.bk, "WM": t.warps_m, "WN": t.warps_n,
           "FRM": t.frags_m, "FRN": t.frags_n, "WG": t.threads, "LDA": lda, "LDB": ldb, "ST": st,
           "CONV": conv, "PAIR": pair, "CONV2": conv2, "includes": _CUDA_INCLUDES,
           "STAGES": t.stages, "DYN": dynamic}
    if dynamic:
        return ctx, []
    shared = [("__align__(16) " + st, "As", t.stages * t.bm * lda),
              ("__align__(16) " + st, "Bs", t.stages * t.bk * ldb)]
    return ctx, shared
