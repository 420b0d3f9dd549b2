"""The driver registry: built-in HAL drivers plus the ``halbench.drivers`` entry-point group.

Each driver module imports its GPU binding lazily, inside its functions, so importing this
registry (and ``import halbench``) never loads a GPU API.
"""

from __future__ import annotations

import fnmatch
import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from halbench.errors import DriverUnavailable, HalbenchError, UserError

if TYPE_CHECKING:
    from halbench.hal import Device, Driver
    from halbench.probe.info import DeviceInfo
    from halbench.uri import DeviceURI

__all__ = [
    "DriverStatus",
    "canonical_driver",
    "create_device",
    "driver_names",
    "get_driver",
    "known_formats",
    "query_available_drivers",
    "resolve_devices",
    "select_device",
]

# name -> ("module:Class", one-line description)
_BUILTIN: dict[str, tuple[str, str]] = {
    "vulkan": ("halbench.drivers.vulkan:VulkanDriver",
               "Vulkan 1.3 compute through the Vulkan loader (SPIR-V, descriptor and BDA ABIs)"),
    "cuda": ("halbench.drivers.cuda:CudaDriver",
             "NVIDIA CUDA through cuda-python's driver API (cubin / PTX, CUDA graphs)"),
    "hip": ("halbench.drivers.hip:HipDriver",
            "AMD ROCm HIP through hip-python (code objects)"),
    "webgpu": ("halbench.drivers.webgpu:WebGpuDriver",
               "WebGPU through wgpu-py / wgpu-native (WGSL; Vulkan, Metal or D3D12 underneath)"),
    "local-sync": ("halbench.drivers.local:LocalSyncDriver",
                   "Host CPU, inline on the calling thread (NumPy kernels; the reference)"),
    "local-task": ("halbench.drivers.local:LocalTaskDriver",
                   "Host CPU, workgroups spread over a thread pool (NumPy kernels)"),
}

_instances: dict[str, Driver] = {}


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


def _check_driver_class(name: str, cls: type) -> None:
    """A plug-in must implement the whole driver interface (as wgpu-py checks its backends)."""
    from halbench.hal import FORMAT_NAME, Driver

    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise DriverUnavailable(name, f"{cls!r} is not a halbench.hal.Driver subclass")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if cls.query_available_devices is Driver.query_available_devices and not cls.probe_module:
        missing.append("query_available_devices (or probe_module)")
    if cls._open is Driver._open and not cls.device_module:
        missing.append("_open (or device_module)")
    if missing:
        raise DriverUnavailable(name, f"{cls.__name__} does not implement {', '.join(missing)}")
    bad = [f for f in cls.formats if not FORMAT_NAME.fullmatch(f)]
    if not cls.formats or bad:
        raise DriverUnavailable(name, f"{cls.__name__} declares no valid executable formats {bad or ''}")


def driver_names() -> list[str]:
    return list(_registry())


def canonical_driver(name: str) -> str:
    """The registered name for ``name`` or an alias a driver declares (``rocm`` -> ``hip``)."""
    reg = _registry()
    if name in reg:
        return name
    for other in reg:
        try:
            if name in get_driver(other).aliases:
                return other
        except HalbenchError:
            continue
    return name


def get_driver(name: str) -> Driver:
    """The driver called ``name`` (or an alias). Unknown names raise UserError listing the known ones."""
    reg = _registry()
    name = canonical_driver(name) if name not in reg else name
    if name not in reg:
        raise UserError(f"unknown driver '{name}'; known drivers: {', '.join(reg)}")
    if name not in _instances:
        target, _ = reg[name]
        module_name, _, cls_name = target.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError) as e:
            raise DriverUnavailable(name, f"cannot import {target}: {e}") from e
        _check_driver_class(name, cls)
        drv = cls()
        drv.name = name
        _instances[name] = drv
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


def known_formats() -> dict[str, str]:
    """Executable format -> the driver that loads it, for every driver that can be imported."""
    out: dict[str, str] = {}
    for name in _registry():
        try:
            drv = get_driver(name)
        except HalbenchError:
            continue
        for f in drv.formats:
            out.setdefault(f, name)
    return out


def _parse(uri: str | DeviceURI) -> DeviceURI:
    """Parse once, with the driver's registered name (``rocm://`` is ``hip://``)."""
    from dataclasses import replace

    from halbench.uri import DeviceURI, parse_uri

    u = uri if isinstance(uri, DeviceURI) else parse_uri(uri)
    name = canonical_driver(u.driver)
    return u if name == u.driver else replace(u, driver=name)


def select_device(uri: str | DeviceURI) -> DeviceInfo:
    """The probed device a URI names (``vulkan://`` picks the driver's default)."""
    u = _parse(uri)
    return get_driver(u.driver).select(u)


def create_device(uri: str | DeviceURI | DeviceInfo) -> Device:
    """Open a logical device from a URI (``vulkan://``, ``cuda://0``, ``vulkan://GPU-...``) or a
    probed DeviceInfo. The URI is parsed here, once; the driver gets the parsed form."""
    from halbench.probe.info import DeviceInfo

    if isinstance(uri, DeviceInfo):
        return get_driver(uri.driver).create_device(uri)
    u = _parse(uri)
    return get_driver(u.driver).create_device(u)


def resolve_devices(patterns: tuple[str, ...] | list[str]) -> tuple[list[DeviceInfo], list[tuple[str, str]]]:
    """Device patterns -> the probed devices they name, each once, in order.

    Patterns: ``*`` (every device of every driver), ``DRIVER://*`` or other shell patterns over
    URIs (whatever this machine has: a missing driver is no error), ``DRIVER`` / ``DRIVER://``
    (its default device), ``DRIVER://ORDINAL`` and ``DRIVER://GPU-UUID``. Returns
    ``(devices, unavailable)``: ``unavailable`` lists ``(pattern, reason)`` for patterns that named
    a driver or device explicitly but could not be had.
    """
    found: list[DeviceInfo] = []
    missing: list[tuple[str, str]] = []

    def devices_of(driver: str) -> list[DeviceInfo]:
        return list(get_driver(driver).query_available_devices())

    for pat in patterns:
        try:
            driver, sep, path = pat.partition("://")
            if sep:
                driver = canonical_driver(driver)
                pat = f"{driver}://{path}"
            if pat == "*" or (sep and any(c in path for c in "*?[")):
                for name in (driver_names() if pat == "*" else [driver]):
                    try:
                        found += [d for d in devices_of(name) if pat == "*" or fnmatch.fnmatch(d.uri, pat)]
                    except HalbenchError:
                        pass  # a wildcard asks for whatever this machine has
                continue
            found.append(select_device(pat))
        except HalbenchError as e:
            missing.append((pat, str(e)))
    unique: dict[str, DeviceInfo] = {}
    for d in found:
        unique.setdefault(d.uri, d)
    return list(unique.values()), missing
