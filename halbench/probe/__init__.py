"""Read-only device discovery: one probe per API, one DeviceInfo tree, two renderers.

``vulkan``, ``cuda``, ``hip``, ``webgpu`` and ``cpu`` each expose ``query_devices()`` (cached per process;
``cpu.query_devices(driver_name)``) and raise DriverUnavailable with the reason when their API
library is missing. Importing this package loads no GPU API: each probe imports its binding
inside its functions.
"""

from __future__ import annotations

from halbench.probe.info import SCHEMA_VERSION, DeviceInfo, Tier

__all__ = ["SCHEMA_VERSION", "DeviceInfo", "Tier", "clear_caches"]


def clear_caches() -> None:
    """Forget every cached probe result (tests; a long-lived process after a driver change)."""
    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("halbench.probe.") and hasattr(module, "clear_cache"):
            module.clear_cache()
