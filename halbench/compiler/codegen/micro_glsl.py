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

# Kernel bodies use ELEM(i) accessors declared per ABI by _bufs().
_BODIES: dict[str, str] = {
    # dst[i] = src[i], vec4 grid-stride loop: constants n_vec4
    "copy": """
layout(local_size_x = 256) in;
void main() {
  uint n = CONST(0);
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) { B1(i) = B0(i); }
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
    # 8 independent vec4 FMA chains per thread: constants iterations; out[gid] = sum
    "fma_f32": """
layout(local_size_x = 256) in;
void main() {
  uint iters = CONST(0);
  float seed = float(gl_GlobalInvocationID.x & 7u) * 1e-3;
  vec4 a = vec4(0.999, 0.998, 0.997, 0.996), b = vec4(seed, 1e-3, 2e-3, 3e-3);
  vec4 x0 = b, x1 = b + 1.0, x2 = b + 2.0, x3 = b + 3.0, x4 = b + 4.0, x5 = b + 5.0, x6 = b + 6.0, x7 = b + 7.0;
  for (uint i = 0u; i < iters; i++) {
    x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);
    x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);
  }
  vec4 s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  B0(gl_GlobalInvocationID.x) = s.x + s.y + s.z + s.w;
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
    "noop": ("uint",),
}


#: number of uint32 constants per kernel (the push-constant range must match exactly)
CONSTANTS: dict[str, int] = {"copy": 1, "triad": 2, "fma_f32": 1, "fma_f16": 1, "matrix_f16": 1,
                             "dot_int8": 1, "noop": 0}


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
    body = _BODIES[kernel]
    if kernel == "matrix_f16":
        d = defines or {}
        m, n, k = d["MM"], d["NN"], d["KK"]
        body = (body.replace("LOAD_A", f"coopMatLoad(A, P0, 0, {k}, gl_CooperativeMatrixLayoutRowMajor)")
                    .replace("LOAD_B", f"coopMatLoad(Bm, P0, {m * k}, {n}, gl_CooperativeMatrixLayoutRowMajor)")
                    .replace("STORE_C", f"coopMatStore(C0, P1, sg * {m * n}, {n}, gl_CooperativeMatrixLayoutRowMajor)"))
    if kernel == "dot_int8":
        n = range(_CHAINS)
        body = (_DOT4[bool((defines or {}).get("DOT_NATIVE"))] + body)
        body = (body.replace("DECLARE_CHAINS", " ".join(f"int x{j} = g + {j};" for j in n))
                    .replace("STEP_CHAINS", " ".join(f"x{j} += hb_dot4(x{j}, b);" for j in n))
                    .replace("SUM_CHAINS", " + ".join(f"uint(x{j})" for j in n)))
    return head + _bufs(kernel, abi) + "\n" + body + "\n"
