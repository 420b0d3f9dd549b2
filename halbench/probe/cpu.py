"""Host CPU probe for the ``local-sync`` and ``local-task`` drivers.

Both drivers run on the same single device (ordinal 0): the host CPU. Linux's /proc is read
when present; elsewhere the standard library's answers are used.
"""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

from halbench.probe.info import DeviceInfo, Features, Identity, Limits, Memory, MemoryHeap

__all__ = ["SIMD_FLAGS", "parse_cpuinfo", "query_devices"]

#: SIMD-relevant /proc/cpuinfo flags halbench reports (x86 and Arm spellings).
SIMD_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
              "neon", "asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm")


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """Model name, SIMD flags and core counts from the text of /proc/cpuinfo (pure, for tests)."""
    model, flags, cores, packages = "", set(), set(), set()
    physical = core = None
    for line in text.splitlines():
        key, _, value = (p.strip() for p in line.partition(":"))
        if key in ("model name", "Model", "Hardware") and not model:
            model = value
        elif key in ("flags", "Features"):
            flags.update(value.split())
        elif key == "physical id":
            physical = value
            packages.add(value)
        elif key == "core id":
            core = value
        elif not line.strip():
            if core is not None:
                cores.add((physical, core))
            physical = core = None
    if core is not None:
        cores.add((physical, core))
    return {"model": model, "flags": tuple(f for f in SIMD_FLAGS if f in flags),
            "physical_cores": len(cores) or None, "packages": len(packages) or None}


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _memory_bytes() -> int | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@functools.cache
def _host() -> tuple[Identity, Limits, Memory, dict[str, Any], dict[str, bool]]:
    info = parse_cpuinfo(_read("/proc/cpuinfo"))
    threads = os.cpu_count() or 1
    arch = platform.machine() or "unknown"
    total = _memory_bytes()
    identity = Identity(name=info["model"] or platform.processor() or arch, vendor=_vendor(info["model"]),
                        device_type="cpu", api="host", api_version=platform.python_version(),
                        driver_name="numpy", driver_version=_numpy_version(), arch=arch)
    limits = Limits(compute_units=threads)
    memory = Memory(total_bytes=total, heaps=(MemoryHeap(total, ("device-local", "host-visible")),) if total else ())
    attributes = {"cpu_model": info["model"], "physical_cores": info["physical_cores"] or threads,
                  "logical_cores": threads, "packages": info["packages"], "simd_features": info["flags"],
                  "os": f"{platform.system()} {platform.release()}"}
    # NumPy computes every dtype on the host, so the dtype flags hold whatever the SIMD units
    # are; SIMD flags live in attributes (features.flags keeps to Vulkan names).
    flags = {"shaderFloat16": True, "shaderInt8": True, "shaderInt16": True, "shaderInt64": True,
             "shaderFloat64": True, "storageBuffer8BitAccess": True, "storageBuffer16BitAccess": True,
             "cooperativeMatrix": False, "bufferDeviceAddress": False}
    return identity, limits, memory, attributes, flags


def _vendor(model: str) -> str:
    m = model.lower()
    for key, name in (("intel", "Intel"), ("amd", "AMD"), ("apple", "Apple"), ("arm", "ARM")):
        if key in m:
            return name
    return ""


def _numpy_version() -> str:
    try:
        import numpy

        return numpy.__version__
    except ImportError:  # pragma: no cover - numpy is a dependency
        return ""


def query_devices(driver_name: str) -> list[DeviceInfo]:
    """The host CPU as the one device of ``driver_name`` (``local-sync`` or ``local-task``)."""
    identity, limits, memory, attributes, flags = _host()
    return [DeviceInfo(driver=driver_name, ordinal=0, identity=identity, limits=limits,
                       features=Features(flags=dict(flags)), memory=memory, attributes=dict(attributes))]
