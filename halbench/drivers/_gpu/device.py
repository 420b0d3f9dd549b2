"""The shared GPU device: primary context, one in-order stream, buffers with pinned staging."""

from __future__ import annotations

import collections
import ctypes
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from halbench.arch import is_sm, parse_sm
from halbench.drivers._gpu.api import GpuApi, fmt_bytes, poll
from halbench.errors import DriverError, UserError
from halbench.hal import (
    DEFAULT_TIMEOUT_S,
    Buffer,
    CommandBuffer,
    Device,
    ExecutableBinary,
    Semaphore,
    Submission,
)

__all__ = ["GpuBuffer", "GpuDevice", "host_array"]

#: Staging grows up to this; larger transfers go through it in chunks.
_STAGING_MAX = 64 << 20
#: Which context each thread made current last, so a call costs no cuCtxSetCurrent when it
#: is already current (the HAL may be called from any thread: each one needs it once).
_tls = threading.local()


def host_array(ptr: int, nbytes: int, dtype: Any = np.uint8) -> np.ndarray:
    """A NumPy view of ``nbytes`` of host memory at ``ptr`` (pinned memory the API owns)."""
    return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=dtype)


def _env_flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    return default if v is None else v.strip().lower() not in ("0", "false", "no", "off", "")


def _shared_limit(api: GpuApi, ordinal: int) -> int:
    """The opt-in per-block shared memory limit, else the plain one (an API without the opt-in
    attribute has no opt-in)."""
    try:
        optin = api.attribute(ordinal, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    except (DriverError, AttributeError, KeyError):
        optin = 0
    return optin or api.attribute(ordinal, "MAX_SHARED_MEMORY_PER_BLOCK")


#: cuEventElapsedTime resolves about half a microsecond.
_EVENT_RESOLUTION_NS = 500.0

class GpuBuffer(Buffer):
    def __init__(self, device: GpuDevice, nbytes: int, ptr: int):
        super().__init__(device, nbytes)
        self.ptr = ptr

    def _write(self, data: memoryview, offset: int) -> None:
        self.device._transfer(self.ptr + offset, np.frombuffer(data, np.uint8), to_device=True)

    def _read(self, out: memoryview, offset: int) -> None:
        self.device._transfer(self.ptr + offset, np.frombuffer(out, np.uint8), to_device=False)

    def _free(self) -> None:
        self.device._enter()
        self.device.api.mem_free(self.ptr)

    def _device_address(self) -> int:
        return self.ptr


class GpuDevice(Device):
    """A device of a GpuApi: everything the cuda and hip drivers do, once.

    ``use_graphs``: submit command buffers as graph replays (default) or as individual stream
    launches (``HALBENCH_<API>_GRAPHS=0``; the benchmarks compare both).
    ``dependent_launch``: kernels that wait for their predecessors themselves
    (EntryPoint.dependent_launch) are launched programmatically after a kernel they depend on
    (``HALBENCH_<API>_DEPENDENT_LAUNCH=0``: never), also after a level of several such kernels
    (``programmatic_joins``).
    ``unprofiled_total``: with profiling on, also replay an event-free graph per submission and
    report its time as ``Profile.total_ns`` (``total_source="unprofiled"``). Off by default: the
    work then runs twice, which only suits command buffers whose result does not depend on how
    often they run (``HALBENCH_<API>_UNPROFILED_TOTAL=1``).
    """

    binding_alignment = 16
    transfer_alignment = 4
    dynamic_shared_memory = True

    def __init__(self, info: Any, uri: str, api: GpuApi, ordinal: int, formats: tuple[str, ...]):
        super().__init__(info, uri)
        self.api = api
        api.owner = self
        self.ordinal = ordinal
        self.formats = formats  # the driver's (Driver.formats)
        prefix = f"HALBENCH_{api.name.upper()}_"
        self.use_graphs = _env_flag(prefix + "GRAPHS", True)
        self.unprofiled_total = _env_flag(prefix + "UNPROFILED_TOTAL", False)
        self.ctx = api.open(ordinal)
        _tls.ctx = self.ctx
        self.arch = api.arch(ordinal)
        #: Kernels marked EntryPoint.dependent_launch follow a kernel they depend on through a
        #: programmatic graph edge (CUDA on sm_90 and later, where griddepcontrol exists; the flag
        #: of a bundle's kernel is not trusted on an older GPU); ``HALBENCH_<API>_DEPENDENT_LAUNCH=0``:
        #: plain edges, each kernel launched after its predecessor completes.
        self.dependent_launch = (api.programmatic_edges() and is_sm(self.arch) and parse_sm(self.arch).major >= 9
                                 and _env_flag(prefix + "DEPENDENT_LAUNCH", True))
        #: Where a few such kernels share a level (between two barriers), the kernels after the
        #: barrier follow all of them through programmatic edges instead of an empty join node
        #: (``HALBENCH_<API>_PROGRAMMATIC_JOINS=0``: the empty node, dependent launch ending there).
        self.programmatic_joins = _env_flag(prefix + "PROGRAMMATIC_JOINS", True)
        self.max_workgroup_count = tuple(api.attribute(ordinal, f"MAX_GRID_DIM_{a}") for a in "XYZ")
        self.max_workgroup_size = tuple(api.attribute(ordinal, f"MAX_BLOCK_DIM_{a}") for a in "XYZ")
        #: Shared memory one workgroup may use, static plus dynamic, with the kernel opted in.
        self.shared_memory_limit = _shared_limit(api, ordinal)
        # Device-side semaphore waits need 64-bit stream memory operations; without them a
        # submission's unmet waits are waited for on the host (bounded) before it is queued.
        self.stream_memops = api.supports_stream_memops(ordinal) and _env_flag(prefix + "STREAM_MEMOPS", True)
        self.stream = api.stream_create()  # every submission, in order
        self._transfer_stream = api.stream_create()  # buffer read/write: never behind a blocked wait
        self._calib_stream = api.stream_create()  # always idle: its events mark "now" on the GPU
        self._staging_ptr = 0
        self._staging_size = 0
        self._staging_lock = threading.Lock()
        self._events: dict[bool, list[Any]] = {False: [], True: []}
        self._transfer_event = api.event_create(False)
        self._clock: tuple[Any, int, float, float] | None = None  # (event, host ns, deviation, taken at)
        self._pending_signals: list[tuple[Any, tuple]] = []  # without memops: (event, signals)
        self._semaphores: list[Any] = []
        self._command_buffers: set[Any] = set()
        self._submit_lock = threading.RLock()
        self._deferred: collections.deque[tuple[tuple, Callable[[], None]]] = collections.deque()
        self._worker: threading.Thread | None = None

    # -- context ----------------------------------------------------------------------
    def _enter(self) -> None:
        """Make the primary context current on the calling thread (cheap when it already is)."""
        if getattr(_tls, "ctx", None) is not self.ctx:
            self.api.make_current(self.ctx)
            _tls.ctx = self.ctx

    # -- events (pooled: creating one per submission costs more than the submission) ----
    def _take_event(self, timing: bool) -> Any:
        pool = self._events[timing]
        return pool.pop() if pool else self.api.event_create(timing)

    def _give_event(self, event: Any, timing: bool) -> None:
        self._events[timing].append(event)

    # -- hooks ------------------------------------------------------------------------
    def _allocate(self, nbytes: int, usage: str) -> Buffer:
        self._enter()
        return GpuBuffer(self, nbytes, self.api.mem_alloc(nbytes))

    def _load_executable(self, binary: ExecutableBinary):
        from halbench.drivers._gpu.executable import GpuExecutable

        self._enter()
        return GpuExecutable(self, binary)

    def _command_buffer(self, profile: bool) -> CommandBuffer:
        from halbench.drivers._gpu.command_buffer import GpuCommandBuffer

        cb = GpuCommandBuffer(self, profile)
        self._command_buffers.add(cb)
        return cb

    def _semaphore(self, initial: int) -> Semaphore:
        from halbench.drivers._gpu.sync import GpuSemaphore

        self._enter()
        sem = GpuSemaphore(self, initial)
        self._semaphores.append(sem)
        return sem

    def _submit(self, cb: Any, wait: tuple, signal: tuple) -> Submission:
        from halbench.drivers._gpu.sync import submit

        self._enter()
        return submit(self, cb, wait, signal)

    # -- transfers --------------------------------------------------------------------
    def _staging(self, nbytes: int) -> tuple[int, int]:
        want = min(max(nbytes, 1 << 20), _STAGING_MAX)
        if self._staging_size < want:
            if self._staging_ptr:
                self.api.host_free(self._staging_ptr)
                self._staging_ptr = 0
            self._staging_ptr = self.api.host_alloc(want)
            self._staging_size = want
        return self._staging_ptr, self._staging_size

    def _transfer(self, dptr: int, host: np.ndarray, to_device: bool) -> None:
        """Copy through pinned staging on the transfer stream and wait (bounded) for it."""
        self._enter()
        with self._staging_lock:
            sptr, ssize = self._staging(host.nbytes)
            staging = host_array(sptr, ssize)
            for start in range(0, host.nbytes, ssize):
                n = min(ssize, host.nbytes - start)
                if to_device:
                    staging[:n] = host[start:start + n]
                    self.api.memcpy_htod_async(dptr + start, sptr, n, self._transfer_stream)
                else:
                    self.api.memcpy_dtoh_async(sptr, dptr + start, n, self._transfer_stream)
                self.api.event_record(self._transfer_event, self._transfer_stream)
                self.api.wait_event(self._transfer_event, DEFAULT_TIMEOUT_S,
                                    f"copying {fmt_bytes(n)} {'to' if to_device else 'from'} {self.uri}")
                if not to_device:
                    host[start:start + n] = staging[:n]

    # -- host clock -------------------------------------------------------------------
    def clock_reference(self) -> tuple[Any, int, float]:
        """(event, host CLOCK_MONOTONIC ns, deviation ns): an event on an idle stream is
        stamped as soon as it is recorded, so its time lies between the host clock before the
        record and after it completes. The tightest of three tries is kept. The device clock
        drifts against the host's by microseconds per second (seen on an H100: a 5 s old
        reference put a dispatch 4 us before its submission), so the reference is re-taken when
        older than 50 ms; the deviation adds the events' 0.5 us resolution."""
        if self._clock is None or time.monotonic() - self._clock[3] > 0.05:
            best = None
            for _ in range(3):
                ev = self._take_event(True)
                h0 = time.monotonic_ns()
                self.api.event_record(ev, self._calib_stream)
                self.api.wait_event(ev, DEFAULT_TIMEOUT_S, "calibrating the clock")
                h1 = time.monotonic_ns()
                if best is None or h1 - h0 < best[2] * 2:
                    if best is not None:
                        self._give_event(best[0], True)
                    best = (ev, (h0 + h1) // 2, (h1 - h0) / 2 + _EVENT_RESOLUTION_NS)
                else:
                    self._give_event(ev, True)
            if self._clock is not None:
                self._give_event(self._clock[0], True)
            self._clock = (*best, time.monotonic())
        return self._clock[:3]

    # -- semaphores without stream memops --------------------------------------------
    def _retire(self) -> None:
        """Apply the signals of finished submissions (host-side semaphores only)."""
        with self._submit_lock:
            self._enter()
            while self._pending_signals and self.api.event_done(self._pending_signals[0][0]):
                event, signals = self._pending_signals.pop(0)
                for sem, value in signals:
                    sem._set(value)
                self._give_event(event, False)

    def _defer(self, waits: tuple, job: Callable[[], None]) -> None:
        """Hand a submission to the submission thread (called with _submit_lock held)."""
        self._deferred.append((waits, job))
        if self._worker is None:
            self._worker = threading.Thread(target=self._submission_thread, daemon=True,
                                            name=f"halbench-submit-{self.uri}")
            self._worker.start()

    def _submission_thread(self) -> None:
        # Waits while the device is open; each Submission.wait() keeps its own timeout.
        while not self.closed and not self.lost:
            with self._submit_lock:
                if not self._deferred:
                    self._worker = None
                    return
                waits, job = self._deferred[0]
            if all(sem._value() >= v for sem, v in waits):
                with self._submit_lock:
                    self._enter()
                    try:
                        job()
                    except DriverError:
                        pass  # the device is lost: its submissions never finish
                    self._deferred.popleft()
            else:
                time.sleep(50e-6)

    # -- closing ----------------------------------------------------------------------
    def wait_idle(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
        """Poll until every submission finished; False after ``timeout_s``."""
        self._enter()
        return poll(lambda: self.api.stream_done(self.stream), timeout_s)

    def close(self) -> None:
        # Wait for the GPU before the base class frees buffers that queued work may still use.
        with self._submit_lock:
            self._deferred.clear()  # held-back submissions are dropped, not run after close
        if not self.closed and not self.lost:
            try:
                if not self.wait_idle(10.0):
                    # A submission waits on a semaphore nobody will signal: release it so the
                    # stream drains instead of holding the GPU after we are gone.
                    for sem in self._semaphores:
                        sem._set(1 << 62)
                    self.wait_idle(10.0)
            except DriverError:
                pass
        super().close()

    def _close(self) -> None:
        api = self.api
        self._safely(self._enter)
        for cb in list(self._command_buffers):
            self._safely(cb.release)
        self._command_buffers.clear()
        from halbench.drivers._gpu.executable import release_modules

        self._safely(lambda: release_modules(self))
        for sem in self._semaphores:
            self._safely(sem._release)
        for pool in self._events.values():
            for ev in pool:
                self._safely(lambda ev=ev: api.event_destroy(ev))
            pool.clear()
        self._safely(lambda: api.event_destroy(self._transfer_event))
        if self._staging_ptr:
            self._safely(lambda: api.host_free(self._staging_ptr))
        for s in (self.stream, self._transfer_stream, self._calib_stream):
            self._safely(lambda s=s: api.stream_destroy(s))
        self._safely(lambda: api.close(self.ctx))
        _tls.ctx = None

    @staticmethod
    def _safely(fn: Callable[[], Any]) -> None:
        # Closing releases what it can; a lost device fails every call and must still close.
        try:
            fn()
        except (DriverError, UserError):
            pass
