"""WGSL versions of the device-peak micro kernels (the micro ABI of halbench.bench.micro:
the same bindings and constants as the GLSL, CUDA and local ones), for webgpu-wgsl-v1."""

from __future__ import annotations

__all__ = ["wgsl_source"]

_HEAD = {
    "copy": ["array<vec4<f32>>", "array<vec4<f32>>"],
    "triad": ["array<vec4<f32>>", "array<vec4<f32>>", "array<vec4<f32>>"],
    "fma_f32": ["array<f32>"], "fma_f16": ["array<f32>"], "noop": ["array<u32>"],
}
_CONSTS = {"copy": 1, "triad": 2, "fma_f32": 1, "fma_f16": 1, "noop": 0}

_BODIES = {
    # dst[i] = src[i], vec4 grid-stride loop: constants n_vec4
    "copy": """
  let n = hb_c[0][0];
  for (var i = gid.x; i < n; i += ng.x * 256u) { B1[i] = B0[i]; }""",
    # a[i] = b[i] + s * c[i]: constants n_vec4, float bits of s
    "triad": """
  let n = hb_c[0][0];
  let s = bitcast<f32>(hb_c[0][1]);
  for (var i = gid.x; i < n; i += ng.x * 256u) { B0[i] = B1[i] + s * B2[i]; }""",
    # 8 independent vec4 FMA chains per thread: constants iterations; out[gid] = sum
    "fma_f32": """
  let iters = hb_c[0][0];
  let seed = f32(gid.x & 7u) * 1e-3;
  let a = vec4<f32>(0.999, 0.998, 0.997, 0.996);
  let b = vec4<f32>(seed, 1e-3, 2e-3, 3e-3);
  var x0 = b; var x1 = b + 1.0; var x2 = b + 2.0; var x3 = b + 3.0;
  var x4 = b + 4.0; var x5 = b + 5.0; var x6 = b + 6.0; var x7 = b + 7.0;
  for (var i = 0u; i < iters; i++) {
    x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);
    x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);
  }
  let s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  B0[gid.x] = s.x + s.y + s.z + s.w;""",
    "fma_f16": """
  let iters = hb_c[0][0];
  let seed = f16(f32(gid.x & 7u) * 1e-3);
  let a = vec4<f16>(0.999h);
  let b = vec4<f16>(seed, 1e-3h, 2e-3h, 3e-3h);
  var x0 = b; var x1 = b + 1.0h; var x2 = b + 2.0h; var x3 = b + 3.0h;
  var x4 = b + 4.0h; var x5 = b + 5.0h; var x6 = b + 6.0h; var x7 = b + 7.0h;
  for (var i = 0u; i < iters; i++) {
    x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);
    x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);
  }
  let s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  B0[gid.x] = f32(s.x) + f32(s.y) + f32(s.z) + f32(s.w);""",
    "noop": "\n  _ = &B0;",
}


def wgsl_source(kernel: str) -> str:
    lines = ["enable f16;"] if kernel == "fma_f16" else []
    lines += [f"@group(0) @binding({i}) var<storage, read_write> B{i}: {t};" for i, t in enumerate(_HEAD[kernel])]
    if _CONSTS[kernel]:
        lines.append(f"@group(0) @binding({len(_HEAD[kernel])}) var<uniform> hb_c: array<vec4<u32>, 1>;")
    wg = 1 if kernel == "noop" else 256
    lines.append(f"@compute @workgroup_size({wg})")
    lines.append("fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {"
                 + _BODIES[kernel] + "\n}")
    return "\n".join(lines) + "\n"
