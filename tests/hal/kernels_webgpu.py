"""The five contract kernels (tests/hal/backends.py) in WGSL, under the webgpu-wgsl-v1 ABI
(docs/webgpu.md): binding i is ``@group(0) @binding(i)`` storage, constants are the uniform
``hb_c`` at binding ``bindings``. The WGSL is validated by the device when it is loaded."""

from __future__ import annotations

from halbench.hal import EntryPoint, ExecutableBinary

__all__ = ["build", "wgsl"]

_F, _U = "f32", "u32"

# kernel -> (bindings [(name, element type)], constants, workgroup x, body)
KERNELS: dict[str, tuple[list[tuple[str, str]], list[str], int, str]] = {
    "scale_add": ([("a", _F), ("b", _F), ("outp", _F)], ["n", "alpha"], 64, """
  let i = gid.x;
  if (i < n) { outp[i] = bitcast<f32>(alpha) * a[i] + b[i]; }
"""),
    "reduce_sum": ([("x", _F), ("outp", _F)], ["n"], 256, """
  let t = lid.x;
  let i = wid.x * 256u + t;
  partial[t] = select(0.0, x[min(i, arrayLength(&x) - 1u)], i < n);
  workgroupBarrier();
  for (var s = 128u; s > 0u; s = s >> 1u) {
    if (t < s) { partial[t] += partial[t + s]; }
    workgroupBarrier();
  }
  if (t == 0u) { outp[wid.x] = partial[0]; }
"""),
    "many_bindings": ([(f"in{k}", _F) for k in range(7)] + [("outp", _F)], ["n"], 64, """
  let i = gid.x;
  if (i < n) {
    outp[i] = 1.0 * in0[i] + 2.0 * in1[i] + 3.0 * in2[i] + 4.0 * in3[i] + 5.0 * in4[i]
            + 6.0 * in5[i] + 7.0 * in6[i];
  }
"""),
    "add_one": ([("buf", _U)], ["n"], 64, """
  let i = gid.x;
  if (i < n) { buf[i] += 1u; }
"""),
    "noop": ([("buf", _U)], [], 1, ""),
}


def wgsl(kernel: str) -> str:
    bindings, constants, wg, body = KERNELS[kernel]
    lines = [f"@group(0) @binding({i}) var<storage, read_write> {name}: array<{t}>;"
             for i, (name, t) in enumerate(bindings)]
    if constants:
        lines.append(f"@group(0) @binding({len(bindings)}) var<uniform> hb_c: array<vec4<u32>, "
                     f"{-(-len(constants) // 4)}>;")
    if kernel == "reduce_sum":
        lines.append("var<workgroup> partial: array<f32, 256>;")
    lines.append(f"@compute @workgroup_size({wg})")
    lines.append("fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,"
                 " @builtin(workgroup_id) wid: vec3<u32>) {")
    lines += [f"  let {c} = hb_c[{k // 4}][{k % 4}];" for k, c in enumerate(constants)]
    if kernel == "noop":
        lines.append("  _ = &buf;")
    lines.append(body)
    lines.append("}")
    return "\n".join(lines) + "\n"


def build(kernel: str, fmt: str) -> ExecutableBinary:
    bindings, constants, wg, _ = KERNELS[kernel]
    entry = EntryPoint("main", len(bindings), len(constants), (wg, 1, 1))
    return ExecutableBinary(fmt, wgsl(kernel).encode(), (entry,), "wgsl")
