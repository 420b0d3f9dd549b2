"""Executables on a GPU device: modules (cached per process by content hash) and kernel
parameters packed once at record time."""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from halbench.errors import UserError
from halbench.hal import BufferBinding, Executable, ExecutableBinary

__all__ = ["DEFAULT_SHARED_BYTES", "GpuExecutable", "KernelParams", "check_shared_memory", "register_arch_check",
           "release_modules"]

#: Shared memory a kernel may use without opting in (CUDA; HIP's LDS limit is at least this).
DEFAULT_SHARED_BYTES = 48 * 1024

# (api, ordinal, context, sha256) -> [module, users]. Loading the same PTX twice JIT-compiles
# once; the module lives until the last executable using it is freed.
_modules: dict[tuple, list] = {}

# format -> check(device, binary) raising UserError when the binary cannot run on the device.
_arch_checks: dict[str, Callable[[Any, ExecutableBinary], None]] = {}


def check_shared_memory(entry: str, dynamic: int, static: int, limit: int, uri: str) -> None:
    """Refuse a kernel whose static plus dynamic shared memory exceeds the device's per-block
    limit (``limit``: the opt-in limit, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    in one line naming the sizes and the way out."""
    if dynamic + static > limit:
        static_part = f" plus {static} bytes of static" if static else ""
        raise UserError(f"entry '{entry}' needs {dynamic} bytes of dynamic{static_part} shared memory, more than "
                        f"the {limit} bytes ({limit / 1024:g} KiB) a workgroup may use on {uri}; use a smaller "
                        f"tile or fewer pipeline stages")


def register_arch_check(fmt: str, check: Callable[[Any, ExecutableBinary], None]) -> None:
    _arch_checks[fmt] = check


class GpuExecutable(Executable):
    def __init__(self, device: Any, binary: ExecutableBinary):
        super().__init__(device, binary)
        check = _arch_checks.get(binary.format)
        if check is not None:
            check(device, binary)
        api = device.api
        jit = binary.format.endswith("-ptx-v1")
        self._key = (api.name, device.ordinal, id(device.ctx), hashlib.sha256(binary.data).hexdigest())
        entry = _modules.get(self._key)
        if entry is None:
            entry = _modules[self._key] = [api.module_load(binary.data, jit), 0]
        entry[1] += 1
        self.module = entry[0]
        self.functions: dict[str, Any] = {}
        try:
            for ep in binary.entries:
                fn = api.module_function(self.module, ep.name)
                if fn is None:
                    raise UserError(f"{binary.format} executable has no kernel '{ep.name}' (its entry "
                                    f"points must be extern \"C\" kernels of those names)")
                threads = int(np.prod(ep.workgroup_size))
                limit = api.function_max_threads(fn)
                if threads > limit:
                    raise UserError(f"entry '{ep.name}': workgroup size {ep.workgroup_size} ({threads} threads) "
                                    f"exceeds the kernel's limit of {limit} threads on {device.uri}")
                if ep.dynamic_shared_bytes:
                    static = api.function_static_shared(fn)
                    check_shared_memory(ep.name, ep.dynamic_shared_bytes, static, device.shared_memory_limit,
                                        device.uri)
                    if ep.dynamic_shared_bytes + static > DEFAULT_SHARED_BYTES:
                        # The module (and so the function) is shared by every executable with the
                        # same image: allow all the device has, so no later load lowers the cap.
                        api.function_allow_dynamic_shared(fn, device.shared_memory_limit - static)
                self.functions[ep.name] = fn
        except Exception:
            self._free()
            raise
        device.__dict__.setdefault("_executables", []).append(self)

    def resources(self, name: str) -> dict[str, int | float | str]:
        ep = self.entry(name)
        fn = self.functions[name]
        self.device._enter()
        out: dict[str, int | float | str] = dict(self.device.api.function_resources(fn))
        threads = int(np.prod(ep.workgroup_size))
        blocks = self.device.api.occupancy_blocks(fn, threads, ep.dynamic_shared_bytes)
        if blocks is not None:
            out["workgroups_per_multiprocessor"] = blocks
            try:
                per_sm = self.device.api.attribute(self.device.ordinal, "MAX_THREADS_PER_MULTIPROCESSOR")
            except Exception:  # noqa: BLE001 -- an API without the attribute: no ratio
                per_sm = 0
            if per_sm:
                out["occupancy"] = round(blocks * threads / per_sm, 3)
        if ep.dynamic_shared_bytes:
            out["dynamic_shared_bytes"] = ep.dynamic_shared_bytes
        return out

    def _free(self) -> None:
        entry = _modules.get(self._key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _modules[self._key]
            self.device._enter()
            self.device.api.module_unload(entry[0])


def release_modules(device: Any) -> None:
    """Free every executable of ``device`` (on close)."""
    for exe in device.__dict__.get("_executables", []):
        if not exe._released:
            exe._released = True
            exe._free()


class KernelParams:
    """The ``void**`` array a launch takes: one pointer per binding (base + offset), then the
    uint32 constants, each in its own 8-byte slot. Built once when the dispatch is recorded, so a
    replay passes one integer."""

    __slots__ = ("_pointers", "_values", "ptr")

    def __init__(self, bindings: tuple[BufferBinding, ...], constants: np.ndarray):
        n = len(bindings) + len(constants)
        self._values = (ctypes.c_uint64 * max(n, 1))()
        for i, b in enumerate(bindings):
            self._values[i] = b.buffer.ptr + b.offset
        for j, c in enumerate(constants):
            self._values[len(bindings) + j] = int(c)  # little-endian: the low 4 bytes are the uint32
        base = ctypes.addressof(self._values)
        self._pointers = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(n)])
        self.ptr = ctypes.addressof(self._pointers) if n else 0
