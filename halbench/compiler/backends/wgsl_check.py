"""WGSL validation at compile time: wgpu's own front end (naga) on this machine's adapter.

There is no standalone WGSL validator among halbench's dependencies; creating a shader module
on a WebGPU device runs naga's parser and validator. Modules accepted once are cached by hash
for the process. Without any adapter here the check is skipped (the driver validates again
when it loads the module, so nothing invalid runs).
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

from halbench.errors import CompileError

__all__ = ["validate_wgsl"]

_ok: set[str] = set()


@cache
def _device() -> Any:
    try:
        from halbench.probe.webgpu import adapters

        found = adapters()
    except Exception:  # noqa: BLE001 - no wgpu, no adapter: nothing to validate with
        return None
    if not found:
        return None
    a = found[0]
    wanted = [f for f in ("shader-f16", "shader-int64") if f in a.features]
    return a.request_device_sync(required_features=wanted)


def validate_wgsl(source: str, *, name: str = "kernel") -> bool:
    """CompileError when naga rejects ``source``; False when nothing could check it."""
    key = hashlib.sha256(source.encode()).hexdigest()
    if key in _ok:
        return True
    dev = _device()
    if dev is None:
        return False
    try:
        dev.create_shader_module(code=source)
    except Exception as e:  # noqa: BLE001 - naga's message, compacted
        from halbench.compiler.codegen.lang import kernel_failure

        raise kernel_failure(CompileError(f"naga rejected the WGSL of {name}: {' '.join(str(e).split())[:600]}"),
                             source, name, "wgsl") from None
    _ok.add(key)
    return True
