"""The few device facts the hip driver needs to select a device, read directly (a fallback
until halbench.probe.hip exists). UNTESTED on hardware."""

from __future__ import annotations

from halbench.drivers.hip.api import HipApi
from halbench.probe.info import DeviceInfo, Identity, Limits

__all__ = ["query_devices"]


def query_devices() -> list[DeviceInfo]:
    api = HipApi()
    out = []
    for i in range(api.device_count()):
        props = api.h.hipDeviceProp_t()
        api._check(api.h.hipGetDeviceProperties(props, i), "reading device properties")
        name = props.name
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        attr = lambda n: api.attribute(i, n)  # noqa: E731
        out.append(DeviceInfo(
            driver="hip", ordinal=i,
            identity=Identity(name=name, vendor="AMD", vendor_id=0x1002, device_type="discrete-gpu",
                              api="HIP", arch=api.arch(i)),
            limits=Limits(max_workgroup_size=tuple(attr(f"MAX_BLOCK_DIM_{a}") for a in "XYZ"),
                          max_workgroup_invocations=attr("MAX_THREADS_PER_BLOCK"),
                          max_workgroup_count=tuple(attr(f"MAX_GRID_DIM_{a}") for a in "XYZ"),
                          subgroup_size=attr("WARP_SIZE"), compute_units=attr("MULTIPROCESSOR_COUNT")),
        ))
    return out
