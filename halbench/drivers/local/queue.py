"""The local drivers' queue: timeline semaphores and in-order submissions.

One queue per device, one condition variable guarding it and every semaphore of the device,
so a host signal, a finished submission and a waiting submission all see one consistent
state. Submissions run one at a time in submission order, as on a GPU queue (a submission
whose waits are not met holds back the ones after it, like a CUDA stream or a Vulkan queue):

- ``inline=True`` (local-sync): a submission that is ready when submitted, with nothing
  queued before it, runs right away on the submitting thread;
- otherwise it waits in the queue and the device's single worker thread runs it once its
  waits are met. ``submit`` never blocks on a wait semaphore.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from halbench.errors import DeviceLost, DriverError, UserError
from halbench.hal import CommandBuffer, DispatchTiming, Profile, Semaphore, Submission

if TYPE_CHECKING:
    from halbench.hal import Device

__all__ = ["LocalQueue", "LocalSemaphore", "LocalSubmission"]

SemValues = tuple[tuple[Semaphore, int], ...]

#: How long close() waits for the submission in flight before abandoning the rest.
_CLOSE_TIMEOUT_S = 60.0


class LocalSemaphore(Semaphore):
    def __init__(self, device: Device, queue: LocalQueue, initial: int):
        super().__init__(device)
        self._queue = queue
        self._v = initial
        #: Set when a submission that was to signal this semaphore failed (IREE's semantics):
        #: waiters then fail with that error instead of waiting for their timeout.
        self.failure: BaseException | None = None

    def _value(self) -> int:
        return self._v

    def _signal(self, value: int) -> None:
        self._queue.signal(((self, value),), from_host=True)

    def _wait(self, value: int, timeout_s: float) -> bool:
        ok = self._queue.wait_for(lambda: self._v >= value or self.failure is not None, timeout_s)
        if self._v < value and self.failure is not None:
            raise _failed(self.device, self.failure)
        return ok


class LocalSubmission(Submission):
    def __init__(self, device: Device, cb: CommandBuffer, queue: LocalQueue,
                 waits: SemValues, signals: SemValues):
        super().__init__(device, cb)
        self._queue = queue
        self.waits = waits
        self.signals = signals
        self.finished = False
        self.error: BaseException | None = None
        self.dispatch_times: list[tuple[int, int]] = []
        self.start_ns = self.end_ns = 0

    def ready(self) -> bool:
        return all(sem._v >= v for sem, v in self.waits)  # type: ignore[attr-defined]

    def upstream_failure(self) -> BaseException | None:
        """The error of a failed submission this one waits on (it then fails too)."""
        for sem, v in self.waits:
            if sem._v < v and sem.failure is not None:  # type: ignore[attr-defined]
                return sem.failure  # type: ignore[attr-defined]
        return None

    def _wait(self, timeout_s: float) -> bool:
        done = self._queue.wait_for(lambda: self.finished, timeout_s)
        if self.error is not None:
            raise _failed(self.device, self.error)
        return done

    def _query_done(self) -> bool:
        return self.finished

    def _read_profile(self) -> Profile:
        entries = self.command_buffer.dispatch_entries
        dispatches = tuple(DispatchTiming(i, entries[i], start, end)
                           for i, (start, end) in enumerate(self.dispatch_times))
        return Profile(dispatches, self.start_ns, self.end_ns, self.end_ns - self.start_ns,
                       total_source="timestamps", calibrated=True, deviation_ns=0,
                       host_submit_ns=self.host_submit_ns, host_done_ns=self.host_done_ns)


def _failed(device: Device, error: BaseException) -> DriverError:
    # A kernel that refuses its input (a gather out of bounds) says why in its own words.
    why = str(error) if isinstance(error, UserError) else repr(error)
    err = DriverError("local", "KERNEL_FAILED", f"a kernel failed on {device.uri}: {why}")
    err.__cause__ = error
    return err


class LocalQueue:
    """In-order execution of submissions; ``execute(sub)`` runs one command buffer."""

    def __init__(self, device: Device, execute: Callable[[LocalSubmission], None], inline: bool):
        self.device = device
        self._execute = execute
        self._inline = inline
        self._cv = threading.Condition()
        self._pending: deque[LocalSubmission] = deque()
        self._running = False
        self._closing = False
        self._worker: threading.Thread | None = None

    # -- semaphores ---------------------------------------------------------------------
    def signal(self, pairs: SemValues, from_host: bool = False) -> None:
        with self._cv:
            for sem, value in pairs:
                if from_host and value <= sem._v:  # type: ignore[attr-defined]
                    # Re-checked under the lock: the base class's check can race a device signal.
                    raise UserError(f"semaphore signal {value} must be greater than its value {sem._v}")
                # A device signal never lowers a value (a GPU's would be undefined behaviour).
                sem._v = max(sem._v, value)  # type: ignore[attr-defined]
            self._cv.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait for ``predicate``; a device closed meanwhile raises instead of hanging."""
        with self._cv:
            self._cv.wait_for(lambda: predicate() or self._closing, timeout_s)
            if predicate():
                return True
            if self._closing:
                raise DeviceLost("local", "DEVICE_CLOSED", f"{self.device.uri} was closed while waiting")
            return False

    # -- submissions --------------------------------------------------------------------
    def submit(self, sub: LocalSubmission) -> None:
        with self._cv:
            self._pending.append(sub)
            run_here = (self._inline and not self._running and self._pending[0] is sub and sub.ready())
            if run_here:
                self._pending.popleft()
                self._running = True
            else:
                self._ensure_worker()
                self._cv.notify_all()
        if run_here:
            self._run(sub)

    def _ensure_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name=f"halbench {self.device.uri} queue",
                                            daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._closing or self._head_runnable())
                if self._closing:
                    return
                sub = self._pending.popleft()
                self._running = True
            self._run(sub)

    def _head_runnable(self) -> bool:
        if self._running or not self._pending:
            return False
        head = self._pending[0]
        return head.ready() or head.upstream_failure() is not None

    def _run(self, sub: LocalSubmission) -> None:
        sub.start_ns = time.monotonic_ns()
        error = sub.upstream_failure()
        if error is None:
            try:
                self._execute(sub)
            except Exception as e:  # noqa: BLE001 - a kernel bug: fail this submission and what depends on it
                error = e
        sub.end_ns = time.monotonic_ns()
        with self._cv:
            self._running = False
            sub.error = error
            sub.finished = True
            if error is None:
                self.signal(sub.signals)  # re-entrant: Condition uses an RLock
            else:
                for sem, _ in sub.signals:
                    sem.failure = error  # type: ignore[attr-defined]
            self._cv.notify_all()

    def close(self) -> None:
        """Let the submission in flight finish (bounded), then drop the rest and stop."""
        with self._cv:
            self._cv.wait_for(lambda: not self._running, _CLOSE_TIMEOUT_S)
            self._closing = True
            self._pending.clear()
            self._cv.notify_all()
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join(_CLOSE_TIMEOUT_S)
