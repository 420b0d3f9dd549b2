"""CUDA C sources of the device-peak microbenchmarks, compiled with NVRTC.

Same micro ABI as the GLSL and local versions: one pointer per binding, then uint32
constants. Each kernel is ``extern "C"`` and named :data:`ENTRY`.
"""

from __future__ import annotations

ENTRY = "micro"

_HEAD = r"""
#include <cuda_fp16.h>
#include <mma.h>
typedef unsigned int uint;
"""

SOURCES: dict[str, str] = {
    "copy": r"""
extern "C" __global__ void __launch_bounds__(256) micro(const float4* __restrict__ src, float4* __restrict__ dst, uint n) {
  uint stride = gridDim.x * 256u;
  for (uint i = blockIdx.x * 256u + threadIdx.x; i < n; i += stride) dst[i] = src[i];
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
    "fma_f32": r"""
extern "C" __global__ void __launch_bounds__(256) micro(float* out, uint iters) {
  uint gid = blockIdx.x * 256u + threadIdx.x;
  float a = 0.999f, b = (gid & 7u) * 1e-3f;
  float x[32];
  #pragma unroll
  for (int j = 0; j < 32; j++) x[j] = b + j;
  for (uint i = 0; i < iters; i++) {
    #pragma unroll
    for (int j = 0; j < 32; j++) x[j] = fmaf(x[j], a, b);
  }
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < 32; j++) s += x[j];
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


# The bf16 kernel is the f16 one with the operand type swapped.
SOURCES["matrix_bf16"] = "#include <cuda_bf16.h>\n" + SOURCES["matrix_f16"].replace("__half", "__nv_bfloat16")


def cuda_source(kernel: str) -> str:
    return _HEAD + SOURCES[kernel] + "\n"


def hip_source(kernel: str, header: str) -> str:
    """The same kernel for hipRTC: HIP's header instead of CUDA's (no WMMA: matrix kernels
    have no HIP version)."""
    if kernel.startswith("matrix_"):
        raise KeyError(kernel)
    return header + "\ntypedef unsigned int uint;\n" + SOURCES[kernel] + "\n"
