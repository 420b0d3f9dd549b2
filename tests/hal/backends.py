"""The backends the HAL conformance suite runs on, and the test-kernel contract.

Every test in tests/hal/ is written once and runs on every (driver, executable format) pair
below; an unavailable driver or format skips with its reason, an error fails.

Each backend names a kernel module (tests/hal/kernels_*.py) with one function::

    def build(kernel: str, fmt: str) -> halbench.hal.ExecutableBinary

that returns an executable with ONE entry point named ``main`` implementing ``kernel``:

==============  ==============================================  =========  ===========
kernel          bindings                                        constants  workgroup
==============  ==============================================  =========  ===========
scale_add       a f32[n], b f32[n], out f32[n]                  n, alpha   (64, 1, 1)
                out[i] = alpha * a[i] + b[i] for i < n; alpha is the uint32 bit pattern
                of a float32
reduce_sum      x f32[n], out f32[groups]                       n          (256, 1, 1)
                out[g] = sum of x[g*256 + t], t < 256, g*256 + t < n, through a
                shared-memory (workgroup-local) tree reduction
many_bindings   in0..in6 f32[n], out f32[n]  (8 bindings)        n          (64, 1, 1)
                out[i] = sum over k of (k + 1) * in_k[i]
add_one         buf u32[n]                                      n          (64, 1, 1)
                buf[i] += 1 (ordering tests: each submission adds exactly one)
noop            buf (any)                                       none       (1, 1, 1)
                does nothing (dispatch-latency benchmarks)
==============  ==============================================  =========  ===========
"""

from __future__ import annotations

from dataclasses import dataclass

KERNELS = ("scale_add", "reduce_sum", "many_bindings", "add_one", "noop")


@dataclass(frozen=True)
class Backend:
    uri: str
    format: str
    kernels: str  # module under tests.hal providing build(kernel, fmt)

    @property
    def id(self) -> str:
        return f"{self.uri.split(':')[0]}-{self.format}"


BACKENDS = (
    Backend("vulkan://", "vulkan-spirv-bda-v1", "kernels_vulkan"),
    Backend("vulkan://", "vulkan-spirv-descriptors-v1", "kernels_vulkan"),
    Backend("cuda://", "cuda-cubin-v1", "kernels_cuda"),
    Backend("cuda://", "cuda-ptx-v1", "kernels_cuda"),
    Backend("hip://", "hip-hsaco-v1", "kernels_hip"),
    Backend("webgpu://", "webgpu-wgsl-v1", "kernels_webgpu"),
    Backend("local-sync://", "local-v1", "kernels_local"),
    Backend("local-task://", "local-v1", "kernels_local"),
)

#: Known-unsupported (backend id, test name) -> reason, as IREE's CTS keeps per backend.
UNSUPPORTED: dict[tuple[str, str], str] = {}
