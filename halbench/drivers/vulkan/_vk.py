"""The Vulkan binding in one place: the loader, result codes -> halbench errors, the instance.

The `vulkan` cffi package raises Python exceptions from its wrappers (``vk.VkErrorDeviceLost``)
but hot paths call the raw cffi functions (``lib.vkQueueSubmit2``) and get a VkResult back. Both
end in :func:`error`, so every Vulkan failure becomes the same ``DriverError`` with the
VkResult's own name and an explanation.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

import vulkan as vk
from vulkan import ffi, lib

from halbench.errors import DriverError, DriverUnavailable
from halbench.probe.status import VALIDATION_LAYER, vk_check, vk_error, vk_result_name
from halbench.probe.status import vk_errors as _vk_errors

__all__ = [
    "BUFFER_USAGE_SHADER_DEVICE_ADDRESS",
    "MEMORY_ALLOCATE_DEVICE_ADDRESS",
    "VALIDATION_LAYER",
    "check",
    "device_fn",
    "error",
    "ffi",
    "instance",
    "instance_fn",
    "lib",
    "result_name",
    "validation_messages",
    "vk",
    "vk_errors",
]


# Core 1.2 names the binding leaves out (its aliases are None): the values from vulkan_core.h.
BUFFER_USAGE_SHADER_DEVICE_ADDRESS = 0x00020000
MEMORY_ALLOCATE_DEVICE_ADDRESS = 0x00000002


# The one Vulkan status check, shared with the probe (halbench.probe.status).
result_name = vk_result_name
error = vk_error
check = vk_check
vk_errors = _vk_errors


# -- instance ------------------------------------------------------------------------

#: Validation-layer messages seen in this process (HALBENCH_VULKAN_VALIDATION=1).
validation_messages: list[str] = []

_lock = threading.Lock()
_instance: Any = None
_messenger: Any = None
_keep: list[Any] = []  # cffi objects that must outlive the instance (the callback)
live_devices = 0


def validation_requested() -> bool:
    return os.environ.get("HALBENCH_VULKAN_VALIDATION", "") not in ("", "0")


#: Device extensions halbench enables, by the Vulkan header version that introduced them.
_EXTENSION_HEADER = {"VK_KHR_cooperative_matrix": 255, "VK_KHR_calibrated_timestamps": 277,
                     "VK_NV_cooperative_matrix2": 301}


def unvalidated_extensions(extensions: list[str]) -> list[str]:
    """Extensions newer than the installed validation layer (empty without validation).

    A layer older than an extension cannot check its use: it reports every such extension and
    its feature structs as unknown. Under validation halbench leaves those out (the EXT form of
    calibrated timestamps stands in), so what the layer checks is everything halbench uses."""
    if not validation_requested():
        return []
    def name(p: Any) -> str:
        n = p.layerName
        return n if isinstance(n, str) else ffi.string(n).decode()

    layer = next((p for p in vk.vkEnumerateInstanceLayerProperties() if name(p) == VALIDATION_LAYER), None)
    if layer is None:
        return []
    header = layer.specVersion & 0xFFF  # VK_API_VERSION_PATCH: the layer's header version
    return [e for e in extensions if _EXTENSION_HEADER.get(e, 0) > header]


@ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT")
def _on_message(severity: int, types: int, data: Any, user: Any) -> int:
    text = ffi.string(data.pMessage).decode("utf-8", "replace") if data.pMessage else "?"
    if severity >= vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT:
        level = "error" if severity >= vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT else "warning"
        validation_messages.append(f"{level}: {text}")
        # A fixed prefix so a parent process can count them in our stderr.
        print(f"HALBENCH-VULKAN-VALIDATION {level}: {text}", file=sys.stderr, flush=True)
    return 0


def instance() -> Any:
    """The process-wide VkInstance (API 1.3), created on first use."""
    global _instance, _messenger
    with _lock:
        if _instance is not None:
            return _instance
        layers, exts, pnext = [], [], None
        if validation_requested():
            available = {p.layerName for p in vk.vkEnumerateInstanceLayerProperties()}
            if VALIDATION_LAYER not in available:
                raise DriverUnavailable("vulkan", f"HALBENCH_VULKAN_VALIDATION is set but {VALIDATION_LAYER} "
                                        "is not installed")
            layers, exts = [VALIDATION_LAYER], [vk.VK_EXT_DEBUG_UTILS_EXTENSION_NAME]
            pnext = ffi.new("VkDebugUtilsMessengerCreateInfoEXT*", {
                "sType": vk.VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                "messageSeverity": vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                "messageType": vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
                "pfnUserCallback": _on_message})
            _keep.append(pnext)
        app = vk.VkApplicationInfo(pApplicationName="halbench", applicationVersion=1, pEngineName="halbench",
                                   engineVersion=1, apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
        info = vk.VkInstanceCreateInfo(pApplicationInfo=app, ppEnabledLayerNames=layers,
                                       ppEnabledExtensionNames=exts, pNext=pnext)
        try:
            with vk_errors("vkCreateInstance"):
                inst = vk.vkCreateInstance(info, None)
        except DriverError as e:
            raise DriverUnavailable("vulkan", str(e)) from None
        if pnext is not None:
            create = instance_fn(inst, "vkCreateDebugUtilsMessengerEXT")
            out = ffi.new("VkDebugUtilsMessengerEXT*")
            check(create(inst, pnext, ffi.NULL, out), "vkCreateDebugUtilsMessengerEXT")
            _messenger = out[0]
        _instance = inst
        atexit.register(_destroy_instance)
        return inst


def _destroy_instance() -> None:
    # Destroying the instance with live devices is itself a validation error: leave it then.
    global _instance, _messenger
    if _instance is None or live_devices:
        return
    if _messenger is not None:
        instance_fn(_instance, "vkDestroyDebugUtilsMessengerEXT")(_instance, _messenger, ffi.NULL)
        _messenger = None
    lib.vkDestroyInstance(_instance, ffi.NULL)
    _instance = None


def instance_fn(inst: Any, name: str) -> Any:
    """A raw instance-level function pointer (extensions are not exported by the loader)."""
    p = lib.vkGetInstanceProcAddr(inst, name.encode())
    if p == ffi.NULL:
        raise DriverError("vulkan", "", f"the Vulkan loader has no function {name}")
    return ffi.cast("PFN_" + name, p)


def device_fn(dev: Any, name: str) -> Any:
    """A raw device-level function pointer: skips the loader's trampoline on hot paths."""
    p = lib.vkGetDeviceProcAddr(dev, name.encode())
    if p == ffi.NULL:
        raise DriverError("vulkan", "", f"the Vulkan device has no function {name}")
    return ffi.cast("PFN_" + name, p)
