"""Microbenchmarks that measure the device itself: the rooflines' ceilings.

Each kind runs one hand-written kernel through the HAL (no model compiler involved), in the
same micro ABI on every API: GLSL for Vulkan (both dispatch ABIs), CUDA C for CUDA, NumPy for
the local drivers. A prepared benchmark records its command buffer once; every sample is one
submission, timed by device timestamps (``device_ms``) and the host clock (``host_ms``).

Kinds (``kind:`` in a suite) and what they count per run:

=================  ==========================================================  ============
kind               kernel                                                      metric
=================  ==========================================================  ============
bandwidth-copy     dst = src, ``unroll`` vec4 loads in flight per thread           bytes r + w
bandwidth-triad    a = b + s * c                                               bytes r + w
fma-f32            ``chains`` independent FMA chains per thread, in registers  flops
fma-f16            the same in half precision (needs shaderFloat16)            flops
dot-int8           16 chains of 4-way int8 dot products (dp4a / OpSDot)         ops
matrix-f16         cooperative matrix / WMMA f16 -> f32, operands in registers flops
matrix-bf16        the same with bf16 operands (CUDA WMMA)                     flops
gemm-f16           C = A x B^T, f16 operands, f32 accumulation, f16 C: 2MNK   flops
gemm-bf16          the same in bf16 (CUDA mma.sync; local)                     flops
latency-dispatch   one empty dispatch per submission                           -
latency-replay     100 empty dispatches recorded once, replayed                dispatches
latency-chain      the same with a barrier between dispatches (each waits for  dispatches
                   the one before), timed whole as a model is
transfer-h2d       buffer.write of ``bytes`` (host timed)                      bytes
transfer-d2h       buffer.read of ``bytes`` (host timed)                       bytes
=================  ==========================================================  ============

Kernel-shaping parameters (they travel to the backend as #defines; a backend that cannot
honour one skips the benchmark with the reason): ``bandwidth-copy`` ``unroll`` (vec4 loads per
thread before its stores) and ``workgroups`` (grid cap; workgroups stride over the tiles);
``fma-f32`` ``chains``, ``unroll`` (loop body repeats) and ``vector`` (4: the old vec4 GLSL
kernel); ``gemm-*`` ``tile_m``, ``tile_n``, ``tile_k`` and ``stages`` (CUDA's cp.async depth: the stages sit in
dynamic shared memory, up to the device's per-workgroup limit) and ``mma`` (CUDA's kernel: 1
mma.sync, 2 / 3 wgmma, 4 / 5 warp-specialized wgmma, 5 with one persistent workgroup per SM;
Vulkan's: 1 subgroup-scope cooperative matrix, 2 / 3 / 4 workgroup-scope cooperative matrix of
VK_NV_cooperative_matrix2 with its operands loaded from memory / staged in shared memory / loaded
through tensor layouts, coopMatLoadTensorNV, which needs glslang 15 or newer on PATH) and
``invocations`` (the workgroup size of Vulkan's ``mma: 2`` to ``4``: one
the device lists for workgroup-scope matrices; 0 takes the first it lists).
GEMM operands: A [m, k] and B [n, k] row-major (B holds one output column per row).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from halbench.errors import UserError
from halbench.hal import Device, Profile

__all__ = ["KINDS", "MicroBenchmark", "Sample", "Unsupported", "param_names", "prepare_micro"]

KINDS = ("bandwidth-copy", "bandwidth-triad", "fma-f32", "fma-f16", "dot-int8", "matrix-f16",
         "matrix-bf16", "gemm-f16", "gemm-bf16", "latency-dispatch", "latency-replay", "latency-chain",
         "transfer-h2d", "transfer-d2h")

_KERNEL = {"bandwidth-copy": "copy", "bandwidth-triad": "triad", "fma-f32": "fma_f32",
           "fma-f16": "fma_f16", "dot-int8": "dot_int8", "matrix-f16": "matrix_f16",
           "matrix-bf16": "matrix_bf16", "gemm-f16": "gemm_f16", "gemm-bf16": "gemm_bf16",
           "latency-dispatch": "noop", "latency-replay": "noop", "latency-chain": "noop"}

_GEMM = {"m": 4096, "n": 4096, "k": 4096, "tile_m": 128, "tile_n": 128, "tile_k": 32, "stages": 3, "mma": 0,
         "invocations": 0}

_DEFAULTS: dict[str, dict[str, Any]] = {
    "bandwidth-copy": {"bytes": 256 << 20, "unroll": 4, "workgroups": 65535},
    "bandwidth-triad": {"bytes": 256 << 20},
    "fma-f32": {"workgroups": 4096, "iters": 2048, "chains": 32, "unroll": 4, "vector": 1},
    "fma-f16": {"workgroups": 4096, "iters": 2048},
    "dot-int8": {"workgroups": 4096, "iters": 2048},
    "matrix-f16": {"workgroups": 4096, "iters": 2048},
    "matrix-bf16": {"workgroups": 4096, "iters": 2048},
    "gemm-f16": dict(_GEMM),
    "gemm-bf16": dict(_GEMM),
    "latency-dispatch": {},
    "latency-replay": {"dispatches": 100},
    "latency-chain": {"dispatches": 100},
    "transfer-h2d": {"bytes": 64 << 20},
    "transfer-d2h": {"bytes": 64 << 20},
}


#: parameters that shape the kernel: param -> the backend's option (#define) name
_SHAPING: dict[str, dict[str, str]] = {
    "bandwidth-copy": {"unroll": "UNROLL"},
    "fma-f32": {"chains": "CHAINS", "unroll": "UNROLL", "vector": "VECTOR"},
    "gemm-f16": {"tile_m": "BM", "tile_n": "BN", "tile_k": "BK", "stages": "STAGES", "mma": "MMA",
                 "invocations": "WG"},
    "gemm-bf16": {"tile_m": "BM", "tile_n": "BN", "tile_k": "BK", "stages": "STAGES", "mma": "MMA",
                  "invocations": "WG"},
}


def param_names(kind: str) -> tuple[str, ...]:
    """The parameters a micro kind takes (a suite naming another is refused)."""
    return tuple(_DEFAULTS[kind])


class Unsupported(UserError):
    """The device cannot run this microbenchmark (recorded as skipped, with the reason)."""


@dataclass
class Sample:
    device_ms: float
    host_ms: float
    profile: Profile | None = None


@dataclass
class MicroBenchmark:
    """A microbenchmark prepared on one device. ``run()`` takes one sample."""

    kind: str
    device: Device
    params: dict[str, Any]
    format: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    _run: Any = None
    _check: Any = None
    _buffers: list[Any] = field(default_factory=list)

    def run(self) -> Sample:
        return self._run()

    def check(self) -> dict[str, Any]:
        """Correctness of what the kernel wrote (bandwidth kinds compare exactly)."""
        if self._check is None:
            return {"checked": False, "passed": True}
        return self._check()

    def close(self) -> None:
        for b in self._buffers:
            b.free()
        self._buffers.clear()


def prepare_micro(kind: str, device: Device, params: dict[str, Any] | None = None) -> MicroBenchmark:
    """Build, load and record ``kind`` on ``device``. Raises Unsupported with the reason."""
    if kind not in KINDS:
        raise UserError(f"unknown microbenchmark kind '{kind}'; known: {', '.join(KINDS)}")
    p = {**_DEFAULTS[kind], **(params or {})}
    mb = MicroBenchmark(kind, device, p)
    if kind.startswith("transfer-"):
        _prepare_transfer(mb)
    else:
        _prepare_kernel(mb)
    return mb


# -- kernels --------------------------------------------------------------------------------

def _build(device: Device, kernel: str, options: dict[str, int] | None = None) -> Any:
    """The micro kernel for ``device``, from the compiler backend of its driver, in the first
    format the device loads that the backend emits (a MicroKernel). ``options`` shape it."""
    from halbench.compiler.backends import Unsupported as BackendUnsupported
    from halbench.compiler.backends import backend_for_driver

    b = backend_for_driver(device.info.driver)
    fmt = next((f for f in device.formats if f in b.formats), None)
    if b.micro_binary is None or fmt is None:
        raise Unsupported(f"{device.uri}: the {b.name} backend builds no micro kernels")
    try:
        return b.micro_binary(kernel, fmt, device.info, options) if options else \
            b.micro_binary(kernel, fmt, device.info)
    except BackendUnsupported as e:
        raise Unsupported(str(e)) from None


def _prepare_kernel(mb: MicroBenchmark) -> None:
    dev, kind, p = mb.device, mb.kind, mb.params
    options = {d: int(p[k]) for k, d in _SHAPING.get(kind, {}).items()}
    if not options.get("WG", 1):
        options.pop("WG")  # 0: the kernel's own workgroup size
    _validate(kind, p)
    mk = _build(dev, _KERNEL[kind], options)  # Unsupported before anything is allocated
    wg = mk.workgroup_size
    consts: list[int] = []
    check = None
    if kind in ("bandwidth-copy", "bandwidth-triad"):
        nbytes = int(p["bytes"]) // 16 * 16
        n = nbytes // 16
        nbuf = 2 if kind == "bandwidth-copy" else 3
        bufs = [dev.allocate(nbytes) for _ in range(nbuf)]
        rng = np.random.default_rng(0)
        src = rng.standard_normal(n * 4, dtype=np.float32)
        if kind == "bandwidth-copy":
            bufs[0].write(src)
            _poison(dev, bufs[1])
            consts = [n]
            mb.metrics = {"bytes": 2.0 * nbytes}
            check = _check_eq(bufs[1], src)
        else:
            c = rng.standard_normal(n * 4, dtype=np.float32)
            s = np.float32(0.5)
            bufs[1].write(src)
            bufs[2].write(c)
            consts = [n, int(np.array([s], np.float32).view(np.uint32)[0])]
            mb.metrics = {"bytes": 3.0 * nbytes}
            check = _check_eq(bufs[0], src + s * c)
        tile = wg * int(p.get("unroll", 1))
        workgroups = (max(1, min(math.ceil(n / tile), int(p.get("workgroups", 65535)), 65535)), 1, 1)
    elif kind in ("fma-f32", "fma-f16", "dot-int8"):
        groups = int(p["workgroups"])
        iters = int(p["iters"])
        out = dev.allocate(groups * wg * 4)
        bufs, consts, workgroups = [out], [iters], (groups, 1, 1)
        # chains x FMA(2) (32 lanes in the f16 kernel), or 16 chains x dp4a(8)
        per_iter = 128 if kind == "dot-int8" else 2 * int(p.get("chains", 32))
        mb.metrics = {"flops": float(groups) * wg * iters * per_iter}
        check = _check_dot_int8(out, iters, mk.note) if kind == "dot-int8" else _check_finite(out)
    elif kind in ("matrix-f16", "matrix-bf16"):
        groups, iters = int(p["workgroups"]), int(p["iters"])
        m, n_, k, sub = mk.matrix
        ab = dev.allocate(2 * (m * k + k * n_) * 2)
        ab.write(np.full((m * k + k * n_) * 2, 0x3C00 if kind == "matrix-f16" else 0x3F80, np.uint16))
        warps = groups * wg // sub
        out = dev.allocate(warps * m * n_ * 4)
        bufs, consts, workgroups = [ab, out], [iters], (groups, 1, 1)
        mb.metrics = {"flops": float(warps) * iters * 4 * 2 * m * n_ * k}
        check = _check_finite(out)
    elif kind in ("gemm-f16", "gemm-bf16"):
        bufs, consts, workgroups, check = _prepare_gemm(mb, mk)
    else:  # latency
        buf = dev.allocate(256)
        bufs, consts, workgroups = [buf], [], (1, 1, 1)
        if kind in ("latency-replay", "latency-chain"):
            mb.metrics = {"dispatches": float(p["dispatches"])}
    mb._buffers += bufs
    exe = dev.load_executable(mk.binary)
    repeats = int(p.get("dispatches", 1)) if kind in ("latency-replay", "latency-chain") else 1
    _record(mb, exe, workgroups, bufs, consts, repeats, check, barriers=kind == "latency-chain")


def _poison(dev: Device, buf: Any) -> None:
    """Fill an output with NaNs on the device, so a kernel that skips elements cannot pass on
    what an earlier benchmark left at the same address."""
    cb = dev.command_buffer()
    cb.fill(buf, 0xFFFFFFFF)
    cb.end()
    dev.submit(cb).wait(timeout_s=60)


def _validate(kind: str, p: dict[str, Any]) -> None:
    """One-line errors for parameters the kernels cannot take (before anything is built)."""
    if kind.startswith("bandwidth-") and int(p["bytes"]) // 16 >= 1 << 31:
        raise UserError(f"{kind}: bytes {p['bytes']} is too large; use less than 32 GiB")
    if kind == "fma-f32":
        if int(p["iters"]) % int(p["unroll"]):
            raise UserError(f"fma-f32: iters {p['iters']} must be a multiple of unroll {p['unroll']}")
        if int(p["vector"]) not in (1, 4) or int(p["chains"]) % int(p["vector"]) or int(p["chains"]) > 128:
            raise UserError(f"fma-f32: vector must be 1 or 4 and chains (at most 128) a multiple of it; "
                            f"got chains {p['chains']}, vector {p['vector']}")
    if kind == "bandwidth-copy" and int(p["unroll"]) > 16:
        raise UserError(f"bandwidth-copy: unroll {p['unroll']} is too large; use 1 to 16")
    if kind.startswith("gemm-"):
        m, n, k = (int(p[x]) for x in "mnk")
        if max(m * k, n * k, m * n) >= 1 << 31:
            raise UserError(f"{kind}: m={m}, n={n}, k={k} makes a matrix of 2^31 elements or more; use "
                            f"smaller sizes")


def _prepare_gemm(mb: MicroBenchmark, mk: Any):
    """A [m, k] and B [n, k] random in [-1, 1), C [m, n]; checked on a sample of rows."""
    dev, p = mb.device, mb.params
    m, n, k = (int(p[x]) for x in "mnk")
    bm, bn, bk = mk.tile
    if m % bm or n % bn or k % bk:
        raise UserError(f"{mb.kind}: m={m}, n={n}, k={k} must be multiples of the {bm}x{bn}x{bk} tile of "
                        f"{dev.uri}'s kernel; round the sizes up")
    bf16 = mb.kind == "gemm-bf16"
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    if bf16:
        from halbench.kernels.micro import bf16_to_f32, f32_to_bf16

        a_bits, b_bits = f32_to_bf16(a), f32_to_bf16(b)
        a, b = bf16_to_f32(a_bits), bf16_to_f32(b_bits)
    else:
        a_bits, b_bits = a.astype(np.float16), b.astype(np.float16)
        a, b = a_bits.astype(np.float32), b_bits.astype(np.float32)
    bufs = [dev.allocate(m * k * 2), dev.allocate(n * k * 2), dev.allocate(m * n * 2)]
    bufs[0].write(a_bits)
    bufs[1].write(b_bits)
    _poison(dev, bufs[2])
    mb.metrics = {"flops": 2.0 * m * n * k}
    rows = np.arange(m) if m <= 512 else np.unique(np.concatenate(
        [np.arange(0, m, max(1, m // 192)), np.arange(m - 64, m), rng.integers(0, m, 64)]))
    want = a[rows] @ b.T  # float32 BLAS: its own error is far below C's rounding
    note = mk.note

    def check() -> dict[str, Any]:
        got = bufs[2].read(np.uint16, m * n).reshape(m, n)[rows]
        got = (got.astype(np.uint32) << 16).view(np.float32) if bf16 else got.view(np.float16).astype(np.float32)
        err = float(np.max(np.abs(got - want))) if want.size else 0.0
        # rounding C to f16 (2^-11) or bf16 (2^-8), plus f32 accumulation over k
        tol = (2.0 ** -7 if bf16 else 2.0 ** -10) * float(np.max(np.abs(want))) + 1e-3
        return {"checked": True, "passed": bool(np.all(np.isfinite(got)) and err <= tol),
                "max_abs_error": err, "tolerance": tol,
                "note": f"{len(rows)} of {m} rows against NumPy" + (f"; {note}" if note else "")}

    groups = (m // bm) * (n // bn)
    return bufs, [m, n, k], (min(groups, getattr(mk, "max_workgroups", None) or groups), 1, 1), check


def _record(mb: MicroBenchmark, exe, workgroups, bufs, consts, repeats: int, check,
            barriers: bool = False) -> None:
    dev = mb.device
    entry = next(iter(exe.entries))
    # a chain is timed whole (two timestamps), as a model is: CUDA's per-dispatch events would
    # add their own cost to every dispatch
    cb = dev.command_buffer(profile=True, dispatch_times=not barriers)
    for i in range(repeats):
        if barriers and i:
            cb.barrier()
        cb.dispatch(exe, entry, workgroups, bufs, consts)
    cb.end()
    mb.format = exe.format

    def run() -> Sample:
        t0 = time.perf_counter_ns()
        sub = dev.submit(cb)
        sub.wait(timeout_s=120)
        host = (time.perf_counter_ns() - t0) / 1e6
        prof = sub.profile()
        return Sample(prof.total_ns / 1e6, host, prof)

    mb._run, mb._check = run, check


def _check_eq(buf, expected: np.ndarray):
    def check() -> dict[str, Any]:
        got = buf.read(np.float32, expected.shape)
        err = float(np.max(np.abs(got - expected))) if expected.size else 0.0
        return {"checked": True, "passed": bool(err <= 1e-6 * max(1.0, float(np.max(np.abs(expected))))),
                "max_abs_error": err, "tolerance": 1e-6}
    return check


@functools.lru_cache(maxsize=8)
def dot_int8_expected(iters: int) -> np.ndarray:
    """What the dot-int8 kernel writes for threads with ``gid & 3`` = 0..3: 16 chains each,
    ``x[j] = 16 * (gid & 3) + j``, then ``iters`` times ``x += dot4(x, b)`` on signed bytes with
    ``b = 0x7f817f81`` (bytes -127, 127, -127, 127 from the least significant), wrapping at 32
    bits; the sum of the chains as float32. (That ``b`` never brings a chain back to its start,
    so a kernel that skipped iterations cannot pass.)"""
    b = np.array([-127, 127, -127, 127], np.int64)
    x = (16 * np.arange(4)[:, None] + np.arange(16)[None, :]).astype(np.int64)
    shifts = 8 * np.arange(4)
    for _ in range(iters):
        lanes = (x[..., None] >> shifts) & 0xFF
        lanes = np.where(lanes > 127, lanes - 256, lanes)
        x = ((x + lanes @ b + 2**31) % 2**32) - 2**31
    s = ((x.sum(axis=1) + 2**31) % 2**32) - 2**31
    return s.astype(np.int32).astype(np.float32)


def _check_dot_int8(buf, iters: int, note: str = ""):
    def check() -> dict[str, Any]:
        got = buf.read(np.float32)
        want = np.resize(dot_int8_expected(iters), got.shape)  # thread gid gets want[gid & 3]
        bad = int(np.count_nonzero(got != want))
        return {"checked": True, "passed": bad == 0, "max_abs_error": float(np.max(np.abs(got - want))),
                "tolerance": 0.0, "note": f"exact; {bad} of {got.size} threads differ" + (f"; {note}" if note else "")}
    return check


def _check_finite(buf):
    def check() -> dict[str, Any]:
        got = buf.read(np.float32)
        ok = bool(np.all(np.isfinite(got)) and np.any(got != 0))
        return {"checked": True, "passed": ok, "max_abs_error": None, "tolerance": None,
                "note": "output finite and written"}
    return check


# -- transfers ------------------------------------------------------------------------------

def _prepare_transfer(mb: MicroBenchmark) -> None:
    dev, nbytes = mb.device, int(mb.params["bytes"])
    buf = dev.allocate(nbytes)
    mb._buffers.append(buf)
    host = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    buf.write(host)
    mb.metrics = {"bytes": float(nbytes)}
    mb.format = "host"

    if mb.kind == "transfer-h2d":
        def run() -> Sample:
            t0 = time.perf_counter_ns()
            buf.write(host)
            ms = (time.perf_counter_ns() - t0) / 1e6
            return Sample(ms, ms)
    else:
        def run() -> Sample:
            t0 = time.perf_counter_ns()
            buf.read(np.uint8, nbytes)
            ms = (time.perf_counter_ns() - t0) / 1e6
            return Sample(ms, ms)

    def check() -> dict[str, Any]:
        ok = bool(np.array_equal(buf.read(np.uint8, nbytes), host))
        return {"checked": True, "passed": ok, "max_abs_error": 0.0 if ok else None, "tolerance": 0}

    mb._run, mb._check = run, check
