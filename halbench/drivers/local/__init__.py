"""The local HAL drivers: ``local-sync`` (inline) and ``local-task`` (a thread pool).

They run ``local-v1`` executables: a registered NumPy kernel named in the executable, plus
its attributes. They are the compiler's correctness oracle: exact, not fast. The format and
the kernel signature are described in ``kernels.py``; compilers build binaries with
:func:`halbench.kernels.format.local_binary`.
"""

from __future__ import annotations

from halbench.hal import Driver
from halbench.kernels.format import FORMAT
from halbench.probe.info import DeviceInfo

__all__ = ["LocalSyncDriver", "LocalTaskDriver"]


class _LocalDriver(Driver):
    formats = (FORMAT,)
    device_module = "halbench.drivers.local.device"

    def query_available_devices(self) -> list[DeviceInfo]:
        from halbench.probe.cpu import query_devices

        return query_devices(self.name)


class LocalSyncDriver(_LocalDriver):
    name = "local-sync"


class LocalTaskDriver(_LocalDriver):
    name = "local-task"
