"""A WebGPU device: buffers, WGSL executables, host timeline semaphores, submissions.

WebGPU has one in-order queue per device and no semaphores of its own: a submission whose
waits are not met yet is held on the host and submitted when a semaphore it waits on is
signalled (from the host, or by an earlier submission completing). Completion is observed with
wgpu-native's ``wgpuDevicePoll``, which says when the queue is empty (wgpu-py 0.32's work-done
callback does not match its wgpu-native's signature); every wait is a bounded poll.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from halbench.drivers._gpu.api import fmt_bytes, poll
from halbench.errors import DriverError, OutOfDeviceMemory, UserError
from halbench.hal import Buffer, CommandBuffer, Device, ExecutableBinary, Semaphore, Submission
from halbench.probe.info import DeviceInfo

__all__ = ["WebGpuDevice", "create_device"]

#: Features the driver asks for when the adapter has them.
_WANTED = ("timestamp-query", "timestamp-query-inside-passes", "shader-f16", "shader-int64", "subgroup")
#: Limits the driver raises to the adapter's own (WebGPU defaults are far below real GPUs).
_LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
           "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
           "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
           "max-compute-workgroups-per-dimension", "max-bindings-per-bind-group",
           "min-storage-buffer-offset-alignment", "min-uniform-buffer-offset-alignment")


def _up4(n: int) -> int:
    return (n + 3) & ~3


def wgpu_error(e: Exception, what: str, device: Any = None) -> DriverError:
    """A wgpu exception as the HAL error (the wgpu class name is the status)."""
    name = type(e).__name__
    where = f" on {device.uri}" if device is not None else ""
    text = " ".join(str(e).split())
    msg = f"{what} failed{where}: {text[:400] or name}"
    if "OutOfMemory" in name or "out of memory" in msg.lower():
        return OutOfDeviceMemory("webgpu", name, msg)
    return DriverError("webgpu", name, msg)


class WebGpuBuffer(Buffer):
    """Device memory; WebGPU sizes are multiples of 4 bytes, so the allocation is rounded up."""

    def __init__(self, device: WebGpuDevice, nbytes: int):
        super().__init__(device, nbytes)
        import wgpu

        u = wgpu.BufferUsage
        try:
            self.handle = device.wgpu.create_buffer(size=_up4(nbytes), usage=u.STORAGE | u.COPY_SRC | u.COPY_DST)
        except Exception as e:  # noqa: BLE001 - wgpu raises its own classes
            raise wgpu_error(e, f"allocating {fmt_bytes(nbytes)}", device) from None

    def _write(self, data: memoryview, offset: int) -> None:
        lo, hi = offset & ~3, _up4(offset + data.nbytes)
        if (lo, hi) != (offset, offset + data.nbytes):  # a partial word: read-modify-write it
            words = bytearray(self.device.wgpu.queue.read_buffer(self.handle, lo, hi - lo))
            words[offset - lo: offset - lo + data.nbytes] = data
            data, offset = memoryview(words), lo
        self.device.wgpu.queue.write_buffer(self.handle, offset, data)

    def _read(self, out: memoryview, offset: int) -> None:
        lo, hi = offset & ~3, _up4(offset + out.nbytes)
        data = self.device.wgpu.queue.read_buffer(self.handle, lo, hi - lo)
        out[:] = memoryview(data).cast("B")[offset - lo: offset - lo + out.nbytes]

    def _free(self) -> None:
        self.handle.destroy()


class WebGpuSemaphore(Semaphore):
    """A timeline semaphore on the host: WebGPU has none."""

    def __init__(self, device: WebGpuDevice, initial: int):
        super().__init__(device)
        self._v = initial
        self._cond = threading.Condition()

    def _value(self) -> int:
        return self._v

    def _signal(self, value: int) -> None:
        self._set(value)
        self.device._flush()

    def _set(self, value: int) -> None:
        with self._cond:
            self._v = max(self._v, value)
            self._cond.notify_all()

    def _wait(self, value: int, timeout_s: float) -> bool:
        dev = self.device
        return poll(lambda: dev._progress() or self._v >= value, timeout_s)


class WebGpuSubmission(Submission):
    def __init__(self, device: WebGpuDevice, cb: Any, waits: tuple, signals: tuple):
        super().__init__(device, cb)
        self.waits, self.signals = waits, signals
        self.finished = False

    def _ready(self) -> bool:
        return all(s._v >= v for s, v in self.waits)

    def _query_done(self) -> bool:
        self.device._progress()
        return self.finished

    def _wait(self, timeout_s: float) -> bool:
        return poll(self._query_done, timeout_s)

    def _read_profile(self) -> Any:
        return self.command_buffer._profile(self)


class WebGpuDevice(Device):
    transfer_alignment = 4

    def __init__(self, info: DeviceInfo, adapter: Any):
        super().__init__(info, info.uri)
        features = [f for f in _WANTED if f in adapter.features]
        limits = {k: v for k, v in dict(adapter.limits).items() if k in _LIMITS}
        try:
            self.wgpu = adapter.request_device_sync(required_features=features, required_limits=limits)
        except Exception as e:  # noqa: BLE001
            raise wgpu_error(e, "requesting the WebGPU device", self) from None
        self.features = frozenset(str(f) for f in self.wgpu.features)
        lim = dict(self.wgpu.limits)
        self.limits = lim
        self.binding_alignment = lim["min-storage-buffer-offset-alignment"]
        self.uniform_alignment = lim["min-uniform-buffer-offset-alignment"]
        self.max_workgroup_count = (lim["max-compute-workgroups-per-dimension"],) * 3
        self.timestamps = "timestamp-query" in self.features
        self._pending: list[WebGpuSubmission] = []  # held until their waits are met
        self._in_flight: list[WebGpuSubmission] = []
        self._queue_lock = threading.RLock()
        self._fill: Any = None  # the built-in fill kernel, made on first use

    # -- HAL hooks ----------------------------------------------------------------------
    def _allocate(self, nbytes: int, usage: str) -> Buffer:
        limit = self.limits["max-buffer-size"]
        if nbytes > limit:
            raise OutOfDeviceMemory("webgpu", "max-buffer-size",
                                    f"{fmt_bytes(nbytes)} is more than one buffer may hold on {self.uri} "
                                    f"({fmt_bytes(limit)})")
        return WebGpuBuffer(self, nbytes)

    def _load_executable(self, binary: ExecutableBinary):
        from halbench.drivers.webgpu.commands import WebGpuExecutable

        return WebGpuExecutable(self, binary)

    def _command_buffer(self, profile: bool) -> CommandBuffer:
        from halbench.drivers.webgpu.commands import WebGpuCommandBuffer

        if profile and not self.timestamps:
            raise UserError(f"{self.uri} cannot profile: its adapter has no timestamp-query feature")
        return WebGpuCommandBuffer(self, profile)

    def _semaphore(self, initial: int) -> Semaphore:
        return WebGpuSemaphore(self, initial)

    def _submit(self, cb: Any, wait: tuple, signal: tuple) -> Submission:
        sub = WebGpuSubmission(self, cb, wait, signal)
        with self._queue_lock:
            self._pending.append(sub)
        self._flush()
        return sub

    def _close(self) -> None:
        try:
            poll(lambda: not self._progress() and not self._in_flight, 10.0)
        finally:
            self.wgpu.destroy()

    # -- the queue ------------------------------------------------------------------------
    def _flush(self) -> None:
        """Submit held submissions, in order, while the first one's waits are met."""
        with self._queue_lock:
            while self._pending and self._pending[0]._ready():
                sub = self._pending.pop(0)
                try:
                    self.wgpu.queue.submit([sub.command_buffer._encode(sub)])
                except Exception as e:  # noqa: BLE001
                    raise wgpu_error(e, "submitting a command buffer", self) from None
                self._in_flight.append(sub)

    def _progress(self) -> bool:
        """Retire finished submissions (signalling their semaphores, which may submit held
        ones); returns whether anything finished."""
        done = False
        with self._queue_lock:
            if self._in_flight and _queue_empty(self.wgpu):
                for sub in self._in_flight:
                    sub.finished = done = True
                    for sem, value in sub.signals:
                        sem._set(value)
                self._in_flight.clear()
        if done:
            self._flush()
        return done

    def fill_kernel(self) -> Any:
        if self._fill is None:
            from halbench.drivers.webgpu.commands import fill_executable

            self._fill = fill_executable(self)
        return self._fill


def _queue_empty(device: Any) -> bool:
    """Whether every submission on ``device``'s queue finished (non-blocking): wgpu-native's
    ``wgpuDevicePoll(device, wait=false)`` returns exactly that. wgpu-py keeps the call private."""
    from wgpu.backends.wgpu_native._ffi import ffi, lib

    return bool(lib.wgpuDevicePoll(device._internal, False, ffi.NULL))


def create_device(driver: Any, info: DeviceInfo) -> WebGpuDevice:
    from halbench.probe.webgpu import adapters

    found = adapters()
    if info.ordinal >= len(found):
        raise UserError(f"no WebGPU adapter {info.ordinal}; this machine has {len(found)}")
    return WebGpuDevice(info, found[info.ordinal])


def words(data: np.ndarray) -> np.ndarray:
    """uint32 constants as the bytes of a uniform slot."""
    return np.ascontiguousarray(data, dtype=np.uint32)
