"""The adapter contract between the shared GPU driver and one API (CUDA or HIP).

An adapter wraps the API's module and exposes the few operations the shared driver needs,
each returning plain Python values (ints for pointers) and raising through ``check()``:
never a raw status code. Handles (streams, events, graphs, functions) are the binding's own
objects and are passed back unchanged.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from halbench.errors import DeviceLost, DriverError, OutOfDeviceMemory, WaitTimeout

__all__ = ["GpuApi", "fmt_bytes", "poll"]


def fmt_bytes(n: int) -> str:
    """``2.0 GiB`` — sizes in messages, the way users read them."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def poll(ready: Callable[[], bool], timeout_s: float, spin_s: float = 200e-6) -> bool:
    """Call ``ready()`` until it is true or ``timeout_s`` passes: spin first (a GPU round trip
    is microseconds, and sleeping costs ~50 us of latency), then back off to 1 ms sleeps so a
    long wait does not burn a core. Returns whether it became ready."""
    if ready():
        return True
    start = time.perf_counter()
    spin_until = start + min(spin_s, timeout_s)
    deadline = start + timeout_s
    while time.perf_counter() < spin_until:
        if ready():
            return True
    delay = 10e-6
    while True:
        if ready():
            return True
        now = time.perf_counter()
        if now >= deadline:
            return ready()
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, 1e-3)


class GpuApi(ABC):
    """One GPU API as the shared driver sees it. Subclasses: CudaApi, HipApi."""

    #: The API's name in errors ("cuda", "hip") and the driver name.
    name: str = ""
    #: Statuses that mean the context is dead (a kernel faulted): the device is lost.
    lost_statuses: frozenset[str] = frozenset()
    oom_statuses: frozenset[str] = frozenset()
    not_ready_status: str = ""

    # -- errors -----------------------------------------------------------------------
    @abstractmethod
    def status_name(self, status: Any) -> str: ...

    @abstractmethod
    def status_string(self, status: Any) -> str: ...

    def error(self, status: Any, what: str, device: Any = None) -> DriverError:
        """The HAL error for a failed call; marks ``device`` lost on a sticky fault."""
        name = self.status_name(status)
        msg = f"{self.status_string(status)} ({what})" if what else self.status_string(status)
        if name in self.lost_statuses:
            if device is not None and not device.lost:
                device.lost = f"{name}: {msg}"
            return DeviceLost(self.name, name, msg)
        if name in self.oom_statuses:
            return OutOfDeviceMemory(self.name, name, msg)
        return DriverError(self.name, name, msg)

    def _done(self, status: Any, what: str) -> bool:
        """A query's status: True when done, False when not ready, else the error. Adapters set
        ``_ok``, ``_not_ready``, ``owner`` and ``_where()``."""
        if status == self._ok:
            return True
        if status == self._not_ready:
            return False
        raise self.error(status, f"{what}{self._where()}", self.owner)

    # -- device and context -----------------------------------------------------------
    @abstractmethod
    def device_count(self) -> int: ...

    @abstractmethod
    def open(self, ordinal: int) -> Any:
        """Retain the device's primary context; return a handle ``make_current`` takes."""

    @abstractmethod
    def close(self, ctx: Any) -> None: ...

    @abstractmethod
    def make_current(self, ctx: Any) -> None: ...

    @abstractmethod
    def attribute(self, ordinal: int, name: str) -> int:
        """A device attribute by its short name (``MAX_GRID_DIM_X``, ``COMPUTE_CAPABILITY_MAJOR``)."""

    @abstractmethod
    def arch(self, ordinal: int) -> str:
        """``sm_90`` / ``gfx942``."""

    @abstractmethod
    def supports_stream_memops(self, ordinal: int) -> bool:
        """Whether 64-bit stream wait/write value works (device-side semaphore waits)."""

    # -- memory -----------------------------------------------------------------------
    @abstractmethod
    def mem_alloc(self, nbytes: int) -> int: ...

    @abstractmethod
    def mem_free(self, ptr: int) -> None: ...

    @abstractmethod
    def host_alloc(self, nbytes: int) -> int:
        """Pinned, device-mapped host memory; with unified addressing the pointer is the same on
        both sides (needed for stream wait/write value on semaphore words)."""

    @abstractmethod
    def host_free(self, ptr: int) -> None: ...

    @abstractmethod
    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None: ...

    @abstractmethod
    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None: ...

    @abstractmethod
    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None: ...

    @abstractmethod
    def memset_d32_async(self, dst: int, word: int, count: int, stream: Any) -> None: ...

    # -- streams and events -----------------------------------------------------------
    @abstractmethod
    def stream_create(self) -> Any: ...

    @abstractmethod
    def stream_destroy(self, stream: Any) -> None: ...

    @abstractmethod
    def stream_done(self, stream: Any) -> bool:
        """cuStreamQuery: True when idle, False when busy; raises on a sticky error."""

    @abstractmethod
    def stream_wait_value64(self, stream: Any, ptr: int, value: int) -> None:
        """The stream waits until ``*(uint64*)ptr >= value``."""

    @abstractmethod
    def stream_write_value64(self, stream: Any, ptr: int, value: int) -> None:
        """Write ``value`` once all earlier work in the stream finished (with a memory barrier)."""

    @abstractmethod
    def event_create(self, timing: bool) -> Any: ...

    @abstractmethod
    def event_destroy(self, event: Any) -> None: ...

    @abstractmethod
    def event_record(self, event: Any, stream: Any) -> None: ...

    @abstractmethod
    def event_done(self, event: Any) -> bool:
        """True when reached, False when not yet; raises on a sticky error."""

    @abstractmethod
    def event_elapsed_ms(self, start: Any, end: Any) -> float: ...

    # -- executables ------------------------------------------------------------------
    @abstractmethod
    def module_load(self, image: bytes, jit: bool) -> Any:
        """Load a binary (or JIT text when ``jit``); errors carry the JIT log."""

    @abstractmethod
    def module_unload(self, module: Any) -> None: ...

    @abstractmethod
    def module_function(self, module: Any, name: str) -> Any | None:
        """The kernel ``name``, or None when the module has none."""

    @abstractmethod
    def function_max_threads(self, function: Any) -> int: ...

    @abstractmethod
    def function_static_shared(self, function: Any) -> int:
        """Bytes of static ``__shared__`` memory the kernel declares."""

    def function_resources(self, function: Any) -> dict[str, int]:
        """Registers per thread, static shared, local (spill / stack) and constant bytes of a
        kernel, as the driver's function attributes give them (empty where it gives none)."""
        return {}

    def occupancy_blocks(self, function: Any, threads: int, dynamic_shared: int) -> int | None:
        """Blocks of ``threads`` that fit on one multiprocessor at once (None: not known)."""
        return None

    @abstractmethod
    def function_allow_dynamic_shared(self, function: Any, nbytes: int) -> None:
        """Opt the kernel in to ``nbytes`` of dynamic shared memory (needed past 48 KiB)."""

    @abstractmethod
    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               params_ptr: int, stream: Any, shared_bytes: int = 0) -> None:
        """Launch with a prepared ``void**`` parameter array at ``params_ptr`` and
        ``shared_bytes`` of dynamic shared memory."""

    # -- graphs -----------------------------------------------------------------------
    @abstractmethod
    def graph_create(self) -> Any: ...

    @abstractmethod
    def graph_destroy(self, graph: Any) -> None: ...

    @abstractmethod
    def graph_add_kernel(self, graph: Any, deps: list[Any], function: Any, grid: tuple[int, int, int],
                         block: tuple[int, int, int], params_ptr: int, shared_bytes: int = 0,
                         programmatic: bool = False) -> Any: ...

    def programmatic_edges(self) -> bool:
        """Whether graph_add_kernel can make its edges programmatic (a dependent launch)."""
        return False

    @abstractmethod
    def graph_add_copy(self, graph: Any, deps: list[Any], dst: int, src: int, nbytes: int,
                       ctx: Any) -> Any: ...

    @abstractmethod
    def graph_add_fill(self, graph: Any, deps: list[Any], dst: int, word: int, count: int,
                       ctx: Any) -> Any: ...

    @abstractmethod
    def graph_add_empty(self, graph: Any, deps: list[Any]) -> Any: ...

    @abstractmethod
    def graph_add_event_record(self, graph: Any, deps: list[Any], event: Any) -> Any: ...

    @abstractmethod
    def graph_instantiate(self, graph: Any) -> Any: ...

    @abstractmethod
    def graph_exec_destroy(self, graph_exec: Any) -> None: ...

    @abstractmethod
    def graph_launch(self, graph_exec: Any, stream: Any) -> None: ...

    # -- helpers for the shared driver -------------------------------------------------
    def wait_event(self, event: Any, timeout_s: float, what: str) -> None:
        """Poll an event to completion (never an unbounded synchronize)."""
        if not poll(lambda: self.event_done(event), timeout_s):
            raise WaitTimeout(f"{self.name}: {what} did not finish within {timeout_s} s")
