"""The local HAL drivers: ``local-sync`` (inline) and ``local-task`` (a thread pool).

They run ``local-v1`` executables: a registered NumPy kernel named in the executable, plus
its attributes. They are the compiler's correctness oracle: exact, not fast. The format and
the kernel signature are described in ``kernels.py``; compilers build binaries with
:func:`halbench.drivers.local.kernels.local_binary`.
"""

from __future__ import annotations

from halbench.hal import Device, Driver
from halbench.probe.info import DeviceInfo

__all__ = ["LocalSyncDriver", "LocalTaskDriver"]


class _LocalDriver(Driver):
    def query_available_devices(self) -> list[DeviceInfo]:
        try:
            from halbench.probe.cpu import query_devices
        except ImportError:  # the CPU probe is not written yet: a minimal host description
            from halbench.drivers.local.device import fallback_devices

            return fallback_devices(self.name)
        return query_devices(self.name)

    def create_device(self, path: str = "") -> Device:
        from halbench.drivers.local.device import create_device

        return create_device(self, self.select(path))


class LocalSyncDriver(_LocalDriver):
    name = "local-sync"


class LocalTaskDriver(_LocalDriver):
    name = "local-task"
