"""The local device: host memory buffers, ``local-v1`` executables, recorded command lists.

local-sync and local-task differ only in how a dispatch's workgroups run: all in one call on
the queue's thread, or split over a thread pool (NumPy releases the GIL in big operations).
Everything else — in-order queue, semaphores, profiling — is shared (see ``queue.py``).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from halbench.drivers.local.queue import LocalQueue, LocalSemaphore, LocalSubmission
from halbench.errors import OutOfDeviceMemory, UserError
from halbench.hal import (
    Buffer,
    BufferBinding,
    CommandBuffer,
    Device,
    EntryPoint,
    Executable,
    ExecutableBinary,
    Semaphore,
    Submission,
)
from halbench.kernels.format import FORMAT, RegisteredKernel, parse_binary

if TYPE_CHECKING:
    from halbench.hal import Driver
    from halbench.probe.info import DeviceInfo

__all__ = ["LocalDevice", "create_device"]


class LocalBuffer(Buffer):
    def __init__(self, device: LocalDevice, nbytes: int):
        super().__init__(device, nbytes)
        try:
            # Zeroed rather than np.empty: the oracle must not depend on stale memory.
            self.data: np.ndarray = np.zeros(nbytes, dtype=np.uint8)
        except MemoryError as e:
            raise OutOfDeviceMemory("local", "ENOMEM",
                                    f"out of host memory allocating {nbytes} B on {device.uri}") from e

    def _write(self, data: memoryview, offset: int) -> None:
        self.data[offset:offset + data.nbytes] = np.frombuffer(data, dtype=np.uint8)

    def _read(self, out: memoryview, offset: int) -> None:
        np.frombuffer(out, dtype=np.uint8)[...] = self.data[offset:offset + out.nbytes]

    def _free(self) -> None:
        self.data = np.zeros(0, dtype=np.uint8)


class LocalExecutable(Executable):
    def __init__(self, device: LocalDevice, binary: ExecutableBinary):
        super().__init__(device, binary)
        # Resolved once at load: an unknown kernel is refused here, not at the first dispatch.
        self.kernels: dict[str, tuple[RegisteredKernel, Any]] = {
            name: (k, MappingProxyType(attrs)) for name, (k, attrs) in parse_binary(binary).items()}


class LocalCommandBuffer(CommandBuffer):
    """A list of closures, run in order by :meth:`LocalDevice._execute`."""

    device: LocalDevice

    def __init__(self, device: LocalDevice, profile: bool):
        super().__init__(device, profile)
        self.ops: list[tuple[str, Callable[[], None]]] = []
        self.buffers: set[Buffer] = set()
        self.executables: set[Executable] = set()

    def _dispatch(self, executable: Executable, entry: EntryPoint, workgroups: tuple[int, int, int],
                  bindings: tuple[BufferBinding, ...], constants: np.ndarray) -> None:
        kernel, attrs = executable.kernels[entry.name]  # type: ignore[attr-defined]
        constants = constants.copy()
        constants.setflags(write=False)  # shared by every submission: kernels must not change it
        self.buffers.update(b.buffer for b in bindings)
        self.executables.add(executable)
        run = self.device._run_kernel

        def op() -> None:
            views = [b.buffer.data[b.offset:b.offset + b.length]  # type: ignore[attr-defined]
                     for b in bindings]
            run(kernel, views, constants, attrs, workgroups)

        self.ops.append(("dispatch", op))

    def _copy(self, src: Buffer, dst: Buffer, src_offset: int, dst_offset: int, nbytes: int) -> None:
        self.buffers.update((src, dst))

        def op() -> None:
            data = src.data[src_offset:src_offset + nbytes]  # type: ignore[attr-defined]
            dst.data[dst_offset:dst_offset + nbytes] = data  # type: ignore[attr-defined]

        self.ops.append(("copy", op))

    def _fill(self, buffer: Buffer, pattern: int, offset: int, nbytes: int) -> None:
        self.buffers.add(buffer)
        word = np.array(pattern, dtype="<u4")  # the HAL widened the pattern to a little-endian word

        def op() -> None:
            buffer.data[offset:offset + nbytes].view("<u4")[...] = word  # type: ignore[attr-defined]

        self.ops.append(("fill", op))

    # A barrier needs nothing: commands run one after another, and a dispatch returns only
    # when all its workgroups are done.


class LocalDevice(Device):
    formats = (FORMAT,)
    # 16 B like most GPUs, so that offsets which pass here pass there too, and every
    # float64 / vec4 view of a binding stays aligned.
    binding_alignment = 16
    transfer_alignment = 4

    def __init__(self, info: DeviceInfo, uri: str, threads: int):
        super().__init__(info, uri)
        self._pool = (ThreadPoolExecutor(threads, thread_name_prefix=f"halbench {uri}")
                      if threads > 1 else None)
        self._threads = threads
        self._queue = LocalQueue(self, self._execute, inline=self._pool is None)

    # -- hooks ----------------------------------------------------------------------------
    def _allocate(self, nbytes: int, usage: str) -> Buffer:
        return LocalBuffer(self, nbytes)

    def _load_executable(self, binary: ExecutableBinary) -> Executable:
        from halbench.kernels import load_builtin

        load_builtin()  # the built-in kernels a compiled bundle names (cheap after the first)
        return LocalExecutable(self, binary)

    def _command_buffer(self, profile: bool) -> CommandBuffer:
        return LocalCommandBuffer(self, profile)

    def _semaphore(self, initial: int) -> Semaphore:
        return LocalSemaphore(self, self._queue, initial)

    def _submit(self, cb: CommandBuffer, wait: tuple[tuple[Semaphore, int], ...],
                signal: tuple[tuple[Semaphore, int], ...]) -> Submission:
        # A GPU would read freed memory here; refuse it while it is still the caller's mistake.
        for b in cb.buffers:  # type: ignore[attr-defined]
            b._check_alive("a buffer used by this command buffer")
        for e in cb.executables:  # type: ignore[attr-defined]
            e._check_alive("an executable used by this command buffer")
        sub = LocalSubmission(self, cb, self._queue, wait, signal)
        self._queue.submit(sub)
        return sub

    def _close(self) -> None:
        self._queue.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    # -- execution (on the queue's thread) -----------------------------------------------
    def _execute(self, sub: LocalSubmission) -> None:
        cb: LocalCommandBuffer = sub.command_buffer  # type: ignore[assignment]
        for kind, op in cb.ops:
            if kind == "dispatch" and cb.profile:
                start = time.monotonic_ns()
                op()
                sub.dispatch_times.append((start, time.monotonic_ns()))
            else:
                op()

    def _run_kernel(self, kernel: RegisteredKernel, views: list[np.ndarray], constants: np.ndarray,
                    attrs: Any, workgroups: tuple[int, int, int]) -> None:
        total = workgroups[0] * workgroups[1] * workgroups[2]
        if self._pool is None or not kernel.parallel or total == 1:
            kernel.fn(views, constants, attrs, workgroups, range(total))
            return
        # Contiguous, nearly equal chunks, one per thread: exact results never depend on the split.
        n = min(total, self._threads)
        bounds = [total * i // n for i in range(n + 1)]
        futures = [self._pool.submit(kernel.fn, views, constants, attrs, workgroups, range(lo, hi))
                   for lo, hi in itertools.pairwise(bounds)]
        for f in futures:
            f.result()  # re-raises a kernel's exception on the queue's thread


def create_device(driver: Driver, info: DeviceInfo) -> Device:
    """A local device for ``info``: inline for local-sync, a thread pool for local-task."""
    if driver.name == "local-sync":
        threads = 1
    elif driver.name == "local-task":
        threads = max(2, os.cpu_count() or 2)
    else:
        raise UserError(f"the local device backs local-sync and local-task, not '{driver.name}'")
    return LocalDevice(info, info.uri, threads)

