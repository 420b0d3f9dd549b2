"""CUDA C -> PTX / cubin with NVRTC (and HIP C -> code object with hipRTC), no GPU needed.

NVRTC and nvJitLink come from PyPI (cuda-python's ``cuda.bindings``); the CUDA headers NVRTC
needs (cuda_fp16.h, mma.h) from the nvidia-cuda-runtime wheel. Results are cached in-process by
content hash (source, arch, output, options, renames and the compiler's version).

``rename`` maps kernel names in the PTX: CUDA C cannot call a kernel ``main`` (the HAL's
conventional entry name), so the source uses another name and the PTX is renamed; a cubin is
then built from that PTX by nvJitLink, which is the same ptxas the driver would run.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import sysconfig
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from halbench.arch import is_sm
from halbench.errors import CompileError, KernelRejected

__all__ = ["compile_cuda", "compile_hip", "cuda_include_dirs", "nvrtc_version"]

_cache: dict[str, bytes] = {}


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise CompileError(f"NVRTC is not available ({e}); pip install cuda-python nvidia-cuda-nvrtc") from e
    return nvrtc


@cache
def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    try:
        _err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # the library itself could not be loaded
        raise CompileError(f"NVRTC could not be loaded: {e}; pip install nvidia-cuda-nvrtc") from e
    return int(major), int(minor)


@cache
def cuda_include_dirs() -> tuple[str, ...]:
    """Where the CUDA headers are: an installed CUDA toolkit first (its headers are complete and
    consistent; newer nvidia-cuda-runtime wheels split ``crt/`` into another wheel), then the
    nvidia-* wheels (nvidia/cu13/include, ...)."""
    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
             *[p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]}
    found = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "include" / "crt" / "mma.h").exists() and str(Path(home) / "include") not in found:
            found.append(str(Path(home) / "include"))
    for root in sorted(roots):
        for inc in sorted(Path(root).glob("nvidia/*/include")):
            if (inc / "cuda_fp16.h").exists():
                found.append(str(inc))
    return tuple(found)


def _check(result: tuple, what: str, log: str = "") -> None:
    nvrtc = _nvrtc()
    if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        text = nvrtc.nvrtcGetErrorString(result[0])[1]
        text = text.decode() if isinstance(text, bytes) else str(text)
        raise (KernelRejected if log else CompileError)(f"{text} {what}" + (f":\n{log}" if log else ""))


def _program_log(nvrtc, prog) -> str:
    _err, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0 ").decode(errors="replace").strip()


def compile_cuda(source: str, *, arch: str = "sm_90", output: str = "cubin", name: str = "kernel",
                 options: Sequence[str] = (), rename: dict[str, str] | None = None,
                 cache: bool = True) -> bytes:
    """Compile CUDA C ``source`` for ``arch`` (``sm_90``, ``sm_90a``, ``sm_80``) to ``output``
    ("cubin" or "ptx"). Kernels the runtime looks up by name must be ``extern "C"``.
    A ``gfx*`` arch is handed to :func:`compile_hip` (HIP C is CUDA C for these kernels).
    Raises CompileError with NVRTC's log, naming ``name``."""
    if output not in ("cubin", "ptx"):
        raise CompileError(f"NVRTC output must be 'cubin' or 'ptx', not '{output}'")
    if not is_sm(arch):
        raise CompileError(f"'{arch}' is not a CUDA arch like sm_90 (NVRTC compiles CUDA only; "
                           f"HIP code objects come from compile_hip)")
    key = hashlib.sha256(repr((source, arch, output, tuple(options), sorted((rename or {}).items()),
                               nvrtc_version())).encode()).hexdigest()
    if cache and key in _cache:
        return _cache[key]
    via_ptx = output == "ptx" or bool(rename)
    virtual = "compute_" + arch[3:]
    opts = [f"--gpu-architecture={virtual if via_ptx else arch}", "--std=c++17", *options]
    opts += [f"-I{d}" for d in cuda_include_dirs()]
    nvrtc = _nvrtc()
    nvrtc_version()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check((err,), f"creating the NVRTC program '{name}'")
    try:
        encoded = [o.encode() for o in opts]
        result = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _check(result, f"compiling '{name}' for {arch}", _program_log(nvrtc, prog))
        if via_ptx:
            err, n = nvrtc.nvrtcGetPTXSize(prog)
            buf = b" " * n
            _check(nvrtc.nvrtcGetPTX(prog, buf), "reading PTX")
            data = buf.rstrip(b"\0")
            for old, new in (rename or {}).items():
                data = re.sub(rb"\b" + re.escape(old.encode()) + rb"\b", new.encode(), data)
            if output == "cubin":
                data = _link_ptx(data, arch, name)
        else:
            err, n = nvrtc.nvrtcGetCUBINSize(prog)
            buf = b" " * n
            _check(nvrtc.nvrtcGetCUBIN(prog, buf), "reading the cubin")
            data = bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    if cache:
        _cache[key] = data
    return data


def _link_ptx(ptx: bytes, arch: str, name: str) -> bytes:
    """PTX -> cubin through nvJitLink (no GPU, no driver)."""
    try:
        from cuda.bindings import nvjitlink
    except ImportError as e:
        raise CompileError(f"nvJitLink is not available ({e}); pip install nvidia-nvjitlink") from e
    try:
        handle = nvjitlink.create(1, [f"-arch={arch}"])
    except Exception as e:
        raise CompileError(f"nvJitLink could not start for {arch}: {e}") from e
    try:
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), f"{name}.ptx")
            nvjitlink.complete(handle)
        except Exception as e:
            n = nvjitlink.get_error_log_size(handle)
            log = bytearray(n)
            if n:
                nvjitlink.get_error_log(handle, log)
            raise KernelRejected(f"nvJitLink failed on '{name}' for {arch}: {e}\n"
                               f"{log.rstrip(bytes(1)).decode(errors='replace')}") from e
        n = nvjitlink.get_linked_cubin_size(handle)
        out = bytearray(n)
        nvjitlink.get_linked_cubin(handle, out)
        return bytes(out)
    finally:
        nvjitlink.destroy(handle)


def compile_hip(source: str, *, arch: str = "gfx942", name: str = "kernel",
                options: Sequence[str] = ()) -> bytes:
    """HIP C -> a code object for ``arch`` through hipRTC. UNTESTED (needs libhiprtc.so, which
    only a ROCm install provides); a missing library is a CompileError saying so."""
    key = hashlib.sha256(repr(("hip", source, arch, tuple(options))).encode()).hexdigest()
    if key in _cache:
        return _cache[key]
    try:
        from hip import hiprtc
    except ImportError as e:
        raise CompileError(f"hipRTC is not available ({e}); pip install hip-python") from e
    ok = hiprtc.hiprtcResult.HIPRTC_SUCCESS
    try:
        err, prog = hiprtc.hiprtcCreateProgram(source.encode(), f"{name}.hip".encode(), 0, None, None)
    except RuntimeError as e:  # hip-python dlopens libhiprtc.so on first use
        missing = "libhiprtc.so not found" if "cannot open shared object" in str(e) else str(e)
        raise CompileError(f"hipRTC is not available: {missing} (install ROCm to build HIP code objects)") from e
    if err != ok:
        raise CompileError(f"hiprtcCreateProgram failed for '{name}': {err}")
    try:
        opts = [f"--offload-arch={arch}".encode(), b"-O3", *[o.encode() for o in options]]
        (err,) = hiprtc.hiprtcCompileProgram(prog, len(opts), opts)
        if err != ok:
            _, n = hiprtc.hiprtcGetProgramLogSize(prog)
            log = bytearray(n)
            hiprtc.hiprtcGetProgramLog(prog, log)
            raise CompileError(f"hipRTC failed on '{name}' for {arch}:\n{log.decode(errors='replace')}")
        _, n = hiprtc.hiprtcGetCodeSize(prog)
        code = bytearray(n)
        hiprtc.hiprtcGetCode(prog, code)
    finally:
        hiprtc.hiprtcDestroyProgram(prog)
    _cache[key] = bytes(code)
    return bytes(code)
