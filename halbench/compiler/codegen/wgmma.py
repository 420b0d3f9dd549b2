"""Hopper's warpgroup MMA (wgmma, sm_90a): what the peaks suite's GEMMs (micro_cuda.py) and the
model compiler's GEMM plan (``gemm_wgmma.j2``) share, and that plan's template context.

Both stage their operands K-major in shared memory in the layout wgmma's 64-byte swizzle reads:
each 64-byte K slice of a tile is a sub-tile of ``[rows][64 bytes]``, 16-byte chunk ``c`` of row
``r`` at chunk ``c ^ ((r >> 1) & 3)``, in 512-byte atoms of 8 rows (``hb_swz64``). One wgmma K
step is 32 bytes of every row whatever the type (k16 of f16 / bf16, k8 of tf32), so a step
starts at sub-tile ``kk / 2``, 32 bytes in when ``kk`` is odd, and the descriptor
(``hb_wg_desc``) is the same for both operands and every type.
"""

from __future__ import annotations

from typing import Any

from halbench.compiler.codegen.tuning import WgmmaTiles

__all__ = ["WGMMA_C", "wgmma_asm", "wgmma_context", "wgmma_mode", "wgmma_vec_bindings"]

#: Device functions (file scope): the swizzled byte offset and the matrix descriptor.
WGMMA_C = r"""
// byte offset of 16-byte chunk c (0..3) of row r in a [rows][64 bytes] sub-tile, XOR-swizzled as
// wgmma's 64-byte mode reads it (eight rows' chunks also fall in eight different bank groups)
__device__ __forceinline__ unsigned hb_swz64(unsigned r, unsigned c) {
  return r * 64u + ((c ^ ((r >> 1) & 3u)) << 4);
}
// K-major operand at shared address a, 64-byte swizzle (mode 2 in bits 62-63), 8-row groups 512
// bytes apart (SBO), leading offset unused for swizzled K-major layouts (1, as CUTLASS sets it)
__device__ __forceinline__ unsigned long long hb_wg_desc(unsigned a) {
  return ((unsigned long long)(a & 0x3FFFFu) >> 4) | (1ull << 16) | ((512ull >> 4) << 32) | (2ull << 62);
}
"""

#: wgmma's operand type per kind and K of one instruction (32 bytes of each row).
_TYPE_K = {"f16": ("f16", 16), "bf16": ("bf16", 16), "tf32": ("tf32", 8)}


def wgmma_asm(bn: int, kind: str, acc: str = "d") -> str:
    """The inline PTX of one ``wgmma.mma_async.m64n{bn}k{16|8}`` on K-major descriptors ``da`` /
    ``db`` into ``bn / 2`` f32 accumulators ``acc[i]``, scaling them by the predicate ``sc``
    (0: the first step overwrites them). tf32 takes no transpose immediates."""
    ty, k = _TYPE_K[kind]
    n = bn // 2
    regs = ", ".join(f"%{i}" for i in range(n))
    outs = ", ".join(f'"+f"({acc}[{i}])' for i in range(n))
    imm = "1, 1" if kind == "tf32" else "1, 1, 0, 0"
    return (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 2}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{bn}k{k}.f32.{ty}.{ty} "\n'
            f'    "{{{regs}}}, %{n}, %{n + 1}, p, {imm};\\n}}\\n"\n'
            f'    : {outs}\n    : "l"(da), "l"(db), "r"(sc) : "memory");')


#: staged bytes per element and the pair type / conversion of two f32 into one staged word
_STAGE = {"f16": (2, "__half2", "__floats2half2_rn"), "bf16": (2, "__nv_bfloat162", "__floats2bfloat162_rn"),
          "tf32": (4, None, None)}
#: the tensor element type a "cp16" copy takes as it is, per kind
_SOURCE = {"f16": "f16", "bf16": "bf16", "tf32": "f32"}


def wgmma_context(tiles: WgmmaTiles, kind: str, k: int, a: dict[str, Any], b: dict[str, Any],
                  load4: Any) -> dict[str, Any]:
    """The template context of ``gemm_wgmma.j2`` for ``kind`` (f16, bf16, tf32) operands and a
    GEMM ``k`` deep; the caller adds the problem (M, N, K, finish, ...) and split-K.

    ``a`` / ``b`` describe each operand: ``buf`` (its binding, ``B<i>``), ``index`` (i),
    ``dtype``, ``off`` (the element offset of row m / n at depth k where K is contiguous, else
    None), ``load`` (its element as f32, an expression of m / n, k and b), ``i2c`` (an NCHW
    convolution's B: the im2col pixel / tap split, kernels._plan_gemm) and ``lim`` (M or N).
    ``load4(index, off4)``: the language's float4 load."""
    es, pair, pack = _STAGE[kind]
    e = 16 // es
    t = tiles
    for rows in (t.bm, t.bn):
        if rows > t.threads or t.threads % rows or (rows * 8) % t.threads:
            raise ValueError(f"wgmma tile rows {rows} do not share out over its {t.threads} threads")
    if t.bn % 8 or not 8 <= t.bn <= 256:
        raise ValueError(f"wgmma N tile {t.bn} is not a multiple of 8 up to 256")
    ops = {}
    for x, o, rows, var in (("a", a, t.bm, "m"), ("b", b, t.bn, "n")):
        op = {"R": rows, "var": var, "lim": o["lim"], "buf": o["buf"], "off": o.get("off"),
              "load": o.get("load"), "i2c": o.get("i2c"), "v4": None}
        mode = wgmma_mode(kind, k, o)
        if mode == "cp16":
            op.update(mode="cp16", map="kfast")  # 16-byte copies of runs already of the staged type
        elif mode == "cp4":
            op.update(mode="cp4", map="rows")  # f32 im2col padded with zeros: 4-byte zero-filling copies
        elif op["off"] is not None and o["dtype"] == "f32" and k % 4 == 0:
            op.update(mode="reg", map="kfast", v4=load4(o["index"], f"({op['off']}) / 4"))
        else:
            op.update(mode="reg", map="rows")
        ops[x] = op
    helpers = WGMMA_C + _wgmma_fn(t.bn, kind)
    if pair is not None:
        helpers += ("__device__ __forceinline__ unsigned hb_pack2(float x, float y) {\n"
                    f"  {pair} h = {pack}(x, y);\n  return *reinterpret_cast<unsigned*>(&h);\n}}\n")
    return {"KIND": kind, "ES": es, "E": e, "BK": 128 // es, "BM": t.bm, "BN": t.bn, "NWG": t.nwg,
            "WG": t.threads, "STAGES": t.stages, "INFLIGHT": t.inflight, "FK": 32 // es,
            "STAGE_BYTES": t.stage_bytes(), "OPS": ops, "includes": ("#include <cuda_bf16.h>", helpers)}


def wgmma_mode(kind: str, k: int, o: dict[str, Any]) -> str:
    """How the wgmma GEMM stages operand ``o`` (as wgmma_context takes it): "cp16", "cp4" (both
    cp.async) or "reg" (through registers, converted)."""
    if o.get("off") is not None and o["dtype"] == _SOURCE[kind] and k % (16 // _STAGE[kind][0]) == 0:
        return "cp16"
    if o.get("i2c") is not None and kind == "tf32" and o["i2c"].get("zero"):
        return "cp4"
    return "reg"


def wgmma_vec_bindings(ctx: dict[str, Any]) -> set[int]:
    """Bindings the plan reads as 16-byte vectors (their alignment is part of the ABI)."""
    return {int(o["buf"][1:]) for o in ctx["OPS"].values() if o["mode"] == "cp16" or o["v4"]}


def _wgmma_fn(bn: int, kind: str) -> str:
    return ("__device__ __forceinline__ void hb_wgmma(float* d, unsigned long long da, "
            "unsigned long long db, unsigned sc) {\n  " + wgmma_asm(bn, kind) + "\n}\n")
