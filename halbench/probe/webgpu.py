"""The WebGPU probe: every wgpu adapter (wgpu-py over wgpu-native) in the common DeviceInfo.

wgpu-native finds GPUs through the platform's native API (Vulkan on Linux, through the same
loader the vulkan driver uses; Metal; D3D12). Its OpenGL adapters are left out: they cannot run
compute work with storage buffers the way the others do. Ordinals count the adapters kept, in
wgpu's enumeration order.

WebGPU reports no device UUID and no calibrated time domains: the identity carries vendor and
device ids (``same_device_as`` is matched on those), and the timing section says timestamps
are durations only.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from halbench.errors import DriverUnavailable
from halbench.probe.info import DeviceInfo, Features, Identity, Limits, ProbeCache, Timing

__all__ = ["NATIVE_BACKENDS", "adapters", "clear_cache", "query_devices"]

DRIVER = "webgpu"
NATIVE_BACKENDS = ("Vulkan", "Metal", "D3D12")

_TYPES = {"DiscreteGPU": "discrete-gpu", "IntegratedGPU": "integrated-gpu", "VirtualGPU": "virtual-gpu",
          "CPU": "cpu"}


def adapters() -> list[Any]:
    """The wgpu adapters halbench uses, in ordinal order (DriverUnavailable says why none)."""
    # wgpu-native also probes EGL/OpenGL adapters, which complain on stderr without a runtime dir.
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    try:
        import wgpu
    except ImportError as e:
        raise DriverUnavailable(DRIVER, f"wgpu is not installed ({e}); pip install wgpu") from e
    except OSError as e:  # wgpu-native's library failed to load
        raise DriverUnavailable(DRIVER, f"wgpu-native could not be loaded ({e})") from e
    try:
        found = wgpu.gpu.enumerate_adapters_sync()
    except Exception as e:
        raise DriverUnavailable(DRIVER, f"wgpu could not enumerate adapters: {e}") from e
    return [a for a in found if a.info.get("backend_type") in NATIVE_BACKENDS]


def _probe() -> list[DeviceInfo]:
    found = adapters()  # DriverUnavailable when wgpu cannot be imported
    import wgpu

    return [_info(i, a, wgpu.__version__) for i, a in enumerate(found)]


_cache = ProbeCache(lambda: _probe())


def query_devices() -> list[DeviceInfo]:
    """Every WebGPU adapter, probed once per process."""
    return _cache.get()


def clear_cache() -> None:
    _cache.clear()


def _info(ordinal: int, adapter: Any, version: str) -> DeviceInfo:
    info, lim = dict(adapter.info), dict(adapter.limits)
    features = sorted(str(f) for f in adapter.features)
    flags = {f: True for f in features}
    # The names other dumps use, so the compiler's feature checks read the same keys.
    flags["shaderFloat16"] = "shader-f16" in features
    flags["shaderInt64"] = "shader-int64" in features
    flags["timestampQuery"] = "timestamp-query" in features
    sub_min, sub_max = info.get("subgroup_min_size"), info.get("subgroup_max_size")
    identity = Identity(
        name=info.get("device") or "WebGPU adapter", vendor=info.get("vendor") or "",
        vendor_id=info.get("vendor_id"), device_id=info.get("device_id"),
        device_type=_TYPES.get(info.get("adapter_type", ""), "other"), api="WebGPU",
        api_version=f"wgpu-native via wgpu-py {version} over {info.get('backend_type')}",
        driver_name=info.get("backend_type") or "", driver_info=info.get("description") or "",
        arch=info.get("architecture") or None)
    limits = Limits(
        max_workgroup_size=(lim["max-compute-workgroup-size-x"], lim["max-compute-workgroup-size-y"],
                            lim["max-compute-workgroup-size-z"]),
        max_workgroup_invocations=lim["max-compute-invocations-per-workgroup"],
        max_workgroup_count=(lim["max-compute-workgroups-per-dimension"],) * 3,
        max_shared_memory_bytes=lim["max-compute-workgroup-storage-size"],
        max_push_constants_bytes=lim.get("max-immediate-size"),
        max_storage_buffer_range=lim["max-storage-buffer-binding-size"],
        min_storage_buffer_offset_alignment=lim["min-storage-buffer-offset-alignment"],
        max_bound_descriptor_sets=lim["max-bind-groups"],
        subgroup_size=sub_max if sub_min == sub_max else None,
        min_subgroup_size=sub_min, max_subgroup_size=sub_max)
    timing = Timing(timestamp_period_ns=1.0 if flags["timestampQuery"] else None, calibrated_time_domains=())
    attributes = {k: v for k, v in lim.items() if isinstance(v, int)}
    attributes["backend_type"] = info.get("backend_type")
    return DeviceInfo(driver=DRIVER, ordinal=ordinal, identity=identity, limits=limits,
                      features=Features(flags=flags), timing=timing, extensions=tuple(features),
                      opportunities=tuple(f for f in ("timestamp-query", "shader-f16", "subgroup", "shader-int64")
                                          if f in features),
                      attributes=attributes)
