"""API status codes -> halbench errors: one check per API, shared by the probe and the drivers.

Vulkan: a raw ``VkResult`` (from the cffi functions) or an exception of the `vulkan` package
becomes a ``DriverError`` carrying the VkResult's own name and an explanation; device loss and
out-of-memory get their own classes. CUDA: cuda-python's ``(CUresult, *values)`` tuples are
checked in one place, naming the status as the driver does. The bindings are imported lazily:
importing this module loads no GPU API.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from halbench.errors import DeviceLost, DriverError, OutOfDeviceMemory

__all__ = [
    "cuda_check",
    "cuda_status_name",
    "vk_check",
    "vk_error",
    "vk_errors",
    "vk_exception_name",
    "vk_result_name",
]

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"

_EXPLAIN = {
    "VK_ERROR_OUT_OF_DEVICE_MEMORY": "the device ran out of memory",
    "VK_ERROR_OUT_OF_HOST_MEMORY": "the Vulkan driver ran out of host memory",
    "VK_ERROR_DEVICE_LOST": "the device was lost (a hang, a fault or a driver reset); create a new device",
    "VK_ERROR_INITIALIZATION_FAILED": "the Vulkan driver failed to initialize",
    "VK_ERROR_INCOMPATIBLE_DRIVER": "no installed Vulkan driver supports Vulkan 1.3 (or none is installed: "
                                    "install mesa-vulkan-drivers or the GPU vendor's driver)",
    "VK_ERROR_LAYER_NOT_PRESENT": f"a requested layer is not installed (validation needs {VALIDATION_LAYER})",
    "VK_ERROR_EXTENSION_NOT_PRESENT": "a requested extension is not supported",
    "VK_ERROR_FEATURE_NOT_PRESENT": "a requested feature is not supported",
    "VK_ERROR_TOO_MANY_OBJECTS": "too many objects of this type (e.g. maxMemoryAllocationCount)",
    "VK_ERROR_INVALID_SHADER_NV": "the driver rejected the SPIR-V",
    "VK_TIMEOUT": "the wait timed out",
}


@cache
def _vk_names() -> dict[int, str]:
    import vulkan as vk

    # Prefer the unsuffixed core name when an extension alias has the same value.
    names: dict[int, str] = {}
    for n in dir(vk):
        if not (n.startswith("VK_ERROR_") or n in ("VK_SUCCESS", "VK_NOT_READY", "VK_TIMEOUT",
                                                   "VK_EVENT_SET", "VK_EVENT_RESET", "VK_INCOMPLETE")):
            continue
        if "RANGE" in n or "MAX_ENUM" in n:
            continue
        v = getattr(vk, n)
        if isinstance(v, int) and (v not in names or len(n) < len(names[v])):
            names[v] = n
    return names


@cache
def _vk_exception_codes() -> dict[type, int]:
    import vulkan as vk

    return {cls: code for code, cls in vk.exception_codes.items() if code is not None}


def vk_result_name(code: int) -> str:
    return _vk_names().get(code, f"VkResult({code})")


def vk_exception_name(e: BaseException) -> str:
    """``VkErrorInitializationFailed()`` -> ``VK_ERROR_INITIALIZATION_FAILED``."""
    code = _vk_exception_codes().get(type(e))
    return vk_result_name(code) if code is not None else type(e).__name__


def vk_error(code: int, what: str, device: Any = None) -> DriverError:
    """The halbench error for VkResult ``code`` returned by ``what``; marks a lost device."""
    name = vk_result_name(code)
    where = f" on {device.uri}" if device is not None else ""
    msg = f"{what} failed{where}: {_EXPLAIN.get(name, 'see the Vulkan specification for ' + name)}"
    if name == "VK_ERROR_OUT_OF_DEVICE_MEMORY":
        return OutOfDeviceMemory("vulkan", name, msg)
    if name == "VK_ERROR_DEVICE_LOST":
        if device is not None and not device.lost:
            device.lost = f"{name} in {what}"
        return DeviceLost("vulkan", name, msg)
    return DriverError("vulkan", name, msg)


def vk_check(code: int, what: str, device: Any = None, *, allow_status: bool = False) -> None:
    """Raise the halbench error for a raw VkResult other than VK_SUCCESS (with
    ``allow_status``: only for errors, letting VK_INCOMPLETE and other positive statuses pass)."""
    if code < 0 or (code != 0 and not allow_status):
        raise vk_error(code, what, device)


@contextmanager
def vk_errors(what: str, device: Any = None) -> Iterator[None]:
    """Turn the `vulkan` package's exceptions raised inside the block into halbench errors."""
    import vulkan as vk

    try:
        yield
    except (vk.VkError, vk.VkException) as e:
        raise vk_error(_vk_exception_codes().get(type(e), -13), what, device) from None


def cuda_status_name(driver: Any, status: Any) -> str:
    """``CUDA_ERROR_OUT_OF_MEMORY``: the driver's own name of a CUresult."""
    try:
        err, text = driver.cuGetErrorName(status)
        if err == driver.CUresult.CUDA_SUCCESS and text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # noqa: BLE001, S110 - a status the binding cannot name still gets reported
        pass
    return getattr(status, "name", str(status))


def cuda_check(driver: Any, result: tuple, what: str, error: Any = None) -> Any:
    """The one check of a cuda-python call: ``result`` is ``(CUresult, *values)``; returns the
    values (one or a tuple). A failure raises ``error(status, what)`` when given (the driver
    maps lost devices and OOM), else a DriverError naming the status."""
    status, *values = result
    if status != driver.CUresult.CUDA_SUCCESS:
        if error is not None:
            raise error(status, what)
        raise DriverError("cuda", cuda_status_name(driver, status), f"{what} failed")
    return values[0] if len(values) == 1 else tuple(values)
