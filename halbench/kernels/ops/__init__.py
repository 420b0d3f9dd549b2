"""NumPy kernels for the compiler's dispatch kinds (``hb.*``), registered on import.

They live with the local drivers, not the compiler, because a bundle must run where no
compiler is installed. Import this package before loading a bundle's local-v1 executables.
"""

from __future__ import annotations

from halbench.kernels.ops import common, conv, data, matmul, order, pool, winograd  # noqa: F401  (registration)
from halbench.kernels.ops.common import KERNELS

__all__ = ["KERNELS"]
