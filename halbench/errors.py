"""The one error tree of halbench.

The CLI prints a :class:`HalbenchError` as one line and exits non-zero; anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = [
    "BadOption",
    "CompileError",
    "DeviceLost",
    "DriverError",
    "DriverUnavailable",
    "HalbenchError",
    "NothingToDo",
    "OutOfDeviceMemory",
    "UserError",
    "WaitTimeout",
]


class HalbenchError(Exception):
    """Base of every error halbench raises on purpose. ``exit_code``: what the CLI exits with."""

    exit_code = 1


class UserError(HalbenchError, ValueError):
    """Bad input from the user or caller: a bad URI, a wrong argument, a malformed file."""


class BadOption(UserError):
    """An option names what its input does not have (a runtime absent from a results file):
    exit 2, as click exits for a bad option value."""

    exit_code = 2


class DriverUnavailable(HalbenchError):
    """A driver cannot be used on this machine (its library is missing, no device, ...)."""

    def __init__(self, driver: str, reason: str):
        super().__init__(f"driver '{driver}' is unavailable: {reason}")
        self.driver = driver
        self.reason = reason


class DriverError(HalbenchError):
    """A call into a GPU API failed; carries the API's own name for the failure."""

    def __init__(self, api: str, status: str, message: str):
        super().__init__(f"{status}: {message}" if status else message)
        self.api = api
        self.status = status
        self.message = message


class DeviceLost(DriverError):
    """The device was lost; it refuses any further work."""


class OutOfDeviceMemory(DriverError, MemoryError):
    """The device ran out of memory."""


class WaitTimeout(HalbenchError, TimeoutError):
    """A wait on the device or a semaphore did not finish within its timeout."""


class CompileError(HalbenchError):
    """A model or kernel could not be compiled."""


class KernelRejected(CompileError):
    """A kernel compiler (glslang, NVRTC, nvJitLink, naga) rejected source halbench generated: a
    bug in the code generator, not in the user's model or set-up."""


class NothingToDo(UserError):
    """The command selected nothing to run (an ``--only`` that matches nothing, no devices):
    exit 2, and nothing is written."""

    exit_code = 2
