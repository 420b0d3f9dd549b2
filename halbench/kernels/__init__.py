"""The NumPy reference kernels: a layer of their own, below ``drivers/`` and ``compiler/``.

The local drivers run them (``local-v1`` executables name a kernel registered here), the
compiler evaluates constants with them (``ops.generic.eval_generic``), and the micro-benchmarks
reuse them (``micro``). None of those reaches into another's package for them.

- ``format``: the ``local-v1`` executable format and the kernel registry;
- ``ops``: the compiler's dispatch kinds (``hb.*``), registered on import;
- ``micro``: the device-peak micro kernels (``micro.*``), registered on import.
"""

from __future__ import annotations

from halbench.kernels.format import (
    FORMAT,
    RegisteredKernel,
    get_kernel,
    local_binary,
    parse_binary,
    register_kernel,
)

__all__ = [
    "FORMAT",
    "RegisteredKernel",
    "get_kernel",
    "load_builtin",
    "local_binary",
    "parse_binary",
    "register_kernel",
]


def load_builtin() -> None:
    """Register every built-in kernel (import ``ops`` and ``micro``); cheap after the first call."""
    import halbench.kernels.micro
    import halbench.kernels.ops  # noqa: F401
