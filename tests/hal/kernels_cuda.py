"""The five contract kernels (backends.py) in CUDA C, compiled by NVRTC at test time.

``build(kernel, fmt)`` returns a cubin for the device's arch (HALBENCH_CUDA_ARCH, else the first
CUDA device's arch when one exists, else sm_90) or PTX. CUDA C cannot name a kernel ``main``, so
each is ``hb_main`` in the source and renamed in the PTX (compiler/backends/nvrtc.py).
"""

from __future__ import annotations

import os
from functools import lru_cache

from halbench.hal import EntryPoint, ExecutableBinary

__all__ = ["SOURCES", "ENTRIES", "build", "device_arch"]

_H = 'extern "C" __global__ void '

SOURCES = {
    "scale_add": _H + """__launch_bounds__(64) hb_main(const float* __restrict__ a, const float* __restrict__ b,
        float* __restrict__ out, unsigned n, unsigned alpha_bits) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __uint_as_float(alpha_bits) * a[i] + b[i];
}""",
    "reduce_sum": _H + """__launch_bounds__(256) hb_main(const float* __restrict__ x, float* __restrict__ out,
        unsigned n) {
    __shared__ float s[256];
    unsigned t = threadIdx.x, i = blockIdx.x * 256 + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned step = 128; step > 0; step >>= 1) {
        if (t < step) s[t] += s[t + step];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}""",
    "many_bindings": _H + """__launch_bounds__(64) hb_main(const float* in0, const float* in1, const float* in2,
        const float* in3, const float* in4, const float* in5, const float* in6, float* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 1.0f * in0[i] + 2.0f * in1[i] + 3.0f * in2[i] + 4.0f * in3[i]
                        + 5.0f * in4[i] + 6.0f * in5[i] + 7.0f * in6[i];
}""",
    "add_one": _H + """__launch_bounds__(64) hb_main(unsigned* buf, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] += 1u;
}""",
    "noop": _H + """hb_main(void* buf) {}""",
    # add_one that may launch before its predecessor ends (sm_90+: programmatic dependent launch)
    "add_one_early": _H + """__launch_bounds__(64) hb_main(unsigned* buf, unsigned n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] += 1u;
}""",
}

ENTRIES = {
    "scale_add": EntryPoint("main", 3, 2, (64, 1, 1)),
    "reduce_sum": EntryPoint("main", 2, 1, (256, 1, 1)),
    "many_bindings": EntryPoint("main", 8, 1, (64, 1, 1)),
    "add_one": EntryPoint("main", 1, 1, (64, 1, 1)),
    "noop": EntryPoint("main", 1, 0, (1, 1, 1)),
    "add_one_early": EntryPoint("main", 1, 1, (64, 1, 1), dependent_launch=True),
}


@lru_cache(maxsize=None)
def device_arch() -> str:
    """HALBENCH_CUDA_ARCH, else the first CUDA device's arch, else sm_90 (CI has no GPU)."""
    env = os.environ.get("HALBENCH_CUDA_ARCH")
    if env:
        return env
    try:
        from halbench.drivers import get_driver

        devices = get_driver("cuda").query_available_devices()
        if devices and devices[0].identity.arch:
            return devices[0].identity.arch
    except Exception:
        pass
    return "sm_90"


def build(kernel: str, fmt: str, arch: str | None = None) -> ExecutableBinary:
    from halbench.compiler.backends.nvrtc import compile_cuda

    arch = arch or device_arch()
    output = {"cuda-cubin-v1": "cubin", "cuda-ptx-v1": "ptx"}[fmt]
    data = compile_cuda(SOURCES[kernel], arch=arch, output=output, name=f"hal_{kernel}",
                        rename={"hb_main": "main"})
    return ExecutableBinary(fmt, data, (ENTRIES[kernel],), arch)
