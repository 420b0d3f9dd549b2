"""The few device facts the cuda driver needs to select a device, read directly.

halbench.probe.cuda (the full dump) is the source of DeviceInfo; this fallback keeps the driver
usable where that module is absent, and reads only identity, arch and launch limits.
"""

from __future__ import annotations

from halbench.drivers.cuda.api import CudaApi, load_driver
from halbench.probe.info import DeviceInfo, Identity, Limits
from halbench.uri import dashed_uuid

__all__ = ["query_devices"]


def query_devices() -> list[DeviceInfo]:
    d = load_driver()
    api = CudaApi()
    out = []
    for i in range(api.device_count()):
        dev = api._check(d.cuDeviceGet(i), f"getting CUDA device {i}")
        name = api._check(d.cuDeviceGetName(256, dev), "reading the device name")
        name = bytes(name).split(b"\0")[0].decode(errors="replace")
        uuid = api._check(d.cuDeviceGetUuid(dev), "reading the device UUID")
        raw = bytes(uuid.bytes) if hasattr(uuid, "bytes") else bytes(uuid)
        version = api._check(d.cuDriverGetVersion(), "reading the driver version")
        attr = lambda n: api.attribute(i, n)  # noqa: E731
        info = DeviceInfo(
            driver="cuda", ordinal=i,
            identity=Identity(name=name, vendor="NVIDIA", vendor_id=0x10DE, device_type="discrete-gpu",
                              uuid=dashed_uuid(raw[:16]), api="CUDA",
                              api_version=f"{version // 1000}.{version % 1000 // 10}", arch=api.arch(i)),
            limits=Limits(
                max_workgroup_size=tuple(attr(f"MAX_BLOCK_DIM_{a}") for a in "XYZ"),
                max_workgroup_invocations=attr("MAX_THREADS_PER_BLOCK"),
                max_workgroup_count=tuple(attr(f"MAX_GRID_DIM_{a}") for a in "XYZ"),
                max_shared_memory_bytes=attr("MAX_SHARED_MEMORY_PER_BLOCK"),
                subgroup_size=attr("WARP_SIZE"), compute_units=attr("MULTIPROCESSOR_COUNT")),
        )
        out.append(info)
    return out
