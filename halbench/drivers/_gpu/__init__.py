"""What the cuda and hip drivers share: one stream/graph/event driver over an API adapter.

CUDA's driver API and HIP mirror each other call for call, so (as in IREE, whose CUDA and HIP
drivers share their structure) the HAL objects live here once and talk to the GPU through a
:class:`~halbench.drivers._gpu.api.GpuApi`: ``drivers/cuda/api.py`` and ``drivers/hip/api.py``
are the only files that name API functions.

Files: ``api.py`` (the adapter contract, error mapping, bounded polling), ``device.py``
(device, buffers, staging), ``executable.py`` (modules, kernel parameters), ``command_buffer.py``
(graphs and stream launches), ``sync.py`` (semaphores, submissions, profiles).
"""

from __future__ import annotations
