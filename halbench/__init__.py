"""halbench: what a GPU can do, and how fast real ML models run on it through Vulkan, CUDA and HIP.

``import halbench`` loads no GPU API; drivers load their bindings when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halbench.errors import (
    CompileError,
    DeviceLost,
    DriverError,
    DriverUnavailable,
    HalbenchError,
    OutOfDeviceMemory,
    UserError,
    WaitTimeout,
)

if TYPE_CHECKING:
    from halbench.hal import Device

__version__ = "0.1.0"

__all__ = [
    "CompileError",
    "DeviceLost",
    "DriverError",
    "DriverUnavailable",
    "HalbenchError",
    "OutOfDeviceMemory",
    "UserError",
    "WaitTimeout",
    "__version__",
    "create_device",
    "query_available_drivers",
]


def create_device(uri: str) -> Device:
    """Create a logical device from a URI such as ``vulkan://``, ``cuda://0`` or ``local-sync://``."""
    from halbench.drivers import create_device as _create

    return _create(uri)


def query_available_drivers():
    """Every registered driver, whether it is available here, and why not."""
    from halbench.drivers import query_available_drivers as _query

    return _query()
