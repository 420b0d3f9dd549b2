"""Semaphores, submissions and profiles on a GPU device.

A timeline semaphore is one 64-bit word of pinned, device-mapped host memory. The host reads
and writes it directly; the stream signals it with a stream write-value after the submission's
work (ordered, with a memory barrier) and waits on it with a stream wait-value (>=). So a
submission that waits for a value nobody signalled yet is queued at once and the host never
blocks in submit(); the GPU holds the stream until the host (or an earlier submission)
writes the value. Limits: the device has one in-order stream, so a submission that waits for
a value only a LATER submission signals deadlocks (it times out; Vulkan allows it).

Devices without 64-bit stream memory operations fall back to host-side state: signals are
applied when the host sees the submission's event complete, and a submission with unmet waits
(and every one after it, to keep the order) is handed to a per-device submission thread that
queues it once the values are reached (``HALBENCH_<API>_STREAM_MEMOPS=0`` forces this path).
"""

from __future__ import annotations

from typing import Any

from halbench.drivers._gpu.api import poll
from halbench.drivers._gpu.device import host_array
from halbench.hal import DEFAULT_TIMEOUT_S, DispatchTiming, Profile, Semaphore, Submission

__all__ = ["GpuSemaphore", "GpuSubmission", "submit"]


class GpuSemaphore(Semaphore):
    def __init__(self, device: Any, initial: int):
        super().__init__(device)
        self.ptr = device.api.host_alloc(8)
        self._word = host_array(self.ptr, 8, "<u8")
        self._word[0] = initial

    def _value(self) -> int:
        if not self.device.stream_memops:
            self.device._retire()
        return int(self._word[0])

    def _set(self, value: int) -> None:
        if value > int(self._word[0]):
            self._word[0] = value

    def _signal(self, value: int) -> None:
        self._word[0] = value

    def _wait(self, value: int, timeout_s: float) -> bool:
        dev = self.device
        word = self._word

        def reached() -> bool:
            if word[0] >= value:
                return True
            # A kernel fault never signals: query the stream so it surfaces as DeviceLost.
            dev._enter()
            dev.api.stream_done(dev.stream)
            if not dev.stream_memops:
                dev._retire()
            return bool(word[0] >= value)

        return poll(reached, timeout_s)

    def _release(self) -> None:
        if self.ptr:
            self.device.api.host_free(self.ptr)
            self.ptr = 0


class GpuSubmission(Submission):
    def __init__(self, device: Any, cb: Any, event: Any, t0: Any = None, t1: Any = None,
                 total_source: str = "timestamps"):
        super().__init__(device, cb)
        self._event = event
        self._t0, self._t1 = t0, t1
        self._u0 = self._u1 = None
        self._total_source = total_source
        self._pending = False  # True while the submission thread holds it back

    def _finished(self) -> bool:
        if self._pending:
            return False
        if self._event is None:
            return True
        self.device._enter()
        if not self.device.api.event_done(self._event):
            return False
        # Done: the event goes back to the pool (nothing else references it).
        self.device._give_event(self._event, False)
        self._event = None
        return True

    def _wait(self, timeout_s: float) -> bool:
        return poll(self._finished, timeout_s)

    def _query_done(self) -> bool:
        self.device._check_open()
        return self._finished()

    def _read_profile(self) -> Profile:
        dev = self.device
        dev._enter()
        api = dev.api
        ref, ref_host, deviation = dev.clock_reference()

        def host_ns(event: Any) -> int:
            return ref_host + round(api.event_elapsed_ms(ref, event) * 1e6)

        start_ns = host_ns(self._t0)
        entries = self.command_buffer.dispatch_entries
        timings = []
        for i, (s, e) in enumerate(self.command_buffer.dispatch_events):
            # Offsets from this submission's own start event keep the float milliseconds small.
            s_ns = start_ns + round(api.event_elapsed_ms(self._t0, s) * 1e6)
            e_ns = start_ns + round(api.event_elapsed_ms(self._t0, e) * 1e6)
            timings.append(DispatchTiming(i, entries[i], s_ns, e_ns))
        total = round(api.event_elapsed_ms(self._t0, self._t1) * 1e6)
        end_ns = start_ns + total
        if self._total_source == "unprofiled":
            total = round(api.event_elapsed_ms(self._u0, self._u1) * 1e6)
        profile = Profile(tuple(timings), start_ns, end_ns, total, self._total_source, True, deviation,
                          self.host_submit_ns, self.host_done_ns)
        for ev in (self._t0, self._t1, getattr(self, "_u0", None), getattr(self, "_u1", None)):
            if ev is not None:
                dev._give_event(ev, True)
        self._t0 = self._t1 = self._u0 = self._u1 = None
        if self.command_buffer.inflight_profiled is self:
            self.command_buffer.inflight_profiled = None
        return profile


def submit(device: Any, cb: Any, wait: tuple, signal: tuple) -> GpuSubmission:
    """Queue ``cb`` on the device's stream behind ``wait`` and ahead of ``signal``; never blocks
    on an unmet wait (see the module docstring)."""
    if cb.profile and cb.inflight_profiled is not None:
        # The dispatch events belong to the command buffer: read the previous run's times
        # before this run records over them.
        prev = cb.inflight_profiled
        prev.wait(DEFAULT_TIMEOUT_S)
        prev.profile()
    sub = GpuSubmission(device, cb, None)
    if cb.profile:
        cb.inflight_profiled = sub
    with device._submit_lock:  # the stream is shared: each submission's calls stay together
        if device.stream_memops or not (device._deferred or any(s._value() < v for s, v in wait)):
            _enqueue(device, cb, wait, signal, sub)
        else:
            # Host-side waits: the device's submission thread queues this (and everything
            # submitted after it, to keep the order) once the values are reached.
            sub._pending = True
            device._defer(wait, lambda: _enqueue(device, cb, (), signal, sub))
    return sub


def _enqueue(device: Any, cb: Any, wait: tuple, signal: tuple, sub: GpuSubmission) -> None:
    api, stream = device.api, device.stream
    for sem, value in wait:
        api.stream_wait_value64(stream, sem.ptr, value)
    if cb.profile:
        if not cb.dispatch_times:
            sub._total_source = "total"  # the graph has no events of its own: t0 and t1 time it whole
        elif device.unprofiled_total and device.use_graphs and cb.ops:
            sub._u0, sub._u1 = device._take_event(True), device._take_event(True)
            api.event_record(sub._u0, stream)
            api.graph_launch(cb.unprofiled(), stream)
            api.event_record(sub._u1, stream)
            sub._total_source = "unprofiled"
        sub._t0, sub._t1 = device._take_event(True), device._take_event(True)
        api.event_record(sub._t0, stream)
    cb.enqueue(stream)
    if sub._t1 is not None:
        api.event_record(sub._t1, stream)
    done = device._take_event(False)
    if signal and device.stream_memops:
        for sem, value in signal:
            api.stream_write_value64(stream, sem.ptr, value)
    api.event_record(done, stream)
    if signal and not device.stream_memops:
        signal_event = device._take_event(False)
        api.event_record(signal_event, stream)
        device._pending_signals.append((signal_event, signal))
    sub._event = done
    sub._pending = False
