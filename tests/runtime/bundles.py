"""Bundles built by hand from the HAL test kernels (tests/hal/kernels_*.py), with the NumPy
results they must produce. No compiler involved: these test the bundle and runtime alone.

Functions of :func:`build` (N = 1000, not a multiple of the workgroup size, to test tails):

- ``affine(x f32[N]) -> (y f32[N], s f32[4], t f32[N])``:
  t = 2x + w (w a weight stored in a member), y = 0.5t + w, s = reduce_sum(y) per 256, and t
  copied out of a transient buffer (where it lives at offset 4096) into its output.
- ``add(a f32[N], b f32[N]) -> (out f32[N])``: a + b.
- ``rand(x f32[N]) -> (out f32[N])``: x + r, with r a seeded-random weight (normal, scale 1).

Values are integer-valued, so results are exact on every backend (fused multiply-add or not).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from halbench.bundle import (
    BarrierStep,
    BufferDecl,
    BufferRange,
    CopyStep,
    DispatchStep,
    ExecutableDecl,
    FillStep,
    Function,
    Manifest,
    TensorSpec,
    Variant,
    WeightDecl,
    random_weight,
    write_bundle,
)

N = 1000
GROUPS = (N + 255) // 256
T_OFFSET = 4096
SEED = 7
_EXT = {"local-v1": "json", "vulkan-spirv-bda-v1": "spv", "vulkan-spirv-descriptors-v1": "spv"}
_KERNELS = {"local-v1": "tests.hal.kernels_local", "vulkan-spirv-bda-v1": "tests.hal.kernels_vulkan",
            "vulkan-spirv-descriptors-v1": "tests.hal.kernels_vulkan"}


def f32_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def weight_w() -> np.ndarray:
    return (np.arange(N) % 7 - 3).astype(np.float32)


def _exe(eid: int, name: str, kernel: str, formats: tuple[str, ...], workgroups: int,
         constants: tuple[int, ...], members: dict[str, bytes]) -> ExecutableDecl:
    variants = []
    for vi, fmt in enumerate(formats):
        binary = importlib.import_module(_KERNELS[fmt]).build(kernel, fmt)
        member = f"executables/{eid}.{vi}.{_EXT[fmt]}"
        members[member] = binary.data
        variants.append(Variant(fmt, binary.target, member, binary.entries[0], (workgroups, 1, 1), constants))
    return ExecutableDecl(eid, name, tuple(variants))


def manifest(formats: tuple[str, ...] = ("local-v1",)) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest and members of the test bundle, each executable in ``formats``."""
    members: dict[str, bytes] = {"weights/w.bin": weight_w().tobytes()}
    nb = N * 4
    sa = (N + 63) // 64
    exes = (
        _exe(0, "t=2x+w", "scale_add", formats, sa, (N, f32_bits(2.0)), members),
        _exe(1, "y=0.5t+w", "scale_add", formats, sa, (N, f32_bits(0.5)), members),
        _exe(2, "s=sum(y)", "reduce_sum", formats, GROUPS, (N,), members),
        _exe(3, "a+b", "scale_add", formats, sa, (N, f32_bits(1.0)), members),
        _exe(4, "x+r", "scale_add", formats, sa, (N, f32_bits(1.0)), members),
    )
    buffers = (
        BufferDecl(0, nb, "input", "x"), BufferDecl(1, nb, "weight", "w"),
        BufferDecl(2, T_OFFSET + nb, "transient", "t"), BufferDecl(3, nb, "output", "y"),
        BufferDecl(4, GROUPS * 4, "output", "s"), BufferDecl(5, nb, "output", "t"),
        BufferDecl(6, nb, "input", "a"), BufferDecl(7, nb, "input", "b"), BufferDecl(8, nb, "output", "out"),
        BufferDecl(9, nb, "input", "x"), BufferDecl(10, nb, "output", "out"), BufferDecl(11, nb, "weight", "r"),
    )
    weights = (
        WeightDecl("w", 1, "f32", (N,), "file", member="weights/w.bin"),
        WeightDecl("r", 11, "f32", (N,), "random", seed=SEED, init={"distribution": "normal", "scale": 1.0}),
    )
    t = BufferRange(2, T_OFFSET, nb)
    affine = Function(
        "affine",
        (TensorSpec("x", (N,), "f32", 0),),
        (TensorSpec("y", (N,), "f32", 3), TensorSpec("s", (GROUPS,), "f32", 4), TensorSpec("t", (N,), "f32", 5)),
        (DispatchStep(0, (BufferRange(0, 0, nb), BufferRange(1, 0, nb), t), "t=2x+w", flops=2 * N, bytes=3 * nb),
         BarrierStep(),
         DispatchStep(1, (t, BufferRange(1, 0, nb), BufferRange(3, 0, nb)), "y=0.5t+w", flops=2 * N, bytes=3 * nb),
         FillStep(4, 0, GROUPS * 4, f32_bits(-1.0)),  # overwritten below: checks order
         BarrierStep(),
         DispatchStep(2, (BufferRange(3), BufferRange(4)), "s=sum(y)", flops=N, bytes=nb + GROUPS * 4),
         CopyStep(BufferRange(2, T_OFFSET), BufferRange(5, 0), nb),
         BarrierStep()),
    )
    add = Function("add", (TensorSpec("a", (N,), "f32", 6), TensorSpec("b", (N,), "f32", 7)),
                   (TensorSpec("out", (N,), "f32", 8),),
                   (DispatchStep(3, (BufferRange(6), BufferRange(7), BufferRange(8)), "a+b"),))
    rand = Function("rand", (TensorSpec("x", (N,), "f32", 9),), (TensorSpec("out", (N,), "f32", 10),),
                    (DispatchStep(4, (BufferRange(9), BufferRange(11), BufferRange(10)), "x+r"),))
    m = Manifest(buffers, exes, (affine, add, rand), weights, created_by="tests/runtime/bundles.py",
                 options={"target_devices": sorted(set(formats))})
    return m, members


def build(path: Any, formats: tuple[str, ...] = ("local-v1",)) -> Manifest:
    """Write the test bundle to ``path``; returns its manifest (with hashes)."""
    m, members = manifest(formats)
    return write_bundle(path, m, members)


def x_input(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-8, 9, N).astype(np.float32)


def expected_affine(x: np.ndarray) -> list[np.ndarray]:
    w = weight_w()
    t = np.float32(2.0) * x + w
    y = np.float32(0.5) * t + w
    s = np.zeros(GROUPS * 256, np.float32)
    s[:N] = y
    return [y, s.reshape(GROUPS, 256).sum(axis=1, dtype=np.float32), t]


def expected_rand(x: np.ndarray) -> np.ndarray:
    return x + random_weight("f32", (N,), SEED, {"distribution": "normal", "scale": 1.0})


def single_function(path: Any) -> Manifest:
    """A bundle with only ``add`` (run-module may then omit --function)."""
    m, members = manifest()
    from dataclasses import replace

    add = m.function("add")
    m = replace(m, functions=(add,), executables=(m.executable(3),), weights=())
    keep = {v.member for v in m.executables[0].variants}
    return write_bundle(path, m, {k: v for k, v in members.items() if k in keep})
