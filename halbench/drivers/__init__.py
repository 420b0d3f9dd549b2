"""The driver registry: built-in HAL drivers plus the ``halbench.drivers`` entry-point group.

Each driver module imports its GPU binding lazily, inside its functions, so importing this
registry (and ``import halbench``) never loads a GPU API.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from halbench.errors import DriverUnavailable, HalbenchError, UserError

if TYPE_CHECKING:
    from halbench.hal import Device, Driver

__all__ = ["DriverStatus", "driver_names", "get_driver", "query_available_drivers", "create_device"]

# name -> ("module:Class", one-line description)
_BUILTIN: dict[str, tuple[str, str]] = {
    "vulkan": ("halbench.drivers.vulkan:VulkanDriver",
               "Vulkan 1.3 compute through the Vulkan loader (SPIR-V, descriptor and BDA ABIs)"),
    "cuda": ("halbench.drivers.cuda:CudaDriver",
             "NVIDIA CUDA through cuda-python's driver API (cubin / PTX, CUDA graphs)"),
    "hip": ("halbench.drivers.hip:HipDriver",
            "AMD ROCm HIP through hip-python (code objects)"),
    "local-sync": ("halbench.drivers.local:LocalSyncDriver",
                   "Host CPU, inline on the calling thread (NumPy kernels; the reference)"),
    "local-task": ("halbench.drivers.local:LocalTaskDriver",
                   "Host CPU, workgroups spread over a thread pool (NumPy kernels)"),
}

_instances: dict[str, "Driver"] = {}


@dataclass(frozen=True)
class DriverStatus:
    name: str
    description: str
    available: bool
    reason: str = ""
    device_count: int = 0

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "available": self.available,
                "reason": self.reason, "device_count": self.device_count}


def _registry() -> dict[str, tuple[str, str]]:
    reg = dict(_BUILTIN)
    for ep in entry_points(group="halbench.drivers"):
        reg.setdefault(ep.name, (ep.value, f"third-party driver from {ep.value}"))
    return reg


def driver_names() -> list[str]:
    return list(_registry())


def get_driver(name: str) -> "Driver":
    """The driver called ``name``. Unknown names raise UserError listing the known ones."""
    reg = _registry()
    if name not in reg:
        raise UserError(f"unknown driver '{name}'; known drivers: {', '.join(reg)}")
    if name not in _instances:
        target, _ = reg[name]
        module_name, _, cls_name = target.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except ImportError as e:
            raise DriverUnavailable(name, f"cannot import {module_name}: {e}") from e
        _instances[name] = cls()
    return _instances[name]


def query_available_drivers() -> list[DriverStatus]:
    """Every registered driver with whether it can be used here, and why not. Never raises
    for a driver's own failure: a listing shows it."""
    out = []
    for name, (_, desc) in _registry().items():
        try:
            drv = get_driver(name)
            desc = drv.description or desc
            n = len(drv.query_available_devices())
            if n == 0:
                out.append(DriverStatus(name, desc, False, "no devices found"))
            else:
                out.append(DriverStatus(name, desc, True, "", n))
        except DriverUnavailable as e:
            out.append(DriverStatus(name, desc, False, e.reason))
        except HalbenchError as e:
            out.append(DriverStatus(name, desc, False, str(e)))
    return out


def create_device(uri: str) -> "Device":
    """Create a logical device from a URI (``vulkan://``, ``cuda://0``, ``vulkan://GPU-...``)."""
    from halbench.uri import parse_uri

    u = parse_uri(uri)
    drv = get_driver(u.driver)
    path = str(u).partition("://")[2]
    return drv.create_device(path)
