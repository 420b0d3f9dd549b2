"""A bundle loaded on a device: buffers, executables and command buffers made once, run often.

``Module.load`` does all the allocating, uploading, loading and recording. ``invoke`` then
only writes the inputs, submits the recorded command buffer, waits and reads the outputs: the
steady state allocates nothing on the device and records nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Self

import numpy as np

from halbench.bundle import (
    BarrierStep,
    Bundle,
    CopyStep,
    DispatchStep,
    FillStep,
    Function,
    Variant,
    read_bundle,
    select_variant,
)
from halbench.dtypes import to_numpy
from halbench.errors import DriverError, UserError
from halbench.hal import DEFAULT_TIMEOUT_S, Buffer, CommandBuffer, Device, Executable
from halbench.runtime.inputs import check_inputs
from halbench.runtime.profile import DispatchInfo, ProfileResult

#: The most repetitions of a function one profiled submission records (Module.profile's repeat).
MAX_REPEAT = 1024

__all__ = ["Module"]


class Module:
    """A bundle loaded on one device. Use :meth:`load`; ``close()`` (or ``with``) frees it."""

    def __init__(self, bundle: Bundle, device: Device, buffers: dict[int, Buffer],
                 executables: dict[int, tuple[Executable, Variant]]):
        self.bundle = bundle
        self.device = device
        self._buffers = buffers
        self._executables = executables
        self._recorded: dict[tuple[str, bool], CommandBuffer] = {}
        self._status_slots: dict[str, list[Any]] = {}  # function -> its gathers' status slots
        self._lock = threading.Lock()  # one invocation at a time: they share the buffers
        self._last: Any = None  # the latest submission: close() frees nothing it may still use
        self.closed = False

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, bundle: Bundle | str | os.PathLike[str], device: Device) -> Module:
        """Read (if given a path) and verify ``bundle``, then prepare every function on ``device``."""
        if not isinstance(bundle, Bundle):
            bundle = read_bundle(bundle)
        m = bundle.manifest
        # Choose every variant before touching the device: an unrunnable bundle allocates nothing.
        chosen = {e.id: (e, select_variant(e, device)[1]) for e in m.executables}
        buffers: dict[int, Buffer] = {}
        executables: dict[int, tuple[Executable, Variant]] = {}
        module = cls(bundle, device, buffers, executables)
        try:
            for b in m.buffers:
                buffers[b.id] = device.allocate(b.nbytes, b.kind)
                if b.kind in ("status", "scratch"):  # out-of-bounds slots and split-K counters start clear
                    buffers[b.id].write(np.zeros(b.nbytes, np.uint8))
            for w in m.weights:  # uploaded once; weights are never written again
                buffers[w.buffer].write(bundle.weight(w), w.offset)
            for eid, (decl, variant) in chosen.items():
                executables[eid] = (device.load_executable(bundle.binary(decl, variant)), variant)
            for f in m.functions:
                module._record(f, profile=False)
        except BaseException:
            module.close()
            raise
        return module

    def _record(self, f: Function, profile: bool, dispatch_times: bool = True, repeat: int = 1) -> CommandBuffer:
        cb = self.device.command_buffer(profile=profile, dispatch_times=dispatch_times)
        bufs = self._buffers
        for s in [s for r in range(repeat) for s in ((BarrierStep(),) if r else ()) + tuple(f.steps)]:
            if isinstance(s, DispatchStep):
                exe, v = self._executables[s.executable]
                bindings = [(bufs[r.buffer], r.offset, r.length) for r in s.bindings]
                cb.dispatch(exe, v.entry.name, v.workgroups, bindings, v.constants)
            elif isinstance(s, BarrierStep):
                cb.barrier()
            elif isinstance(s, CopyStep):
                cb.copy(bufs[s.src.buffer], bufs[s.dst.buffer], s.src.offset, s.dst.offset, s.nbytes)
            elif isinstance(s, FillStep):
                cb.fill(bufs[s.buffer], s.pattern, s.offset, s.nbytes, s.pattern_size)
        cb.end()
        key = profile if dispatch_times or not profile else "total"
        self._recorded[(f.name, key) if repeat == 1 else (f.name, key, repeat)] = cb
        return cb

    # -- queries ------------------------------------------------------------------------------
    @property
    def functions(self) -> tuple[Function, ...]:
        """The functions of the bundle, with their inputs, outputs and steps."""
        return self.bundle.manifest.functions

    def function(self, name: str | None = None) -> Function:
        """The function ``name``; ``None`` picks the only one."""
        return self.bundle.manifest.function(name)

    def variant(self, executable: int) -> Variant:
        """The variant loaded for ``executable``."""
        return self._executables[executable][1]

    # -- running ------------------------------------------------------------------------------
    def invoke(self, fn: str | None = None, inputs: Sequence[Any] | Mapping[str, Any] = (),
               timeout_s: float = DEFAULT_TIMEOUT_S) -> list[np.ndarray]:
        """Run ``fn`` on ``inputs`` (in order, or by name) and return its outputs as new arrays."""
        f = self.function(fn)
        arrays = check_inputs(f, inputs)
        with self._lock:
            self._check_open()
            self._write_inputs(f, arrays)
            self._last = self.device.submit(self._recorded[(f.name, False)])
            self._last.wait(timeout_s)
            self._check_status(f)
            return self._read_outputs(f)

    def profile(self, fn: str | None = None, inputs: Sequence[Any] | Mapping[str, Any] = (),
                runs: int = 10, warmup: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S,
                dispatch_times: bool = True, repeat: int = 1) -> ProfileResult:
        """Run ``fn`` ``warmup + runs`` times with device timing; keep the last ``runs``.

        ``dispatch_times=False`` times each run whole, without per-dispatch timestamps (which
        serialize the dispatches and cost time of their own), where the driver can: the
        result's ``dispatch_ns`` rows are then empty (``Profile.total_source`` "total").

        ``repeat`` > 1 records the function's steps that many times in one submission, a barrier
        between (as iree-benchmark-module's batch size): a kernel of a few microseconds then keeps
        the GPU busy instead of idling between submissions, which lets the clocks of some drivers
        (NVIDIA's Vulkan driver) fall to idle. ``total_ns`` is then per repetition (a
        submission's time over ``repeat``) and ``dispatch_ns`` has one row per repetition
        (``runs * repeat`` rows); ``host_ns`` stays per submission."""
        if int(runs) < 1 or int(warmup) < 0 or not 1 <= int(repeat) <= MAX_REPEAT:
            raise UserError(f"profile needs runs >= 1, warmup >= 0 and repeat in 1..{MAX_REPEAT}, "
                            f"got runs={runs}, warmup={warmup}, repeat={repeat}")
        repeat = int(repeat)
        f = self.function(fn)
        arrays = check_inputs(f, inputs)
        with self._lock:
            self._check_open()
            key = (f.name, True if dispatch_times else "total")
            if repeat > 1:
                key = (*key, repeat)
            cb = self._recorded.get(key) or self._record(f, profile=True, dispatch_times=dispatch_times,
                                                          repeat=repeat)
            self._write_inputs(f, arrays)
            profiles, host = [], []
            for i in range(int(warmup) + int(runs)):
                sub = self._last = self.device.submit(cb)
                sub.wait(timeout_s)
                if i >= warmup:
                    profiles.append(sub.profile())
                    host.append(sub.host_done_ns - sub.host_submit_ns)
            self._check_status(f)
        infos = self._dispatch_infos(f)
        per = tuple(tuple(t.duration_ns for t in p.dispatches) for p in profiles)
        if per and per[0] and len(per[0]) != len(infos) * repeat:
            raise UserError(f"{self.device.uri} timed {len(per[0])} dispatches of '{f.name}' x {repeat}, "
                            f"which has {len(infos)}")
        n = len(infos)
        rows = tuple(row[r * n:(r + 1) * n] for row in per for r in range(repeat)) if n and per and per[0] else per
        return ProfileResult(f.name, self.device.uri, infos, tuple(p.total_ns // repeat for p in profiles),
                             rows, tuple(host), tuple(profiles))

    def _dispatch_infos(self, f: Function) -> tuple[DispatchInfo, ...]:
        out = []
        for i, s in enumerate(f.dispatches):
            exe_decl = self.bundle.manifest.executable(s.executable)
            v = self.variant(s.executable)
            out.append(DispatchInfo(i, s.name or exe_decl.name or v.entry.name, s.executable,
                                    v.entry.name, v.format, s.flops, s.bytes, s.nodes))
        return tuple(out)

    def _check_status(self, f: Function) -> None:
        """Raise, naming the dispatch and the index, when a gather or scatter of ``f`` met an index
        out of its bounds (the kernel clamped or skipped it and recorded it: flag 1 a gather, 2 a
        scatter; nothing was read or written out of bounds)."""
        slots = self._status_slots.get(f.name)
        if slots is None:
            kinds = {b.id: b.kind for b in self.bundle.manifest.buffers}
            slots = self._status_slots[f.name] = [(s, r) for s in f.dispatches for r in s.bindings
                                                  if kinds[r.buffer] == "status"]
        for s, r in slots:
            flag, index = (int(x) for x in self._buffers[r.buffer].read(np.uint32, 2, r.offset))
            if flag:
                self._buffers[r.buffer].write(np.zeros(2, np.uint32), r.offset)
                signed = index - (1 << 32) if index >= 1 << 31 else index
                if flag == 2:  # a scatter's index row (kernels._plan_ordered): nothing was written there
                    raise UserError(f"dispatch '{s.name}' of '{f.name}' scattered at index {signed}, outside "
                                    f"its output's bounds, on {self.device.uri}; check the indices")
                raise UserError(f"dispatch '{s.name}' of '{f.name}' gathered at index {signed}, outside its "
                                f"input's bounds, on {self.device.uri}; check the input values "
                                f"(token ids, indices) against the model's tables")

    def _write_inputs(self, f: Function, arrays: list[np.ndarray]) -> None:
        for spec, a in zip(f.inputs, arrays):
            if a.size:  # an empty tensor has no bytes to move
                self._buffers[spec.buffer].write(a, spec.offset)

    def _read_outputs(self, f: Function) -> list[np.ndarray]:
        return [self._buffers[o.buffer].read(to_numpy(o.dtype), o.shape, o.offset)
                if 0 not in o.shape else np.zeros(o.shape, to_numpy(o.dtype)) for o in f.outputs]

    # -- lifetime -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise UserError("this module was closed; load it again")

    def _last_done(self) -> bool:
        try:
            return bool(self._last.done)
        except DriverError:  # a lost device runs nothing any more
            return True

    def close(self) -> None:
        """Free the module's device resources (the device itself stays open)."""
        if self.closed:
            return
        self.closed = True
        if self.device.closed:
            return
        if self._last is not None and not self._last_done():
            # A run that timed out may still be executing: freeing its buffers, pipelines or command
            # buffer under it is a use-after-free (lavapipe segfaults). Leave them to the device's
            # close, which waits for the device to go idle first.
            return
        for cb in self._recorded.values():
            cb.release()
        for exe, _ in self._executables.values():
            exe.free()
        for b in self._buffers.values():
            b.free()
        self._recorded.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        names = ", ".join(f.name for f in self.functions)
        return f"<Module {self.bundle.name} on {self.device.uri}: {names}>"
