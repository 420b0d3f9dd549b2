"""Device timestamps -> host CLOCK_MONOTONIC nanoseconds.

Ticks become nanoseconds through timestampPeriod. VK_KHR/EXT_calibrated_timestamps samples the
device counter and CLOCK_MONOTONIC together; we take several samples and keep the one with the
smallest maximum deviation, once per profiled submission (clocks drift). Counters with fewer
than 64 valid bits wrap: ticks are masked and unwrapped relative to the calibration point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from halbench.drivers.vulkan._vk import check, device_fn, ffi, instance, instance_fn, vk
from halbench.hal import DispatchTiming, Profile

if TYPE_CHECKING:
    from halbench.drivers.vulkan.device import VulkanDevice

__all__ = ["PROBES", "Clock"]

#: Calibration samples per submission; the one with the smallest deviation wins.
PROBES = 5
_DEVICE = vk.VK_TIME_DOMAIN_DEVICE_KHR
_MONOTONIC = vk.VK_TIME_DOMAIN_CLOCK_MONOTONIC_KHR
# VK_KHR_calibrated_timestamps kept the EXT's structure type; the binding's KHR value is wrong.
_INFO_STYPE = 1000184000


class Clock:
    """Converts one queue's timestamps; ``calibrated`` tells whether host mapping is possible."""

    def __init__(self, device: VulkanDevice, valid_bits: int):
        self.device = device
        self.period_ns = float(device.physical.limits.timestampPeriod)
        self.bits = valid_bits
        self.mask = (1 << valid_bits) - 1 if 0 < valid_bits < 64 else (1 << 64) - 1
        self._fn = None
        ext = next((e for e in ("VK_KHR_calibrated_timestamps", "VK_EXT_calibrated_timestamps")
                    if e in device.extensions), None)
        if ext and device.options.get("calibrate", True):
            suffix = ext.split("_")[1]  # KHR / EXT
            if {_DEVICE, _MONOTONIC} <= set(self._domains(suffix)):
                self._fn = device_fn(device.handle, f"vkGetCalibratedTimestamps{suffix}")
                self._infos = ffi.new("VkCalibratedTimestampInfoKHR[2]", [
                    {"sType": _INFO_STYPE, "timeDomain": d}
                    for d in (_DEVICE, _MONOTONIC)])
                self._stamps = ffi.new("uint64_t[2]")
                self._dev = ffi.new("uint64_t*")

    def _domains(self, suffix: str) -> list[int]:
        pd = self.device.physical.handle
        fn = instance_fn(instance(), f"vkGetPhysicalDeviceCalibrateableTimeDomains{suffix}")
        n = ffi.new("uint32_t*")
        check(fn(pd, n, ffi.NULL), "vkGetPhysicalDeviceCalibrateableTimeDomains")
        out = ffi.new("VkTimeDomainKHR[]", n[0])
        check(fn(pd, n, out), "vkGetPhysicalDeviceCalibrateableTimeDomains")
        return [out[i] for i in range(n[0])]

    @property
    def calibrated(self) -> bool:
        return self._fn is not None

    def calibrate(self) -> tuple[int, int, int]:
        """(device ticks, host ns, max deviation ns) of the best of PROBES samples."""
        best = None
        for _ in range(PROBES):
            check(self._fn(self.device.handle, 2, self._infos, self._stamps, self._dev),
                  "vkGetCalibratedTimestamps", self.device)
            sample = (self._stamps[0], self._stamps[1], self._dev[0])
            if best is None or sample[2] < best[2]:
                best = sample
        return best  # type: ignore[return-value]

    def _delta(self, tick: int, ref: int) -> int:
        """Signed ticks from ``ref`` to ``tick`` on a counter that wraps after ``bits`` bits."""
        d = (tick - ref) & self.mask
        if self.bits < 64 and d >= 1 << (self.bits - 1):
            d -= 1 << self.bits
        elif self.bits >= 64 and d >= 1 << 63:
            d -= 1 << 64
        return d

    def profile(self, ticks: Sequence[int], entries: Sequence[str], host_submit_ns: int,
                host_done_ns: int, source: str = "timestamps") -> Profile:
        """``ticks``: [begin, end, start0, end0, start1, end1, ...] as the query pool holds them."""
        if self._fn is not None:
            ref_tick, ref_ns, deviation = self.calibrate()
            ref_tick &= self.mask
            calibrated = True
        else:
            # No common clock: keep durations exact and end the submission when the host saw it end.
            ref_tick = ticks[1] & self.mask
            ref_ns, deviation, calibrated = host_done_ns, None, False
        p = self.period_ns

        def ns(t: int) -> int:
            return ref_ns + round(self._delta(t & self.mask, ref_tick) * p)

        dispatches = tuple(DispatchTiming(i, e, ns(ticks[2 + 2 * i]), ns(ticks[3 + 2 * i]))
                           for i, e in enumerate(entries))
        start, end = ns(ticks[0]), ns(ticks[1])
        return Profile(dispatches, start, end, end - start, source, calibrated,
                       float(deviation) if deviation is not None else None, host_submit_ns, host_done_ns)
