"""CUDA C sources of the device-peak microbenchmarks, compiled with NVRTC.

Same micro ABI as the GLSL and local versions: one pointer per binding, then uint32
constants. Each kernel is ``extern "C"`` and named :data:`ENTRY`.
"""

from __future__ import annotations

from halbench.compiler.codegen.wgmma import WGMMA_C, wgmma_asm

ENTRY = "micro"

_HEAD = r"""
#include <cuda_fp16.h>
#include <mma.h>
typedef unsigned int uint;
"""

SOURCES: dict[str, str] = {
    # dst[i] = src[i] in tiles of 256 * UNROLL float4 per workgroup: each thread loads UNROLL
    # 16-byte vectors (all in flight) before it stores them; the workgroups stride over the tiles.
    # The host keeps n below 2^31, so no index overflows.
    "copy": r"""
extern "C" __global__ void __launch_bounds__(256) micro(const float4* __restrict__ src, float4* __restrict__ dst, uint n) {
  const uint tile = 256u * UNROLL;
  for (uint base = blockIdx.x * tile + threadIdx.x; base < n; base += gridDim.x * tile) {
    float4 v[UNROLL];
    #pragma unroll
    for (int j = 0; j < UNROLL; j++) { uint i = base + j * 256u; if (i < n) v[j] = src[i]; }
    #pragma unroll
    for (int j = 0; j < UNROLL; j++) { uint i = base + j * 256u; if (i < n) dst[i] = v[j]; }
  }
}""",
    "triad": r"""
extern "C" __global__ void __launch_bounds__(256) micro(float4* __restrict__ a, const float4* __restrict__ b, const float4* __restrict__ c, uint n, uint sbits) {
  float s = __uint_as_float(sbits);
  uint stride = gridDim.x * 256u;
  for (uint i = blockIdx.x * 256u + threadIdx.x; i < n; i += stride) {
    float4 x = b[i], y = c[i];
    a[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
  }
}""",
    # CHAINS independent FMA chains per thread (x = x * a + b, a an immediate, b one register);
    # the loop body repeats UNROLL times (the host makes iters a multiple of UNROLL).
    "fma_f32": r"""
extern "C" __global__ void __launch_bounds__(256) micro(float* out, uint iters) {
  uint gid = blockIdx.x * 256u + threadIdx.x;
  float a = 0.999f, b = (gid & 7u) * 1e-3f;
  float x[CHAINS];
  #pragma unroll
  for (int j = 0; j < CHAINS; j++) x[j] = b + j;
  for (uint i = 0; i < iters; i += UNROLL) {
    #pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      #pragma unroll
      for (int j = 0; j < CHAINS; j++) x[j] = fmaf(x[j], a, b);
    }
  }
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < CHAINS; j++) s += x[j];
  out[gid] = s;
}""",
    "fma_f16": r"""
extern "C" __global__ void __launch_bounds__(256) micro(float* out, uint iters) {
  uint gid = blockIdx.x * 256u + threadIdx.x;
  __half2 a = __float2half2_rn(0.999f), b = __float2half2_rn((gid & 7u) * 1e-3f);
  __half2 x[16];
  #pragma unroll
  for (int j = 0; j < 16; j++) x[j] = __hadd2(b, __float2half2_rn((float)j));
  for (uint i = 0; i < iters; i++) {
    #pragma unroll
    for (int j = 0; j < 16; j++) x[j] = __hfma2(x[j], a, b);
  }
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < 16; j++) s += __low2float(x[j]) + __high2float(x[j]);
  out[gid] = s;
}""",
    # 16 chains x[j] += dot4(bytes of x[j], bytes of b): each dot depends on the last, so no
    # compiler can hoist it out of the loop; the result is exact (bench.micro checks it).
    "dot_int8": r"""
extern "C" __global__ void __launch_bounds__(256) micro(float* out, uint iters) {
  uint gid = blockIdx.x * 256u + threadIdx.x;
  int b = 0x7f817f81;
  int x[16];
  #pragma unroll
  for (int j = 0; j < 16; j++) x[j] = 16 * (int)(gid & 3u) + j;
  for (uint i = 0; i < iters; i++) {
    #pragma unroll
    for (int j = 0; j < 16; j++) x[j] = __dp4a(x[j], b, x[j]);
  }
  uint s = 0u;
  #pragma unroll
  for (int j = 0; j < 16; j++) s += (uint)x[j];
  out[gid] = (float)(int)s;
}""",
    # Tensor cores through WMMA: each warp keeps A, B fragments and accumulates iters products.
    "matrix_f16": r"""
using namespace nvcuda;
extern "C" __global__ void __launch_bounds__(128) micro(const __half* ab, float* out, uint iters) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> A;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> B;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> C[4];
  wmma::load_matrix_sync(A, ab, 16);
  wmma::load_matrix_sync(B, ab + 256, 16);
  #pragma unroll
  for (int j = 0; j < 4; j++) wmma::fill_fragment(C[j], 0.0f);
  for (uint i = 0; i < iters; i++) {
    #pragma unroll
    for (int j = 0; j < 4; j++) wmma::mma_sync(C[j], A, B, C[j]);
  }
  #pragma unroll
  for (int j = 1; j < 4; j++)
    for (int t = 0; t < C[0].num_elements; t++) C[0].x[t] += C[j].x[t];
  uint warp = (blockIdx.x * 128u + threadIdx.x) / 32u;
  wmma::store_matrix_sync(out + warp * 256, C[0], 16, wmma::mem_row_major);
}""",
    "noop": r"""
extern "C" __global__ void micro(uint* buf) {}""",
}


# C[M,N] = A[M,K] x B[N,K]^T: A and B row-major with K contiguous (B holds one output column per
# row, like a Linear layer's weight), f32 accumulation, C rounded to the operand type. Blocks of
# BM x BN (a grouped raster: 8 block rows share B tiles in L2), BK = 32 or 64, STAGES cp.async
# stages in XOR-swizzled dynamic shared memory (gemm_shared_bytes(): the host passes the size at
# launch and the driver opts the kernel in past 48 KiB), warps of 64 x 64 made of 4 x 8
# mma.sync.m16n8k16 tiles whose operands come from ldmatrix. The host refuses shapes that are not
# multiples of the tile; the kernel re-checks and writes nothing then, so it never reads or
# writes outside the buffers.
#
# A stage holds the A tile then the B tile, each as BK / 32 sub-tiles of [rows][32] elements
# (64-byte rows): 16-byte chunk c of row r of sub-tile s sits at s * rows * 32 + swz(r, c).
_GEMM_COMMON = WGMMA_C + r"""
#define KSUB (BK / 32)
#define STAGE_ELEMS ((BM + BN) * BK)
__device__ __forceinline__ uint smem_addr(const void* p) { return (uint)__cvta_generic_to_shared(p); }
// offset in elements of 16-byte chunk c (0..3) of row r of a [rows][32] tile: wgmma's 64-byte
// swizzle (codegen/wgmma.py), which also sends ldmatrix's eight row reads and cp.async's writes
// to eight different bank groups
__device__ __forceinline__ uint swz(uint r, uint c) { return hb_swz64(r, c) >> 1; }
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }
// ROWS x BK elements at g (row stride K, from column k0) into the sub-tiles at s
template <uint ROWS> __device__ __forceinline__ void load_rows(T* s, const T* g, uint K, uint k0, uint tid) {
  const uint chunks = ROWS * (BK / 8);
  #pragma unroll
  for (uint j = 0; j < (chunks + THREADS - 1) / THREADS; j++) {
    uint i = tid + j * THREADS;
    if (chunks % THREADS == 0 || i < chunks) {
      uint r = i / (BK / 8), c = i % (BK / 8);
      cp_async16(s + (c >> 2) * (ROWS * 32u) + swz(r, c & 3u), g + (size_t)r * K + k0 + c * 8u);
    }
  }
}
__device__ __forceinline__ void load_tile(T* stage, const T* ag, const T* bg, uint K, uint k0, uint tid) {
  load_rows<BM>(stage, ag, K, k0, tid);
  load_rows<BN>(stage + BM * BK, bg, K, k0, tid);
}
"""

_GEMM_MMA = r"""
#define WARPS_M (BM / 64)
#define WARPS_N (BN / 64)
#define THREADS (32 * WARPS_M * WARPS_N)
#define MINBLOCKS (THREADS <= 128 ? 2 : 1)
GEMM_COMMON
__device__ __forceinline__ void ldsm_x4(uint* r, uint addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma16816(float* c, const uint* a, const uint* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(THREADS, MINBLOCKS)
micro(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, uint M, uint N, uint K) {
  extern __shared__ __align__(1024) unsigned char hb_smem[];  // STAGES * STAGE_ELEMS elements
  T* const smem = (T*)hb_smem;
  if (M % BM || N % BN || K % BK || K == 0) return;
  uint tiles_m = M / BM, tiles_n = N / BN, pid = blockIdx.x;
  if (pid >= tiles_m * tiles_n) return;
  uint width = 8u * tiles_n, first = pid / width * 8u, gsz = min(tiles_m - first, 8u);
  uint tm = first + (pid % width) % gsz, tn = (pid % width) / gsz;
  const T* ag = A + (size_t)tm * BM * K;
  const T* bg = B + (size_t)tn * BN * K;
  uint tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
  uint wm = warp / WARPS_N, wn = warp % WARPS_N;
  float acc[4][8][4];
  #pragma unroll
  for (int i = 0; i < 4; i++)
    #pragma unroll
    for (int j = 0; j < 8; j++)
      #pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
  uint KT = K / BK;
  #pragma unroll
  for (uint s = 0; s < STAGES - 1; s++) {
    if (s < KT) load_tile(smem + s * STAGE_ELEMS, ag, bg, K, s * BK, tid);
    cp_commit();
  }
  for (uint kt = 0; kt < KT; kt++) {
    cp_wait<STAGES - 2>();
    __syncthreads();  // tile kt landed for every thread; stage (kt - 1) % STAGES is free again
    uint nk = kt + STAGES - 1;
    if (nk < KT) load_tile(smem + (nk % STAGES) * STAGE_ELEMS, ag, bg, K, nk * BK, tid);
    cp_commit();
    const T* stage = smem + (kt % STAGES) * STAGE_ELEMS;
    #pragma unroll
    for (uint kk = 0; kk < BK / 16; kk++) {
      const T* sa = stage + (kk >> 1) * (BM * 32u);
      const T* sb = stage + BM * BK + (kk >> 1) * (BN * 32u);
      uint h = kk & 1u;
      uint af[4][4], bf[8][2];
      #pragma unroll
      for (uint mi = 0; mi < 4; mi++)
        ldsm_x4(af[mi], smem_addr(sa + swz(wm * 64u + mi * 16u + (lane & 15u), h * 2u + (lane >> 4))));
      #pragma unroll
      for (uint nj = 0; nj < 4; nj++) {
        uint t[4], mat = lane >> 3;
        ldsm_x4(t, smem_addr(sb + swz(wn * 64u + nj * 16u + (mat >> 1) * 8u + (lane & 7u), h * 2u + (mat & 1u))));
        bf[2 * nj][0] = t[0]; bf[2 * nj][1] = t[1]; bf[2 * nj + 1][0] = t[2]; bf[2 * nj + 1][1] = t[3];
      }
      #pragma unroll
      for (int mi = 0; mi < 4; mi++)
        #pragma unroll
        for (int ni = 0; ni < 8; ni++) mma16816(acc[mi][ni], af[mi], bf[ni]);
    }
  }
  cp_wait<0>();
  uint g = lane >> 2, q = lane & 3u;
  #pragma unroll
  for (uint mi = 0; mi < 4; mi++) {
    size_t row = (size_t)tm * BM + wm * 64u + mi * 16u + g;
    #pragma unroll
    for (uint ni = 0; ni < 8; ni++) {
      size_t col = (size_t)tn * BN + wn * 64u + ni * 8u + q * 2u;
      *(T2*)(C + row * N + col) = PACK2(acc[mi][ni][0], acc[mi][ni][1]);
      *(T2*)(C + (row + 8) * N + col) = PACK2(acc[mi][ni][2], acc[mi][ni][3]);
    }
  }
}"""

_GEMM_TYPES = {
    "gemm_f16": "typedef __half T;\ntypedef __half2 T2;\n#define PACK2 __floats2half2_rn\n#define MMA_TYPE \"f16\"\n",
    "gemm_bf16": "#include <cuda_bf16.h>\ntypedef __nv_bfloat16 T;\ntypedef __nv_bfloat162 T2;\n"
                 "#define PACK2 __floats2bfloat162_rn\n#define MMA_TYPE \"bf16\"\n",
}
_GEMM_MMA = _GEMM_MMA.replace("GEMM_COMMON", _GEMM_COMMON)
for _k, _t in _GEMM_TYPES.items():
    SOURCES[_k] = _t + _GEMM_MMA

# The same GEMM through Hopper's warpgroup MMA (sm_90a): BM / 64 warpgroups of 128 threads, each
# computing a 64 x BN slab with wgmma.mma_async.m64nBNk16 (f32 accumulators in registers, A and B
# read straight from shared memory through matrix descriptors). Tiles land by cp.async in the
# layout wgmma's 64-byte swizzle expects (each 32-wide k sub-tile has rows of 64 bytes, 16-byte
# chunk c of row r at chunk c ^ ((r >> 1) & 3), 512-byte aligned atoms of 8 rows: swz()).
# INFLIGHT (0 or 1) wgmma groups stay in flight across k tiles; the cp.async prefetch then runs
# STAGES - 1 - INFLIGHT tiles ahead. Shapes not multiples of the tile write nothing.
_GEMM_WGMMA = r"""
#define NWG (BM / 64)
#define THREADS (128 * NWG)
#define NACC (BN / 2)
#define AHEAD (STAGES - 1 - INFLIGHT)
GEMM_COMMON
__device__ __forceinline__ unsigned long long wg_desc(const void* p) { return hb_wg_desc(smem_addr(p)); }
__device__ __forceinline__ void wgmma(float* d, unsigned long long da, unsigned long long db, uint sc) {
  WGMMA_ASM
}
// keeps the compiler from moving accumulators between wgmma issue and wait (CUTLASS's
// warpgroup_fence_operand)
__device__ __forceinline__ void fence_acc(float* d) {
  #pragma unroll
  for (int i = 0; i < NACC; i++) asm volatile("" : "+f"(d[i]) :: "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
micro(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, uint M, uint N, uint K) {
  extern __shared__ __align__(1024) unsigned char hb_smem[];  // STAGES * STAGE_ELEMS elements
  T* const smem = (T*)hb_smem;
  if (M % BM || N % BN || K % BK || K == 0) return;
  uint tiles_m = M / BM, tiles_n = N / BN, pid = blockIdx.x;
  if (pid >= tiles_m * tiles_n) return;
  uint width = 8u * tiles_n, first = pid / width * 8u, gsz = min(tiles_m - first, 8u);
  uint tm = first + (pid % width) % gsz, tn = (pid % width) / gsz;
  const T* ag = A + (size_t)tm * BM * K;
  const T* bg = B + (size_t)tn * BN * K;
  uint tid = threadIdx.x, wg = tid >> 7, lane = tid & 31u, wq = (tid >> 5) & 3u;
  float d[NACC];  // the first wgmma ignores it (scale-d 0): no zeroing inside the wgmma pipeline
  uint KT = K / BK;
  #pragma unroll
  for (uint s = 0; s < AHEAD; s++) {
    if (s < KT) load_tile(smem + s * STAGE_ELEMS, ag, bg, K, s * BK, tid);
    cp_commit();
  }
  for (uint kt = 0; kt < KT; kt++) {
    cp_wait<AHEAD - 1>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async data -> wgmma's proxy
    __syncthreads();  // tile kt is in; every warpgroup finished its wgmma of tile kt - 1 - INFLIGHT
    uint nk = kt + AHEAD;
    if (nk < KT) load_tile(smem + (nk % STAGES) * STAGE_ELEMS, ag, bg, K, nk * BK, tid);
    cp_commit();
    const T* sa = smem + (kt % STAGES) * STAGE_ELEMS + wg * 64u * 32u;
    const T* sb = smem + (kt % STAGES) * STAGE_ELEMS + BM * BK;
    fence_acc(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    #pragma unroll
    for (uint kk = 0; kk < BK / 16; kk++)  // k16 step kk: sub-tile kk / 2, 32 bytes in when odd
      wgmma(d, wg_desc(sa + (kk >> 1) * (BM * 32u) + (kk & 1u) * 16u),
            wg_desc(sb + (kk >> 1) * (BN * 32u) + (kk & 1u) * 16u), kt | kk);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    fence_acc(d);
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(INFLIGHT) : "memory");
    fence_acc(d);
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_acc(d);
  cp_wait<0>();
  uint g = lane >> 2, q = lane & 3u;
  size_t row = (size_t)tm * BM + wg * 64u + wq * 16u + g;
  #pragma unroll
  for (uint j = 0; j < BN / 8; j++) {
    size_t col = (size_t)tn * BN + j * 8u + q * 2u;
    *(T2*)(C + row * N + col) = PACK2(d[4 * j], d[4 * j + 1]);
    *(T2*)(C + (row + 8) * N + col) = PACK2(d[4 * j + 2], d[4 * j + 3]);
  }
}"""


# Warp-specialized wgmma GEMM (mma 4 and 5): one producer warpgroup and NCW = 2 consumer
# warpgroups (384 threads) that never meet at a __syncthreads. The producer fills STAGES
# shared-memory stages with cp.async (the same swizzled layout as above); each of its threads
# arrives on the stage's "full" mbarrier through cp.async.mbarrier.arrive.noinc, which fires once
# that thread's copies so far have landed, and it waits on the stage's "empty" mbarrier before
# refilling a stage. Each consumer waits for "full", fences the copies into the async proxy,
# issues its wgmmas (rows WM = BM / 2 of the tile as WM / 64 slabs of m64nBNk16, BN / 2 f32
# accumulators per slab), keeps one wgmma group in flight and releases the previous stage on
# "empty" (one arrival per warp) once that group retired. (A producer that waited for its own
# copies and arrived STAGES - 2 tiles behind measured 2-10 % slower on the H100.) The stores of
# C go out as 16-byte vectors after shuffles within each quad of lanes (EPI_VEC; 9 % faster than
# 4-byte stores). No setmaxnreg: the consumers' 128 accumulators fit the 168 registers a
# 384-thread workgroup gets (ptxas: 168, no spills), while a producer squeezed to 56 or fewer
# spills its cp.async addresses. Shapes not multiples of the tile write nothing; every index
# stays inside the tile the workgroup computes, and the host checks the shapes first.
_GEMM_WS = r"""
#define EPI_VEC 1
#define GROUP 16u
#define THREADS 128
#define NCW 2
#define WM (BM / NCW)
#define MI (WM / 64)
#define NACC (BN / 2)
GEMM_COMMON
__device__ __forceinline__ unsigned long long wg_desc(const void* p) { return hb_wg_desc(smem_addr(p)); }
__device__ __forceinline__ void wgmma(float* d, unsigned long long da, unsigned long long db, uint sc) {
  WGMMA_ASM
}
__device__ __forceinline__ void fence_acc(float* d) {
  #pragma unroll
  for (int i = 0; i < NACC; i++) asm volatile("" : "+f"(d[i]) :: "memory");
}
__device__ __forceinline__ void mbar_init(unsigned long long* b, uint count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(smem_addr(b)) : "memory");
}
// spins until the phase of parity `parity` of the barrier completed (acquire)
__device__ __forceinline__ void mbar_wait(unsigned long long* b, uint parity) {
  asm volatile("{\n.reg .pred done;\nLAB_WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra LAB_WAIT;\n}\n" :: "r"(smem_addr(b)), "r"(parity) : "memory");
}

// (tm, tn) of tile t in the grouped raster: GROUP block rows share B tiles in L2 (16 measured
// 2 % above 8, 4 and 32 on the H100 at 4096^3 f16, sustained)
__device__ __forceinline__ void tile_of(uint t, uint tiles_m, uint tiles_n, uint& tm, uint& tn) {
  uint width = GROUP * tiles_n, first = t / width * GROUP, gsz = min(tiles_m - first, GROUP);
  tm = first + (t % width) % gsz;
  tn = (t % width) / gsz;
}

// The workgroups stride over the tiles (one tile each when the grid has one workgroup per tile,
// a persistent loop when it is capped at the SM count); it counts the k tiles of all its tiles
// through the stages (stage it % STAGES, phase it / STAGES), so the producer starts the next tile
// while the consumers store the last one.
extern "C" __global__ void __launch_bounds__(128 * (NCW + 1), 1)
micro(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, uint M, uint N, uint K) {
  extern __shared__ __align__(1024) unsigned char hb_smem[];  // STAGES * STAGE_ELEMS elements
  __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
  T* const smem = (T*)hb_smem;
  if (M % BM || N % BN || K % BK || K == 0) return;
  uint tiles_m = M / BM, tiles_n = N / BN, tiles = tiles_m * tiles_n;
  uint tid = threadIdx.x, wg = tid >> 7, KT = K / BK;
  if (tid == 0) {
    #pragma unroll
    for (uint s = 0; s < STAGES; s++) { mbar_init(&full[s], 128u); mbar_init(&empty[s], NCW * 4u); }
  }
  __syncthreads();
  uint it = 0;  // k tiles through the stages so far
  if (wg == 0) {  // producer
    for (uint t = blockIdx.x; t < tiles; t += gridDim.x) {
      uint tm, tn;
      tile_of(t, tiles_m, tiles_n, tm, tn);
      const T* ag = A + (size_t)tm * BM * K;
      const T* bg = B + (size_t)tn * BN * K;
      for (uint kt = 0; kt < KT; kt++, it++) {
        uint s = it % STAGES;
        if (it >= STAGES) mbar_wait(&empty[s], (it / STAGES - 1u) & 1u);  // consumers left k tile it - STAGES
        load_tile(smem + s * STAGE_ELEMS, ag, bg, K, kt * BK, tid);
        cp_commit();
        // the barrier counts this thread's arrival once its copies so far have landed
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(smem_addr(&full[s])) : "memory");
      }
    }
    cp_wait<0>();
    return;
  }
  uint cw = wg - 1u, lane = tid & 31u, wq = (tid >> 5) & 3u, g = lane >> 2, q = lane & 3u;
  for (uint t = blockIdx.x; t < tiles; t += gridDim.x) {
    uint tm, tn;
    tile_of(t, tiles_m, tiles_n, tm, tn);
    float d[MI][NACC];  // the first wgmma of each slab ignores it (scale-d 0)
    for (uint kt = 0; kt < KT; kt++, it++) {
      uint s = it % STAGES;
      mbar_wait(&full[s], (it / STAGES) & 1u);
      // the producer's cp.async writes, seen through the barrier -> wgmma's async proxy
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      const T* sa = smem + s * STAGE_ELEMS + cw * WM * 32u;
      const T* sb = smem + s * STAGE_ELEMS + BM * BK;
      #pragma unroll
      for (uint mi = 0; mi < MI; mi++) fence_acc(d[mi]);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      #pragma unroll
      for (uint kk = 0; kk < BK / 16; kk++)
        #pragma unroll
        for (uint mi = 0; mi < MI; mi++)
          wgmma(d[mi], wg_desc(sa + (kk >> 1) * (BM * 32u) + mi * 64u * 32u + (kk & 1u) * 16u),
                wg_desc(sb + (kk >> 1) * (BN * 32u) + (kk & 1u) * 16u), kt | kk);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      #pragma unroll
      for (uint mi = 0; mi < MI; mi++) fence_acc(d[mi]);
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // k tile it - 1's group retired
      #pragma unroll
      for (uint mi = 0; mi < MI; mi++) fence_acc(d[mi]);
      __syncwarp();
      if (kt > 0 && lane == 0) mbar_arrive(&empty[(it - 1u) % STAGES]);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    #pragma unroll
    for (uint mi = 0; mi < MI; mi++) fence_acc(d[mi]);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[(it - 1u) % STAGES]);  // the tile's last stage, before the stores
#if EPI_VEC
    // Each quad of lanes holds 8 columns (2 per lane) of every 8-column group j of its two rows;
    // four rounds of shuffles within the quad hand lane q all 8 columns of group 4i + q, which it
    // stores as one 16-byte vector (full 32-byte sectors instead of 4-byte pieces).
    #pragma unroll
    for (uint mi = 0; mi < MI; mi++) {
      #pragma unroll
      for (uint h = 0; h < 2; h++) {
        size_t row = (size_t)tm * BM + cw * WM + mi * 64u + wq * 16u + g + 8u * h;
        #pragma unroll
        for (uint i = 0; i < BN / 32; i++) {
          uint v[4], o[4];
          #pragma unroll
          for (uint jj = 0; jj < 4; jj++) {
            T2 p = PACK2(d[mi][4 * (4 * i + jj) + 2 * h], d[mi][4 * (4 * i + jj) + 2 * h + 1]);
            v[jj] = *(uint*)&p;
          }
          #pragma unroll
          for (uint r = 0; r < 4; r++) {  // round r: lane q sends v[(q - r) & 3], receives lane (q + r) & 3's
            uint k = (q - r) & 3u;
            uint send = k == 0 ? v[0] : k == 1 ? v[1] : k == 2 ? v[2] : v[3];
            uint got = __shfl_sync(0xffffffffu, send, (lane & ~3u) | ((q + r) & 3u));
            uint src = (q + r) & 3u;
            o[0] = src == 0 ? got : o[0]; o[1] = src == 1 ? got : o[1];
            o[2] = src == 2 ? got : o[2]; o[3] = src == 3 ? got : o[3];
          }
          size_t col = (size_t)tn * BN + (4u * i + q) * 8u;
          *(uint4*)(C + row * N + col) = make_uint4(o[0], o[1], o[2], o[3]);
        }
      }
    }
#else
    #pragma unroll
    for (uint mi = 0; mi < MI; mi++) {
      size_t row = (size_t)tm * BM + cw * WM + mi * 64u + wq * 16u + g;
      #pragma unroll
      for (uint j = 0; j < BN / 8; j++) {
        size_t col = (size_t)tn * BN + j * 8u + q * 2u;
        *(T2*)(C + row * N + col) = PACK2(d[mi][4 * j], d[mi][4 * j + 1]);
        *(T2*)(C + (row + 8) * N + col) = PACK2(d[mi][4 * j + 2], d[mi][4 * j + 3]);
      }
    }
#endif
  }
}"""


def gemm_wgmma_source(kernel: str, bn: int, specialized: bool = False) -> str:
    """The wgmma GEMM (sm_90a) for ``gemm_f16`` / ``gemm_bf16`` with N tile ``bn``; ``specialized``:
    the warp-specialized mbarrier pipeline (a producer warpgroup, two consumer warpgroups)."""
    mma_type = "bf16" if kernel == "gemm_bf16" else "f16"
    body = _GEMM_WS if specialized else _GEMM_WGMMA
    return _GEMM_TYPES[kernel] + body.replace("GEMM_COMMON", _GEMM_COMMON).replace(
        "WGMMA_ASM", wgmma_asm(bn, mma_type))


#: the kernel-shaping options of each kernel and their defaults (become #defines)
OPTIONS: dict[str, dict[str, int]] = {
    "copy": {"UNROLL": 4},
    "fma_f32": {"CHAINS": 32, "UNROLL": 4},
    "gemm_f16": {"BM": 128, "BN": 128, "BK": 32, "STAGES": 3, "WGMMA": 0, "INFLIGHT": 0},
    "gemm_bf16": {"BM": 128, "BN": 128, "BK": 32, "STAGES": 3, "WGMMA": 0, "INFLIGHT": 0},
}

#: (BM, BN) tiles the wgmma kernel takes (the stages are bounded by shared memory alone)
WGMMA_TILES = ((128, 128), (64, 256), (128, 256), (64, 128), (192, 128), (256, 128))

#: (BM, BN) tiles the warp-specialized wgmma kernel takes (two consumer warpgroups of BM / 2 rows)
WGMMA_WS_TILES = ((128, 256), (256, 128), (128, 128))

#: (BM, BN) tiles the mma.sync kernel takes
GEMM_TILES = ((128, 128), (128, 256), (256, 128), (64, 128), (128, 64), (64, 64))

#: k tiles both GEMM kernels take, and the most pipeline stages
GEMM_TILE_K = (32, 64)
GEMM_MAX_STAGES = 9


def gemm_shared_bytes(bm: int, bn: int, bk: int, stages: int) -> int:
    """Dynamic shared memory of a GEMM kernel: ``stages`` A and B tiles of 2-byte elements."""
    return stages * (bm + bn) * bk * 2


# The bf16 kernel is the f16 one with the operand type swapped.
SOURCES["matrix_bf16"] = "#include <cuda_bf16.h>\n" + SOURCES["matrix_f16"].replace("__half", "__nv_bfloat16")


def _defines(kernel: str, options: dict[str, int] | None) -> str:
    vals = {**OPTIONS.get(kernel, {}), **{k.upper(): int(v) for k, v in (options or {}).items()}}
    return "".join(f"#define {k} {v}\n" for k, v in sorted(vals.items()))


def cuda_source(kernel: str, options: dict[str, int] | None = None) -> str:
    """The CUDA C of ``kernel`` with its options (OPTIONS) as #defines (``WGMMA`` 1 picks the
    sm_90a warpgroup-MMA GEMM, 2 its warp-specialized version)."""
    body = SOURCES[kernel]
    if kernel.startswith("gemm_") and (options or {}).get("WGMMA"):
        body = gemm_wgmma_source(kernel, int(options["BN"]), int(options["WGMMA"]) >= 2)
    return _HEAD + _defines(kernel, options) + body + "\n"


def hip_source(kernel: str, header: str, options: dict[str, int] | None = None) -> str:
    """The same kernel for hipRTC: HIP's header instead of CUDA's (no WMMA: matrix kernels
    have no HIP version)."""
    if kernel.startswith(("matrix_", "gemm_")):
        raise KeyError(kernel)
    return header + "\ntypedef unsigned int uint;\n" + _defines(kernel, options) + SOURCES[kernel] + "\n"
