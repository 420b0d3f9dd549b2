"""NumPy versions of the micro-benchmark kernels (the micro ABI of halbench.bench.micro), run by the
local drivers."""

from __future__ import annotations

import numpy as np

from halbench.kernels.format import register_kernel

SUPPORTED = ("copy", "triad", "fma_f32", "noop")


def _copy(bindings, constants, attrs, workgroups, wg_range) -> None:
    n = int(constants[0]) * 4
    np.copyto(bindings[1].view(np.float32)[:n], bindings[0].view(np.float32)[:n])


def _triad(bindings, constants, attrs, workgroups, wg_range) -> None:
    n = int(constants[0]) * 4
    s = constants[1:2].view(np.float32)[0]
    a, b, c = (x.view(np.float32)[:n] for x in bindings)
    np.multiply(c, s, out=a)
    a += b


def _fma_f32(bindings, constants, attrs, workgroups, wg_range) -> None:
    # Same arithmetic as the GPU kernel, one lane per thread of the covered workgroups.
    iters = int(constants[0])
    gid = np.arange(wg_range.start * 256, wg_range.stop * 256, dtype=np.uint32)
    a = np.float32(0.999)
    b = ((gid & 7) * np.float32(1e-3)).astype(np.float32)
    x = b[None, :] + np.arange(32, dtype=np.float32)[:, None]
    for _ in range(iters):
        x = x * a + b
    bindings[0].view(np.float32)[gid] = x.sum(axis=0)


def _noop(bindings, constants, attrs, workgroups, wg_range) -> None:
    pass


register_kernel("micro.copy", _copy, parallel=False)
register_kernel("micro.triad", _triad, parallel=False)
register_kernel("micro.fma_f32", _fma_f32, parallel=True)
register_kernel("micro.noop", _noop, parallel=False)
