"""GLSL sources of the device-peak microbenchmarks (Vulkan), compiled with glslang.

Every kernel follows the micro ABI of :mod:`halbench.bench.micro` (same bindings and constants
as the CUDA and local versions). The descriptor ABI declares storage buffers at set 0; the BDA
ABI reads a table of buffer addresses whose address is the first push constant.
"""

from __future__ import annotations

# One header per ABI. BUF(i, T, name) declares binding i as an array `name` of element type T.
_DESCRIPTORS = """
#define DECLARE_BUF(i, T, name) layout(set = 0, binding = i, scalar) buffer Buf##i { T name[]; };
"""

_BDA = """
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
layout(buffer_reference, scalar, buffer_reference_align = 8) readonly buffer Table { uint64_t addr[]; };
"""

_COMMON = """
#version 460
#extension GL_EXT_scalar_block_layout : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
"""

# The GEMMs' tile of C (tm, tn) for this workgroup, in a grouped raster (8 block rows share B
# tiles in L2); a shape that is not a multiple of the tile, or a workgroup beyond the tiles,
# returns before anything is read (the host refuses such shapes; the kernel re-checks).
_GEMM_TILE = """  uint M = CONST(0), N = CONST(1), K = CONST(2);
  if (M % BM != 0u || N % BN != 0u || K % BK != 0u || K == 0u) return;
  uint tiles_m = M / BM, tiles_n = N / BN, pid = gl_WorkGroupID.x;
  if (pid >= tiles_m * tiles_n) return;
  uint width = 8u * tiles_n, first = pid / width * 8u, gsz = min(tiles_m - first, 8u);
  uint tm = first + (pid % width) % gsz, tn = (pid % width) / gsz;
"""

# Kernel bodies use ELEM(i) accessors declared per ABI by _bufs().
_BODIES: dict[str, str] = {
    # dst[i] = src[i] in tiles of 256 * UNROLL vec4 per workgroup: each invocation loads UNROLL
    # 16-byte vectors before it stores them; workgroups stride over the tiles (n < 2^31: the host).
    "copy": """
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
void main() {
  uint n = CONST(0);
  const uint tile = 256u * UNROLL;
  for (uint base = gl_WorkGroupID.x * tile + gl_LocalInvocationID.x; base < n; base += gl_NumWorkGroups.x * tile) {
    vec4 v[UNROLL];
    [[unroll]] for (uint j = 0u; j < UNROLL; j++) { uint i = base + j * 256u; if (i < n) v[j] = B0(i); }
    [[unroll]] for (uint j = 0u; j < UNROLL; j++) { uint i = base + j * 256u; if (i < n) B1(i) = v[j]; }
  }
}""",
    # a[i] = b[i] + s * c[i]: constants n_vec4, float bits of s
    "triad": """
layout(local_size_x = 256) in;
void main() {
  uint n = CONST(0);
  float s = uintBitsToFloat(CONST(1));
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) { B0(i) = B1(i) + s * B2(i); }
}""",
    # VECTOR == 4: CHAINS / 4 vec4 chains with a different a and b per component (the kernel
    # measured at 28.5 TFLOP/s on the H100); else CHAINS scalar chains x = fma(x, a, b) with a a
    # constant and b one register, as in the CUDA kernel. The loop body repeats UNROLL times
    # (the host makes iters a multiple of UNROLL). constants: iterations; out[gid] = sum
    "fma_f32": """
layout(local_size_x = 256) in;
void main() {
  uint iters = CONST(0);
  float seed = float(gl_GlobalInvocationID.x & 7u) * 1e-3;
#if VECTOR == 4
  vec4 a = vec4(0.999, 0.998, 0.997, 0.996), b = vec4(seed, 1e-3, 2e-3, 3e-3);
#else
  const float a = 0.999; float b = seed;
#endif
  DECLARE_CHAINS
  for (uint i = 0u; i < iters; i += UNROLL) {
    STEP_CHAINS
  }
  SUM_CHAINS
}""",
    "fma_f16": """
layout(local_size_x = 256) in;
void main() {
  uint iters = CONST(0);
  float16_t seed = float16_t(float(gl_GlobalInvocationID.x & 7u) * 1e-3);
  f16vec4 a = f16vec4(0.999hf), b = f16vec4(seed, 1e-3hf, 2e-3hf, 3e-3hf);
  f16vec4 x0 = b, x1 = b + 1.0hf, x2 = b + 2.0hf, x3 = b + 3.0hf, x4 = b + 4.0hf, x5 = b + 5.0hf, x6 = b + 6.0hf, x7 = b + 7.0hf;
  for (uint i = 0u; i < iters; i++) {
    x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);
    x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);
  }
  f16vec4 s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  B0(gl_GlobalInvocationID.x) = float(s.x) + float(s.y) + float(s.z) + float(s.w);
}""",
    # Cooperative matrix: each subgroup keeps A, B in registers and accumulates iters products.
    # bindings: ab (f16, 2*M*K), out (f32, M*N per subgroup); constants iterations
    "matrix_f16": """
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x = WG) in;
void main() {
  uint iters = CONST(0);
  coopmat<float16_t, gl_ScopeSubgroup, MM, KK, gl_MatrixUseA> A;
  coopmat<float16_t, gl_ScopeSubgroup, KK, NN, gl_MatrixUseB> Bm;
  coopmat<float, gl_ScopeSubgroup, MM, NN, gl_MatrixUseAccumulator> C0 = coopmat<float, gl_ScopeSubgroup, MM, NN, gl_MatrixUseAccumulator>(0.0);
  coopmat<float, gl_ScopeSubgroup, MM, NN, gl_MatrixUseAccumulator> C1 = C0;
  coopmat<float, gl_ScopeSubgroup, MM, NN, gl_MatrixUseAccumulator> C2 = C0;
  coopmat<float, gl_ScopeSubgroup, MM, NN, gl_MatrixUseAccumulator> C3 = C0;
  LOAD_A; LOAD_B;
  for (uint i = 0u; i < iters; i++) {
    C0 = coopMatMulAdd(A, Bm, C0); C1 = coopMatMulAdd(A, Bm, C1);
    C2 = coopMatMulAdd(A, Bm, C2); C3 = coopMatMulAdd(A, Bm, C3);
  }
  for (int k = 0; k < C0.length(); k++) { C0[k] = C0[k] + C1[k] + C2[k] + C3[k]; }
  uint sg = gl_WorkGroupID.x * (WG / gl_SubgroupSize) + gl_SubgroupID;
  STORE_C;
}""",
    # C[M,N] = A[M,K] x B[N,K]^T (B holds one output column per row), f16 operands, f32
    # accumulation, C in f16: blocks of BM x BN, BK of 16 or 32, subgroups of 64 x 64 made of
    # 4 x 4 cooperative matrices of 16 x 16 x 16. Tiles are staged through shared memory (rows
    # padded by 16 bytes against bank conflicts), double-buffered: the next tile is loaded into
    # registers while the subgroups multiply the current one. A grouped raster lets 8 block rows
    # share B tiles in L2. The host refuses shapes that are not multiples of the tile; the kernel
    # re-checks and writes nothing then. constants: M, N, K
    "gemm_f16": """
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#define SG_M (BM / 64)
#define SG_N (BN / 64)
#define WG (SUB * SG_M * SG_N)
#define CH (BK / 8)
#define LDS (CH + 1)
#define LOADS_A (BM * CH / WG)
#define LOADS_B (BN * CH / WG)
layout(local_size_x = WG) in;
shared uvec4 sA[2 * BM * LDS];
shared uvec4 sB[2 * BN * LDS];
void main() {
  GEMM_TILE
  uint tid = gl_LocalInvocationID.x, wm = gl_SubgroupID / SG_N, wn = gl_SubgroupID % SG_N;
  uint kv = K / 8u;  // row length in uvec4
  uint a0 = tm * BM * kv, b0 = tn * BN * kv;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[4][4];
  [[unroll]] for (uint i = 0u; i < 4u; i++)
    [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
  uvec4 ra[LOADS_A], rb[LOADS_B];
  uint KT = K / BK;
  [[unroll]] for (uint j = 0u; j < LOADS_A; j++) { uint i = tid + j * WG; ra[j] = B0(a0 + (i / CH) * kv + i % CH); }
  [[unroll]] for (uint j = 0u; j < LOADS_B; j++) { uint i = tid + j * WG; rb[j] = B1(b0 + (i / CH) * kv + i % CH); }
  [[unroll]] for (uint j = 0u; j < LOADS_A; j++) { uint i = tid + j * WG; sA[(i / CH) * LDS + i % CH] = ra[j]; }
  [[unroll]] for (uint j = 0u; j < LOADS_B; j++) { uint i = tid + j * WG; sB[(i / CH) * LDS + i % CH] = rb[j]; }
  barrier();
  for (uint kt = 0u; kt < KT; kt++) {
    uint cur = kt & 1u;
    bool more = kt + 1u < KT;
    if (more) {
      uint k0 = (kt + 1u) * CH;
      [[unroll]] for (uint j = 0u; j < LOADS_A; j++) { uint i = tid + j * WG; ra[j] = B0(a0 + (i / CH) * kv + k0 + i % CH); }
      [[unroll]] for (uint j = 0u; j < LOADS_B; j++) { uint i = tid + j * WG; rb[j] = B1(b0 + (i / CH) * kv + k0 + i % CH); }
    }
    uint oa = cur * BM * LDS + wm * 64u * LDS, ob = cur * BN * LDS + wn * 64u * LDS;
    [[unroll]] for (uint kk = 0u; kk < BK / 16u; kk++) {
      coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> fa[4];
      coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> fb[4];
      [[unroll]] for (uint i = 0u; i < 4u; i++)
        coopMatLoad(fa[i], sA, oa + i * 16u * LDS + kk * 2u, LDS, gl_CooperativeMatrixLayoutRowMajor);
      [[unroll]] for (uint j = 0u; j < 4u; j++)
        coopMatLoad(fb[j], sB, ob + j * 16u * LDS + kk * 2u, LDS, gl_CooperativeMatrixLayoutColumnMajor);
      [[unroll]] for (uint i = 0u; i < 4u; i++)
        [[unroll]] for (uint j = 0u; j < 4u; j++) acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
    }
    if (more) {
      uint nxt = (cur ^ 1u);
      [[unroll]] for (uint j = 0u; j < LOADS_A; j++) { uint i = tid + j * WG; sA[nxt * BM * LDS + (i / CH) * LDS + i % CH] = ra[j]; }
      [[unroll]] for (uint j = 0u; j < LOADS_B; j++) { uint i = tid + j * WG; sB[nxt * BN * LDS + (i / CH) * LDS + i % CH] = rb[j]; }
    }
    barrier();
  }
  [[unroll]] for (uint i = 0u; i < 4u; i++) {
    uint row = tm * BM + wm * 64u + i * 16u;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
      coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> h =
          coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(acc[i][j]);
      coopMatStore(h, P2, row * N + tn * BN + wn * 64u + j * 16u, N, gl_CooperativeMatrixLayoutRowMajor);
    }
  }
}""",
    # The same GEMM with matrices of workgroup scope (VK_NV_cooperative_matrix2, GLSL's
    # KHR coopmat types with gl_ScopeWorkgroup): one BM x BN accumulator per workgroup of WG
    # invocations, whose share-out over subgroups and matrix instructions the driver picks. SHMEM
    # 0 loads each BM x BK / BK x BN operand straight from memory (the driver stages it); SHMEM 1
    # stages it through shared memory first (rows padded by 16 bytes), the next slice loaded into
    # registers while the current one is multiplied. Grouped raster and shape checks as above.
    "gemm_f16_wg": """
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = WG) in;
#define CH (BK / 8)
#if SHMEM
#define LDS (CH + 1)
#define LOADS_A (BM * CH / WG)
#define LOADS_B (BN * CH / WG)
shared uvec4 sA[BM * LDS];
shared uvec4 sB[BN * LDS];
#endif
void main() {
  GEMM_TILE
  uint kv = K / 8u;  // row length in uvec4
  uint a0 = tm * BM * kv, b0 = tn * BN * kv;
  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
#if SHMEM
  uint tid = gl_LocalInvocationID.x;
  uvec4 ra[LOADS_A], rb[LOADS_B];
  [[unroll]] for (uint j = 0u; j < LOADS_A; j++) { uint i = tid + j * WG; ra[j] = B0(a0 + (i / CH) * kv + i % CH); }
  [[unroll]] for (uint j = 0u; j < LOADS_B; j++) { uint i = tid + j * WG; rb[j] = B1(b0 + (i / CH) * kv + i % CH); }
  for (uint k = 0u; k < kv; k += CH) {
    [[unroll]] for (uint j = 0u; j < LOADS_A; j++) { uint i = tid + j * WG; sA[(i / CH) * LDS + i % CH] = ra[j]; }
    [[unroll]] for (uint j = 0u; j < LOADS_B; j++) { uint i = tid + j * WG; sB[(i / CH) * LDS + i % CH] = rb[j]; }
    barrier();
    if (k + CH < kv) {
      [[unroll]] for (uint j = 0u; j < LOADS_A; j++) { uint i = tid + j * WG; ra[j] = B0(a0 + (i / CH) * kv + k + CH + i % CH); }
      [[unroll]] for (uint j = 0u; j < LOADS_B; j++) { uint i = tid + j * WG; rb[j] = B1(b0 + (i / CH) * kv + k + CH + i % CH); }
    }
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> fa;
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> fb;
    coopMatLoad(fa, sA, 0u, LDS, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(fb, sB, 0u, LDS, gl_CooperativeMatrixLayoutColumnMajor);
    acc = coopMatMulAdd(fa, fb, acc);
    barrier();
  }
#else
  for (uint k = 0u; k < kv; k += CH) {
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> fa;
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> fb;
    coopMatLoad(fa, P0, a0 + k, kv, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(fb, P1, b0 + k, kv, gl_CooperativeMatrixLayoutColumnMajor);
    acc = coopMatMulAdd(fa, fb, acc);
  }
#endif
  coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> h =
      coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
  coopMatStore(h, P2, tm * BM * N + tn * BN, N, gl_CooperativeMatrixLayoutRowMajor);
}""",
    # The workgroup-scope GEMM with tensor-addressed loads (GL_NV_cooperative_matrix2's
    # coopMatLoadTensorNV): each BM x BK slice of A and BK x BN slice of B (B read through a
    # transposing view, since it holds one output column per row) is named by a tensor layout of
    # the whole operand and a slice of it; the driver picks how to stage it. Every layout clamps
    # (gl_CooperativeMatrixClampModeConstantNV): an element outside its operand reads as zero and
    # a store outside C is dropped, so no index leaves a buffer whatever the constants say. Grouped
    # raster and shape checks as above.
    "gemm_f16_tl": """
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = WG) in;
void main() {
  GEMM_TILE
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  la = setTensorLayoutDimensionNV(la, M, K);
  lb = setTensorLayoutDimensionNV(lb, N, K);
  lc = setTensorLayoutDimensionNV(lc, M, N);
  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
  for (uint k = 0u; k < K; k += BK) {
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> fa;
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> fb;
    coopMatLoadTensorNV(fa, P0, 0u, sliceTensorLayoutNV(la, tm * BM, BM, k, BK));
    coopMatLoadTensorNV(fb, P1, 0u, sliceTensorLayoutNV(lb, tn * BN, BN, k, BK), tr);
    acc = coopMatMulAdd(fa, fb, acc);
  }
  coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> h =
      coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
  coopMatStoreTensorNV(h, P2, 0u, sliceTensorLayoutNV(lc, tm * BM, BM, tn * BN, BN));
}""",
    # The CUDA kernel's 16 chains x[j] += dot4(x[j], b), through hb_dot4 (_DOT4: native OpSDot or
    # the unpack-and-multiply emulation).
    "dot_int8": """
layout(local_size_x = 256) in;
void main() {
  uint iters = CONST(0);
  int g = 16 * int(gl_GlobalInvocationID.x & 3u);
  const int b = 0x7f817f81;
  DECLARE_CHAINS
  for (uint i = 0u; i < iters; i++) {
    STEP_CHAINS
  }
  uint s = SUM_CHAINS;
  B0(gl_GlobalInvocationID.x) = float(int(s));
}""",
    "noop": """
layout(local_size_x = 1) in;
void main() {}""",
}

_CHAINS = 16

#: int8 dot products of two ints holding 4 signed bytes each. glslang 13 has no
#: GL_EXT_integer_dot_product, but GL_EXT_spirv_intrinsics lets GLSL name SPIR-V's OpSDot (4450,
#: SPV_KHR_integer_dot_product; capabilities DotProduct 6019, DotProductInput4x8BitPacked 6018)
#: with the packed 4x8 format operand (0). Devices without shaderIntegerDotProduct get the
#: emulation: sign-extend each byte, multiply and add in 32 bits.
_DOT4 = {
    True: """
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int hb_sdot4x8packed(int a, int b, spirv_literal int packed_vector_format);
int hb_dot4(int a, int b) { return hb_sdot4x8packed(a, b, 0); }
""",
    False: """
int hb_dot4(int a, int b) {
  ivec4 va = ivec4(a << 24, a << 16, a << 8, a) >> 24;
  ivec4 vb = ivec4(b << 24, b << 16, b << 8, b) >> 24;
  return va.x * vb.x + va.y * vb.y + va.z * vb.z + va.w * vb.w;
}
""",
}

# element type of each binding per kernel (vec4 for bandwidth kernels)
_BINDINGS: dict[str, tuple[str, ...]] = {
    "copy": ("vec4", "vec4"),
    "triad": ("vec4", "vec4", "vec4"),
    "fma_f32": ("float",),
    "fma_f16": ("float",),
    "matrix_f16": ("float16_t", "float"),
    "dot_int8": ("float",),
    "gemm_f16": ("uvec4", "uvec4", "float16_t"),
    "gemm_f16_wg": ("uvec4", "uvec4", "float16_t"),
    "gemm_f16_tl": ("float16_t", "float16_t", "float16_t"),
    "noop": ("uint",),
}


#: number of uint32 constants per kernel (the push-constant range must match exactly)
CONSTANTS: dict[str, int] = {"copy": 1, "triad": 2, "fma_f32": 1, "fma_f16": 1, "matrix_f16": 1,
                             "dot_int8": 1, "gemm_f16": 3, "gemm_f16_wg": 3, "gemm_f16_tl": 3, "noop": 0}

#: the kernel-shaping options (#defines) of each kernel and their defaults
OPTIONS: dict[str, dict[str, int]] = {
    "copy": {"UNROLL": 4},
    "fma_f32": {"CHAINS": 32, "UNROLL": 4, "VECTOR": 1},
    "gemm_f16": {"BM": 128, "BN": 128, "BK": 32},
    "gemm_f16_wg": {"BM": 128, "BN": 128, "BK": 32, "WG": 0, "SHMEM": 0},
    "gemm_f16_tl": {"BM": 128, "BN": 128, "BK": 32, "WG": 0},
}


def _push(kernel: str, abi: str) -> str:
    n = CONSTANTS[kernel]
    members = ("Table table; " if abi == "bda" else "") + (f"uint c[{n}];" if n else "")
    if not members:
        return ""
    return f"layout(push_constant, scalar) uniform Push {{ {members} }} pc;\n#define CONST(i) pc.c[i]\n"


def _bufs(kernel: str, abi: str) -> str:
    lines = [_push(kernel, abi)]
    for i, t in enumerate(_BINDINGS[kernel]):
        if abi == "descriptors":
            lines.append(f"DECLARE_BUF({i}, {t}, buf{i})")
            lines.append(f"#define B{i}(j) buf{i}[j]")
            lines.append(f"#define P{i} buf{i}")
        else:
            lines.append(f"layout(buffer_reference, scalar) buffer Ref{i} {{ {t} v[]; }};")
            lines.append(f"#define B{i}(j) Ref{i}(pc.table.addr[{i}]).v[j]")
            lines.append(f"#define P{i} Ref{i}(pc.table.addr[{i}]).v")
    return "\n".join(lines)


def glsl_source(kernel: str, abi: str, defines: dict[str, int] | None = None) -> str:
    """The GLSL of ``kernel`` for ``abi`` ("descriptors" or "bda")."""
    head = _COMMON + (_DESCRIPTORS if abi == "descriptors" else _BDA)
    body = _BODIES[kernel].replace("  GEMM_TILE\n", _GEMM_TILE)
    if kernel == "matrix_f16":
        d = defines or {}
        m, n, k = d["MM"], d["NN"], d["KK"]
        body = (body.replace("LOAD_A", f"coopMatLoad(A, P0, 0, {k}, gl_CooperativeMatrixLayoutRowMajor)")
                    .replace("LOAD_B", f"coopMatLoad(Bm, P0, {m * k}, {n}, gl_CooperativeMatrixLayoutRowMajor)")
                    .replace("STORE_C", f"coopMatStore(C0, P1, sg * {m * n}, {n}, gl_CooperativeMatrixLayoutRowMajor)"))
    if kernel == "fma_f32":
        d = {**OPTIONS["fma_f32"], **(defines or {})}
        vec, chains, unroll = d["VECTOR"], d["CHAINS"], d["UNROLL"]
        t = "vec4" if vec == 4 else "float"
        n = range(chains // vec)
        body = (body.replace("DECLARE_CHAINS", " ".join(f"{t} x{j} = b + {float(j)};" for j in n))
                    .replace("STEP_CHAINS", "\n    ".join(" ".join(f"x{j} = fma(x{j}, a, b);" for j in n)
                                                         for _ in range(unroll)))
                    .replace("SUM_CHAINS", f"{t} s = {' + '.join(f'x{j}' for j in n)};\n  B0(gl_GlobalInvocationID.x) = "
                             + ("s.x + s.y + s.z + s.w;" if vec == 4 else "s;")))
    if kernel == "dot_int8":
        n = range(_CHAINS)
        body = (_DOT4[bool((defines or {}).get("DOT_NATIVE"))] + body)
        body = (body.replace("DECLARE_CHAINS", " ".join(f"int x{j} = g + {j};" for j in n))
                    .replace("STEP_CHAINS", " ".join(f"x{j} += hb_dot4(x{j}, b);" for j in n))
                    .replace("SUM_CHAINS", " + ".join(f"uint(x{j})" for j in n)))
    return head + _bufs(kernel, abi) + "\n" + body + "\n"
