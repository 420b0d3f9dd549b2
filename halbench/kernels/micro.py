"""NumPy versions of the micro-benchmark kernels (the micro ABI of halbench.bench.micro), run by the
local drivers."""

from __future__ import annotations

import numpy as np

from halbench.kernels.format import register_kernel

SUPPORTED = ("copy", "triad", "fma_f32", "gemm_f16", "gemm_bf16", "noop")


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
    chains = int((attrs or {}).get("chains", 32))
    gid = np.arange(wg_range.start * 256, wg_range.stop * 256, dtype=np.uint32)
    a = np.float32(0.999)
    b = ((gid & 7) * np.float32(1e-3)).astype(np.float32)
    x = b[None, :] + np.arange(chains, dtype=np.float32)[:, None]
    for _ in range(iters):
        x = x * a + b
    bindings[0].view(np.float32)[gid] = x.sum(axis=0)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 stored as uint16 bits -> float32 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, rounded to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _gemm(bf16: bool):
    """C[M,N] = A[M,K] x B[N,K]^T in f32, rounded to the operand type (the GPU kernels' contract).
    The host validated the shapes against the buffers."""
    def run(bindings, constants, attrs, workgroups, wg_range) -> None:
        m, n, k = (int(c) for c in constants[:3])
        if bf16:
            a = bf16_to_f32(bindings[0].view(np.uint16)[: m * k]).reshape(m, k)
            b = bf16_to_f32(bindings[1].view(np.uint16)[: n * k]).reshape(n, k)
            bindings[2].view(np.uint16)[: m * n] = f32_to_bf16(a @ b.T).reshape(-1)
        else:
            a = bindings[0].view(np.float16)[: m * k].reshape(m, k).astype(np.float32)
            b = bindings[1].view(np.float16)[: n * k].reshape(n, k).astype(np.float32)
            bindings[2].view(np.float16)[: m * n] = (a @ b.T).astype(np.float16).reshape(-1)
    return run


def _noop(bindings, constants, attrs, workgroups, wg_range) -> None:
    pass


register_kernel("micro.copy", _copy, parallel=False)
register_kernel("micro.triad", _triad, parallel=False)
register_kernel("micro.fma_f32", _fma_f32, parallel=True)
register_kernel("micro.gemm_f16", _gemm(False), parallel=False)
register_kernel("micro.gemm_bf16", _gemm(True), parallel=False)
register_kernel("micro.noop", _noop, parallel=False)
