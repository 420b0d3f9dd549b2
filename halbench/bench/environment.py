"""Readings of the device's environment around a benchmark: clocks, temperature, throttling.

NVIDIA GPUs are read through nvidia-ml-py (NVML), matched by UUID. halbench only reads: it
never changes clocks or power settings. Devices NVML does not know give an empty reading.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

__all__ = ["device_entry", "read_environment"]

# NVML clock-event (throttle) reason bits -> names, from nvml.h.
_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}


@lru_cache(maxsize=1)
def _nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no NVML library or no NVIDIA driver: nothing to read
        return None


def read_environment(info: Any) -> dict[str, Any]:
    """A reading for the device described by ``info`` (a DeviceInfo), or {} when none exists."""
    uuid = getattr(info.identity, "uuid", None)
    vendor_id = getattr(info.identity, "vendor_id", None)
    is_nvidia = info.driver == "cuda" or vendor_id == 0x10DE
    if not uuid or not is_nvidia:
        return {}
    nv = _nvml()
    if nv is None:
        return {}
    try:
        h = nv.nvmlDeviceGetHandleByUUID(uuid)
        reading: dict[str, Any] = {
            "sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            "temperature_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        }
        try:
            reading["power_w"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
        except Exception:  # noqa: S110, BLE001 - a power reading is optional (not every board reports it)
            pass
        get_reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        bits = int(get_reasons(h))
        reading["throttle_reasons"] = [name for bit, name in _REASONS.items() if bits & bit]
        return reading
    except Exception as e:  # noqa: BLE001 - a reading must never fail a benchmark
        return {"error": f"NVML: {e}"}


def device_entry(info: Any) -> dict[str, Any]:
    """The stored DeviceInfo plus the vendor's published peaks (rooflines' dashed ceilings)."""
    d = info.to_dict()
    try:
        from halbench.compiler.targets import published_peaks
    except ImportError:  # a machine without the compiler extra
        return d
    peaks = published_peaks(info)
    if peaks:
        d["published_peaks"] = peaks
    return d
