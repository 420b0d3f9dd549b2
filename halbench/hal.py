"""The hardware abstraction layer: IREE's nouns at Python size.

Every driver subclasses the ABCs here and fills in the underscore hooks (``_allocate``,
``_dispatch``, ...). What every driver needs once — argument checks, clear errors, state
checks, timing records — lives in these base classes, so a driver stays small.

Example
-------
>>> import halbench
>>> with halbench.create_device("local-sync://") as dev:     # doctest: +SKIP
...     buf = dev.allocate(16)
"""

from __future__ import annotations

import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from halbench.errors import HalbenchError, UserError, WaitTimeout

if TYPE_CHECKING:
    from halbench.probe.info import DeviceInfo
    from halbench.uri import DeviceURI

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FORMAT_NAME",
    "MAX_DYNAMIC_SHARED_BYTES",
    "Buffer",
    "BufferBinding",
    "CommandBuffer",
    "Device",
    "DispatchTiming",
    "Driver",
    "EntryPoint",
    "Executable",
    "ExecutableBinary",
    "Profile",
    "Semaphore",
    "Submission",
]

#: What an executable format's name looks like (``vulkan-spirv-bda-v1``). Which formats exist is
#: not listed here: each driver declares the formats it loads (``Driver.formats``), so a
#: third-party driver brings its own; ``halbench.drivers.known_formats()`` collects them.
FORMAT_NAME = re.compile(r"[a-z0-9][a-z0-9-]*-v[0-9]+")

#: Cap on EntryPoint.dynamic_shared_bytes (no GPU has 1 MiB of shared memory per workgroup;
#: the device's own limit is checked at load).
MAX_DYNAMIC_SHARED_BYTES = 1 << 20

#: No wait in halbench is unbounded; this is the default bound.
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class EntryPoint:
    """One kernel of an executable and its ABI."""

    name: str
    bindings: int
    constants: int = 0
    workgroup_size: tuple[int, int, int] = (1, 1, 1)
    #: Dynamic shared memory per workgroup in bytes (CUDA/HIP ``extern __shared__``; the driver
    #: opts the kernel in past 48 KiB and refuses more than the device's per-block limit).
    dynamic_shared_bytes: int = 0
    #: The kernel waits for the grids it depends on (``griddepcontrol.wait``) before it reads or
    #: writes memory, so a driver may launch it programmatically after a kernel it depends on
    #: (CUDA programmatic dependent launch, sm_90+): its launch and prologue overlap that kernel's
    #: tail instead of following its completion.
    dependent_launch: bool = False

    def __post_init__(self) -> None:
        if self.bindings < 0 or self.constants < 0:
            raise UserError(f"entry point '{self.name}': bindings and constants must be >= 0")
        if not 0 <= int(self.dynamic_shared_bytes) <= MAX_DYNAMIC_SHARED_BYTES:
            raise UserError(f"entry point '{self.name}': dynamic_shared_bytes must be 0 to "
                            f"{MAX_DYNAMIC_SHARED_BYTES}, got {self.dynamic_shared_bytes}")
        object.__setattr__(self, "dynamic_shared_bytes", int(self.dynamic_shared_bytes))
        ws = tuple(int(v) for v in self.workgroup_size)
        if len(ws) != 3 or min(ws) < 1:
            raise UserError(f"entry point '{self.name}': workgroup_size must be 3 positive ints, got {self.workgroup_size}")
        object.__setattr__(self, "workgroup_size", ws)

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "bindings": self.bindings, "constants": self.constants,
             "workgroup_size": list(self.workgroup_size)}
        if self.dynamic_shared_bytes:  # absent when 0: older readers keep reading the manifest
            d["dynamic_shared_bytes"] = self.dynamic_shared_bytes
        if self.dependent_launch:  # absent when false, as above
            d["dependent_launch"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EntryPoint:
        return cls(d["name"], int(d["bindings"]), int(d.get("constants", 0)),
                   tuple(d.get("workgroup_size", (1, 1, 1))), int(d.get("dynamic_shared_bytes", 0)),
                   d.get("dependent_launch") is True)


@dataclass(frozen=True)
class ExecutableBinary:
    """An executable in one format, ready to load: the payload plus its entry points.

    ``target`` names what it was built for (``sm_90``, ``gfx942``, ``spirv1.6``); drivers use it
    to refuse a mismatch with both names in the message.
    """

    format: str
    data: bytes
    entries: tuple[EntryPoint, ...]
    target: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.format, str) or not FORMAT_NAME.fullmatch(self.format):
            raise UserError(f"'{self.format}' is not an executable format name (like vulkan-spirv-bda-v1)")
        object.__setattr__(self, "entries", tuple(self.entries))
        object.__setattr__(self, "data", bytes(self.data))
        names = [e.name for e in self.entries]
        if not names:
            raise UserError("an executable needs at least one entry point")
        if len(set(names)) != len(names):
            raise UserError(f"duplicate entry point names in {names}")


@dataclass(frozen=True)
class BufferBinding:
    """A resolved binding: a buffer range handed to a dispatch."""

    buffer: Buffer
    offset: int
    length: int


@dataclass(frozen=True)
class DispatchTiming:
    """Device time of one dispatch, on the host CLOCK_MONOTONIC timeline (ns)."""

    index: int
    entry: str
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Profile:
    """Device timing of one submission.

    ``total_ns`` is the device time of the whole submission; ``total_source`` says how it was
    measured ("timestamps": bracketed by the same timestamps as the dispatches; "total": by two
    timestamps around a submission without per-dispatch ones (``dispatches`` is then empty);
    "unprofiled": a separate run without per-dispatch events, for drivers where those events
    perturb the work). ``calibrated`` is False when absolute times could not be mapped onto the host clock
    (durations remain exact); ``deviation_ns`` is the calibration's maximum deviation.
    """

    dispatches: tuple[DispatchTiming, ...]
    start_ns: int
    end_ns: int
    total_ns: int
    total_source: str = "timestamps"
    calibrated: bool = True
    deviation_ns: float | None = None
    host_submit_ns: int = 0
    host_done_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_ns": self.start_ns, "end_ns": self.end_ns, "total_ns": self.total_ns,
            "total_source": self.total_source, "calibrated": self.calibrated,
            "deviation_ns": self.deviation_ns, "host_submit_ns": self.host_submit_ns,
            "host_done_ns": self.host_done_ns,
            "dispatches": [{"index": t.index, "entry": t.entry, "start_ns": t.start_ns,
                            "end_ns": t.end_ns} for t in self.dispatches],
        }


class _Resource:
    """Something owned by a device that can be released once."""

    _released = False

    def _check_alive(self, what: str) -> None:
        if self._released:
            raise UserError(f"{what} was already freed; allocate a new one")
        self.device._check_open()


class Buffer(_Resource, ABC):
    """Device memory of ``nbytes`` bytes."""

    def __init__(self, device: Device, nbytes: int):
        self.device = device
        self.nbytes = nbytes

    # -- public API, checked once here ------------------------------------------------
    def write(self, data: np.ndarray | bytes | bytearray | memoryview, offset: int = 0) -> None:
        """Copy host data into the buffer at ``offset`` (bytes); waits until it is there."""
        self._check_alive("buffer")
        if isinstance(data, np.ndarray):
            mv = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))  # empty arrays too
        elif isinstance(data, (bytes, bytearray, memoryview)):
            mv = memoryview(data).cast("B")
        else:
            raise UserError(f"buffer.write takes a NumPy array or bytes, not {type(data).__name__}")
        self._check_range(offset, mv.nbytes, "write")
        if mv.nbytes:
            self._write(mv, offset)

    def read(self, dtype: Any = np.uint8, shape: int | Sequence[int] | None = None,
             offset: int = 0) -> np.ndarray:
        """Copy the buffer (or ``shape`` elements of ``dtype`` from ``offset``) to a new array."""
        self._check_alive("buffer")
        dt = np.dtype(dtype)
        if shape is None:
            if (self.nbytes - offset) % dt.itemsize:
                raise UserError(f"buffer of {self.nbytes} B from offset {offset} is not a whole number of {dt}")
            shape = ((self.nbytes - offset) // dt.itemsize,)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        self._check_range(offset, nbytes, "read")
        out = np.empty(shape, dtype=dt)
        if nbytes:
            self._read(memoryview(out.reshape(-1).view(np.uint8)), offset)
        return out

    def free(self) -> None:
        """Release the memory now (also done when the device closes)."""
        if not self._released:
            self._released = True
            if not self.device.closed:
                self._free()
            self.device._buffers.discard(self)

    @property
    def device_address(self) -> int:
        """The 64-bit device address (BDA / CUDA pointer), where the driver has one."""
        self._check_alive("buffer")
        return self._device_address()

    def _check_range(self, offset: int, nbytes: int, what: str) -> None:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise UserError(f"{what} of {nbytes} B at offset {offset} is outside the buffer of {self.nbytes} B")

    # -- driver hooks -----------------------------------------------------------------
    @abstractmethod
    def _write(self, data: memoryview, offset: int) -> None: ...

    @abstractmethod
    def _read(self, out: memoryview, offset: int) -> None: ...

    @abstractmethod
    def _free(self) -> None: ...

    def _device_address(self) -> int:
        raise UserError(f"{self.device.uri} buffers have no device address")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.nbytes} B on {self.device.uri}>"


class Executable(_Resource):
    """A loaded executable: entry points by name, plus the driver's handle."""

    def __init__(self, device: Device, binary: ExecutableBinary):
        self.device = device
        self.binary = binary
        self.format = binary.format
        self.entries = {e.name: e for e in binary.entries}

    def entry(self, name: str) -> EntryPoint:
        try:
            return self.entries[name]
        except KeyError:
            raise UserError(f"executable has no entry point '{name}'; it has: {', '.join(self.entries)}") from None

    def resources(self, name: str) -> dict[str, int | float | str]:
        """What the device's compiler made of entry ``name``: registers per thread, shared and
        local (spill / stack) bytes, resident workgroups per multiprocessor... as the driver
        reports them (CUDA/HIP function attributes, Vulkan pipeline executable statistics).
        Empty where the driver reports nothing."""
        self.entry(name)
        return {}

    def free(self) -> None:
        if not self._released:
            self._released = True
            if not self.device.closed:
                self._free()

    def _free(self) -> None:
        pass


@dataclass
class _Command:
    """One recorded command, as the base class validated it (drivers may keep their own)."""

    kind: str  # dispatch | barrier | copy | fill
    args: dict[str, Any] = field(default_factory=dict)


class CommandBuffer(ABC):
    """Commands recorded once, submitted many times. ``profile=True`` times each dispatch."""

    def __init__(self, device: Device, profile: bool = False):
        self.device = device
        self.profile = profile
        #: With ``profile=True``: False times the whole submission only (``Profile.dispatches``
        #: empty, ``total_source`` "total"), where the driver can. Per-dispatch timestamps order
        #: every dispatch after the previous one and add their own cost, so a model's latency is
        #: timed without them, as PyTorch times a CUDA graph replay: events around the whole.
        self.dispatch_times = True
        self.ended = False
        self.commands: list[_Command] = []
        #: Entry names of the dispatches in recording order (index into timings).
        self.dispatch_entries: list[str] = []

    def dispatch(self, executable: Executable, entry: str, workgroups: Sequence[int],
                 bindings: Sequence[Any] = (), constants: Sequence[int] = ()) -> None:
        """Record a dispatch of ``entry`` over ``workgroups`` (x, y, z) workgroups.

        ``bindings`` items are a Buffer (all of it) or ``(buffer, offset, length)``;
        ``constants`` are uint32 values (or Python ints that fit).
        """
        self._check_recording()
        if not isinstance(executable, Executable) or executable.device is not self.device:
            raise UserError("dispatch needs an executable loaded on this command buffer's device")
        executable._check_alive("executable")
        ep = executable.entry(entry)
        wg = tuple(int(w) for w in workgroups)
        if len(wg) == 1:
            wg = (wg[0], 1, 1)
        if len(wg) != 3 or min(wg) < 1:
            raise UserError(f"workgroups must be 1 or 3 positive ints, got {tuple(workgroups)}")
        limit = self.device.max_workgroup_count
        if limit and any(w > m for w, m in zip(wg, limit)):
            raise UserError(f"workgroups {wg} exceed the device's maximum {tuple(limit)}")
        if len(bindings) != ep.bindings:
            raise UserError(f"entry '{entry}' takes {ep.bindings} bindings, got {len(bindings)}")
        if len(constants) != ep.constants:
            raise UserError(f"entry '{entry}' takes {ep.constants} constants, got {len(constants)}")
        resolved = tuple(self.device._resolve_binding(b, i) for i, b in enumerate(bindings))
        try:
            consts = np.array([int(c) for c in constants], dtype=np.int64)
        except (TypeError, ValueError):
            raise UserError(f"constants must be integers (uint32), got {list(constants)}") from None
        if consts.size and (consts.min() < -(2**31) or consts.max() >= 2**32):
            raise UserError(f"constants must fit in 32 bits, got {list(constants)}")
        consts32 = (consts & 0xFFFFFFFF).astype(np.uint32)
        self.commands.append(_Command("dispatch", {"executable": executable, "entry": ep,
                                                   "workgroups": wg, "bindings": resolved,
                                                   "constants": consts32}))
        self.dispatch_entries.append(ep.name)
        self._dispatch(executable, ep, wg, resolved, consts32)

    def barrier(self) -> None:
        """Make every earlier command's writes visible to every later command."""
        self._check_recording()
        self.commands.append(_Command("barrier"))
        self._barrier()

    def copy(self, src: Buffer, dst: Buffer, src_offset: int = 0, dst_offset: int = 0,
             nbytes: int | None = None) -> None:
        """Copy ``nbytes`` (default: all that fits) from ``src`` to ``dst``."""
        self._check_recording()
        for b in (src, dst):
            self.device._check_buffer(b)
        if nbytes is None:
            nbytes = min(src.nbytes - src_offset, dst.nbytes - dst_offset)
        src._check_range(src_offset, nbytes, "copy source")
        dst._check_range(dst_offset, nbytes, "copy destination")
        if src is dst and abs(src_offset - dst_offset) < nbytes:
            raise UserError("copy source and destination overlap")
        self._check_alignment(src_offset, dst_offset, nbytes, what="copy")
        self.commands.append(_Command("copy", {"src": src, "dst": dst, "src_offset": src_offset,
                                               "dst_offset": dst_offset, "nbytes": nbytes}))
        if nbytes:
            self._copy(src, dst, src_offset, dst_offset, nbytes)

    def fill(self, buffer: Buffer, pattern: int | bytes, offset: int = 0,
             nbytes: int | None = None, pattern_size: int = 4) -> None:
        """Fill a range with a repeated 1-, 2- or 4-byte pattern (an int or bytes)."""
        self._check_recording()
        self.device._check_buffer(buffer)
        if isinstance(pattern, (bytes, bytearray)):
            pattern_size = len(pattern)
            value = int.from_bytes(pattern, "little")
        else:
            value = int(pattern)
        if pattern_size not in (1, 2, 4):
            raise UserError(f"fill pattern must be 1, 2 or 4 bytes, got {pattern_size}")
        if not 0 <= value < 1 << (8 * pattern_size):
            raise UserError(f"fill pattern {pattern} does not fit in {pattern_size} bytes")
        if nbytes is None:
            nbytes = buffer.nbytes - offset
        buffer._check_range(offset, nbytes, "fill")
        if offset % pattern_size or nbytes % pattern_size:
            raise UserError(f"fill offset {offset} and size {nbytes} must be multiples of the pattern size {pattern_size}")
        self._check_alignment(offset, 0, nbytes, what="fill")
        # Widen to a 4-byte pattern: every driver fills in 32-bit words.
        word = value
        if pattern_size == 1:
            word = value * 0x01010101
        elif pattern_size == 2:
            word = value | (value << 16)
        self.commands.append(_Command("fill", {"buffer": buffer, "pattern": word, "offset": offset,
                                               "nbytes": nbytes}))
        if nbytes:
            self._fill(buffer, word, offset, nbytes)

    def end(self) -> None:
        """Finish recording; the command buffer can then be submitted any number of times."""
        self._check_recording()
        self.ended = True
        self._end()

    def _check_recording(self) -> None:
        self.device._check_open()
        if self.ended:
            raise UserError("command buffer already ended: record a new one")

    def _check_alignment(self, a: int, b: int, nbytes: int, what: str) -> None:
        align = self.device.transfer_alignment
        if a % align or b % align or nbytes % align:
            raise UserError(f"{what} offsets and size must be multiples of {align} B on {self.device.uri}")

    # -- driver hooks -----------------------------------------------------------------
    @abstractmethod
    def _dispatch(self, executable: Executable, entry: EntryPoint, workgroups: tuple[int, int, int],
                  bindings: tuple[BufferBinding, ...], constants: np.ndarray) -> None: ...

    def _barrier(self) -> None:
        pass

    @abstractmethod
    def _copy(self, src: Buffer, dst: Buffer, src_offset: int, dst_offset: int, nbytes: int) -> None: ...

    @abstractmethod
    def _fill(self, buffer: Buffer, pattern: int, offset: int, nbytes: int) -> None: ...

    def _end(self) -> None:
        pass

    def release(self) -> None:
        """Free driver resources now (also done when the device closes)."""


class Semaphore(ABC):
    """A timeline semaphore: a 64-bit value that only grows."""

    def __init__(self, device: Device):
        self.device = device

    @property
    def value(self) -> int:
        self.device._check_open()
        return self._value()

    def signal(self, value: int) -> None:
        """Set the value from the host; it must grow."""
        self.device._check_open()
        value = int(value)
        current = self._value()
        if value <= current:
            raise UserError(f"semaphore signal {value} must be greater than its value {current}")
        self._signal(value)

    def wait(self, value: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Block until the value reaches ``value``; :class:`WaitTimeout` after ``timeout_s``."""
        self.device._check_open()
        if not self._wait(int(value), _check_timeout(timeout_s)):
            raise WaitTimeout(f"semaphore on {self.device.uri} did not reach {value} within {timeout_s} s "
                              f"(value {self._value()})")

    @abstractmethod
    def _value(self) -> int: ...

    @abstractmethod
    def _signal(self, value: int) -> None: ...

    @abstractmethod
    def _wait(self, value: int, timeout_s: float) -> bool:
        """Return True once reached, False on timeout."""


class Submission(ABC):
    """One submission of a command buffer; ``wait()`` it, then read ``timings()``."""

    def __init__(self, device: Device, command_buffer: CommandBuffer):
        self.device = device
        self.command_buffer = command_buffer
        self.host_submit_ns = time.monotonic_ns()
        self.host_done_ns = 0
        self._profile: Profile | None = None

    def wait(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Block until the device finished it; :class:`WaitTimeout` after ``timeout_s``."""
        self.device._check_open()
        if not self._wait(_check_timeout(timeout_s)):
            raise WaitTimeout(f"submission on {self.device.uri} did not finish within {timeout_s} s")
        if not self.host_done_ns:
            self.host_done_ns = time.monotonic_ns()

    @property
    def done(self) -> bool:
        return self._query_done()

    def timings(self) -> list[DispatchTiming]:
        """Per-dispatch device times on the host clock; needs ``profile=True`` and a finished wait."""
        return list(self.profile().dispatches)

    def profile(self) -> Profile:
        """The submission's device timing (see :class:`Profile`)."""
        if not self.command_buffer.profile:
            raise UserError("this command buffer was recorded without profile=True")
        if not self.host_done_ns:
            raise UserError("wait() for the submission before reading its timings")
        if self._profile is None:
            self._profile = self._read_profile()
        return self._profile

    @abstractmethod
    def _wait(self, timeout_s: float) -> bool: ...

    @abstractmethod
    def _query_done(self) -> bool: ...

    def _read_profile(self) -> Profile:
        raise UserError(f"{self.device.uri} cannot profile")


class Device(ABC):
    """A logical device. Use it as a context manager, or call ``close()``."""

    #: Executable formats this device loads, in preference order.
    formats: tuple[str, ...] = ()
    #: Offsets of bound buffer ranges must be multiples of this.
    binding_alignment: int = 16
    #: Copy/fill offsets and sizes must be multiples of this.
    transfer_alignment: int = 4
    max_workgroup_count: tuple[int, int, int] | None = None
    #: Whether entry points may ask for dynamic shared memory (EntryPoint.dynamic_shared_bytes).
    dynamic_shared_memory: bool = False
    #: The driver that opened this device (set by ``Driver.create_device``).
    driver: Driver | None = None

    def __init__(self, info: DeviceInfo, uri: str):
        self.info = info
        self.uri = uri
        self.closed = False
        self.lost: str | None = None
        self._buffers: set[Buffer] = set()
        self._lock = threading.Lock()

    # -- public API -------------------------------------------------------------------
    def allocate(self, nbytes: int, usage: str = "default") -> Buffer:
        """Allocate ``nbytes`` of device memory (contents undefined)."""
        self._check_open()
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise UserError(f"allocation size must be positive, got {nbytes}")
        buf = self._allocate(nbytes, usage)
        self._buffers.add(buf)
        return buf

    def supports(self, fmt: str) -> bool:
        """Whether this device loads executables of format ``fmt``."""
        return fmt in self.formats

    def can_run(self, fmt: str, target: str = "", requires: tuple[str, ...] = ()) -> str | None:
        """Why an executable of ``fmt`` built for ``target``, needing the device features
        ``requires``, cannot run here, or None when it can. The rule is the driver's
        (``Driver.check_variant``); this device may offer fewer formats."""
        if not self.supports(fmt):
            return f"{self.uri} does not load {fmt}"
        return self.driver.check_variant(fmt, target, self.info, requires) if self.driver else None

    def query(self, key: str) -> Any:
        """Look up a device property by dotted path in ``info.to_dict()`` (e.g. ``limits.subgroup_size``)."""
        node: Any = self.info.to_dict()
        for part in key.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise UserError(f"unknown device query '{key}'")
        return node

    def load_executable(self, binary: ExecutableBinary) -> Executable:
        """Load an executable; a format this device cannot run is refused by name."""
        self._check_open()
        if not isinstance(binary, ExecutableBinary):
            raise UserError("load_executable takes an ExecutableBinary")
        if not self.supports(binary.format):
            raise UserError(f"{self.uri} cannot load '{binary.format}' executables; it supports: "
                            f"{', '.join(self.formats) or 'none'}")
        if not self.dynamic_shared_memory:
            for ep in binary.entries:
                if ep.dynamic_shared_bytes:
                    raise UserError(f"entry '{ep.name}' asks for {ep.dynamic_shared_bytes} bytes of dynamic shared "
                                    f"memory, which {self.uri} does not provide (only cuda:// and hip:// do)")
        return self._load_executable(binary)

    def command_buffer(self, profile: bool = False, dispatch_times: bool = True) -> CommandBuffer:
        """Start recording a command buffer; ``profile`` times its submissions on the device,
        each dispatch too unless ``dispatch_times=False`` (the total alone, where the driver can:
        CommandBuffer.dispatch_times)."""
        self._check_open()
        cb = self._command_buffer(bool(profile))
        cb.dispatch_times = bool(dispatch_times) or not profile
        return cb

    def submit(self, command_buffer: CommandBuffer, wait: Iterable[tuple[Semaphore, int]] = (),
               signal: Iterable[tuple[Semaphore, int]] = ()) -> Submission:
        """Queue an ended command buffer after ``wait`` semaphores reach their values; the
        ``signal`` semaphores take their values when it finishes."""
        self._check_open()
        if not isinstance(command_buffer, CommandBuffer) or command_buffer.device is not self:
            raise UserError("submit needs a command buffer recorded on this device")
        if not command_buffer.ended:
            raise UserError("call end() on the command buffer before submitting it")
        waits = self._check_semaphores(wait, "wait")
        signals = self._check_semaphores(signal, "signal")
        return self._submit(command_buffer, waits, signals)

    def semaphore(self, initial: int = 0) -> Semaphore:
        """A new timeline semaphore starting at ``initial``."""
        self._check_open()
        if int(initial) < 0:
            raise UserError("semaphore value must be >= 0")
        return self._semaphore(int(initial))

    def close(self) -> None:
        """Wait for the device to go idle (bounded) and release everything."""
        if self.closed:
            return
        try:
            for b in list(self._buffers):
                if not b._released:
                    b._released = True
                    try:
                        b._free()
                    except HalbenchError:
                        pass
            self._buffers.clear()
            self._close()
        finally:
            self.closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.uri} '{self.info.name}'>"

    # -- checks shared by every driver -----------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise UserError(f"device {self.uri} is closed")
        if self.lost:
            raise UserError(f"device {self.uri} was lost ({self.lost}); create a new device")

    def _check_buffer(self, buf: Any) -> None:
        if not isinstance(buf, Buffer) or buf.device is not self:
            raise UserError(f"expected a buffer allocated on {self.uri}, got {buf!r}")
        buf._check_alive("buffer")

    def _resolve_binding(self, b: Any, index: int) -> BufferBinding:
        if isinstance(b, Buffer):
            buf, offset, length = b, 0, b.nbytes
        elif isinstance(b, (tuple, list)) and len(b) in (2, 3) and isinstance(b[0], Buffer):
            buf, offset = b[0], int(b[1])
            length = int(b[2]) if len(b) == 3 and b[2] is not None else buf.nbytes - offset
        else:
            raise UserError(f"binding {index} must be a Buffer or (buffer, offset, length), got {b!r}")
        self._check_buffer(buf)
        if offset % self.binding_alignment:
            raise UserError(f"binding {index}: offset {offset} is not a multiple of {self.binding_alignment} B "
                            f"(the device's storage buffer offset alignment)")
        if length <= 0:
            raise UserError(f"binding {index}: length must be positive, got {length}")
        buf._check_range(offset, length, f"binding {index}")
        return BufferBinding(buf, offset, length)

    def _check_semaphores(self, pairs: Iterable[tuple[Semaphore, int]], what: str) -> tuple[tuple[Semaphore, int], ...]:
        out = []
        for p in pairs:
            if not (isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], Semaphore)):
                raise UserError(f"{what} entries must be (semaphore, value) pairs, got {p!r}")
            if p[0].device is not self:
                raise UserError(f"{what} semaphore belongs to another device")
            out.append((p[0], int(p[1])))
        return tuple(out)

    # -- driver hooks -----------------------------------------------------------------
    @abstractmethod
    def _allocate(self, nbytes: int, usage: str) -> Buffer: ...

    @abstractmethod
    def _load_executable(self, binary: ExecutableBinary) -> Executable: ...

    @abstractmethod
    def _command_buffer(self, profile: bool) -> CommandBuffer: ...

    @abstractmethod
    def _submit(self, cb: CommandBuffer, wait: tuple[tuple[Semaphore, int], ...],
                signal: tuple[tuple[Semaphore, int], ...]) -> Submission: ...

    @abstractmethod
    def _semaphore(self, initial: int) -> Semaphore: ...

    def _close(self) -> None:
        pass


class Driver(ABC):
    """A HAL driver: lists devices and opens them.

    A driver is the HAL half of an API's plug-in unit: it declares the executable formats it
    loads, best first (``formats``), and the one rule saying whether a variant built for some
    target runs on one of its devices (``check_variant``). Bundles and the runtime ask it; the
    compiler half (``halbench.compiler.backends``) never imports it.
    """

    name: str = ""
    description: str = ""
    #: More names for this driver in URIs (``rocm`` for hip, as IREE spells it).
    aliases: tuple[str, ...] = ()
    #: Executable formats this driver loads, in preference order (a device may offer fewer).
    formats: tuple[str, ...] = ()

    #: Where the driver's probe and device live, imported only when needed (so that listing
    #: drivers loads no GPU binding): a module with ``query_devices()``, and a module with
    #: ``create_device(driver, info)``. A driver may instead override the two methods below.
    probe_module: str = ""
    device_module: str = ""

    def query_available_devices(self) -> list[DeviceInfo]:
        """Every device this driver sees, probed (creates no logical device)."""
        import importlib

        return importlib.import_module(self.probe_module).query_devices()

    def _open(self, info: DeviceInfo) -> Device:
        """Create the logical device for the probed device ``info``."""
        import importlib

        return importlib.import_module(self.device_module).create_device(self, info)

    def check_variant(self, fmt: str, target: str, info: DeviceInfo,
                      requires: tuple[str, ...] = ()) -> str | None:
        """Why a variant of format ``fmt`` built for ``target``, needing the device features
        ``requires`` (names as ``info.features.flags`` has them), cannot run on the device that
        ``info`` describes; None when it runs."""
        if fmt not in self.formats:
            return f"the {self.name} driver does not load {fmt}"
        # A feature the probe reports as absent refuses the variant by name; one it does not
        # report at all is left to the driver (it may be core in that API version).
        missing = [f for f in requires if info.features.flags.get(f) is False]
        if missing:
            return f"needs {', '.join(missing)}, which {info.name} lacks"
        # ``subgroupSizeN``: lanes that shuffle within one subgroup, so every subgroup the driver
        # may pick must hold N invocations (an h100 bundle's attention on lavapipe's 8-lane ones)
        lim = info.limits
        smallest = getattr(lim, "min_subgroup_size", 0) or getattr(lim, "subgroup_size", 0) or 0
        for f in requires:
            m = re.fullmatch(r"subgroupSize(\d+)", f)
            if m and smallest and smallest < int(m.group(1)):
                return (f"needs subgroups of at least {m.group(1)} invocations; {info.name}'s may hold "
                        f"{smallest}")
        return self._check_target(fmt, target, info)

    def _check_target(self, fmt: str, target: str, info: DeviceInfo) -> str | None:
        """Drivers with arch-specific formats say here whether ``target`` runs on ``info``."""
        return None

    def create_device(self, where: str | DeviceURI | DeviceInfo = "") -> Device:
        """Open a device: a URI path ('', an ordinal, a UUID), a parsed URI, or a probed info."""
        from halbench.probe.info import DeviceInfo

        info = where if isinstance(where, DeviceInfo) else self.select(where)
        dev = self._open(info)
        dev.driver = self
        if not dev.formats:  # a device that offers no subset loads every format of its driver
            dev.formats = self.formats
        return dev

    def select(self, where: str | DeviceURI = "") -> DeviceInfo:
        """Pick the probed device that ``where`` names; a clear error lists the others."""
        from halbench.uri import DeviceURI, normalize_uuid, parse_uri

        u = where if isinstance(where, DeviceURI) else parse_uri(f"{self.name}://{where}")
        if u.driver != self.name:
            raise UserError(f"{u} is not a {self.name} device")
        devices = self.query_available_devices()
        listing = ", ".join(f"{d.uri} ({d.name})" for d in devices) or "none"
        if not devices:
            raise UserError(f"driver '{self.name}' has no devices")
        if u.ordinal is not None:
            if u.ordinal >= len(devices):
                raise UserError(f"no device {self.name}://{u.ordinal}; available: {listing}")
            return devices[u.ordinal]
        if u.uuid is not None:
            for d in devices:
                if d.identity.uuid and normalize_uuid(d.identity.uuid) == u.uuid:
                    return d
            raise UserError(f"no {self.name} device with UUID {u.path}; available: {listing}")
        return self._default_device(devices)

    def _default_device(self, devices: list[DeviceInfo]) -> DeviceInfo:
        return devices[0]


def _check_timeout(timeout_s: float | None) -> float:
    if timeout_s is None:
        raise UserError("every wait needs a finite timeout_s")
    t = float(timeout_s)
    if not t >= 0 or t == float("inf"):
        raise UserError(f"timeout_s must be a finite number >= 0, got {timeout_s}")
    return t
