"""Small helpers shared by the HAL conformance tests."""

from __future__ import annotations

from typing import Callable

import numpy as np

from halbench.hal import CommandBuffer, Device, Submission

TIMEOUT_S = 30.0


def pattern(nbytes: int, seed: int = 0) -> np.ndarray:
    """``nbytes`` bytes where every 4-byte word differs: a shifted or misplaced copy shows."""
    words = (np.arange((nbytes + 3) // 4, dtype=np.uint32) * np.uint32(2654435761)
             + np.uint32(seed * 7919 + 1))
    return words.view(np.uint8)[:nbytes]


def rand_f32(n: int, seed: int, lo: float = 0.5, hi: float = 2.0) -> np.ndarray:
    """Random float32 in [lo, hi): never zero, so a kernel that wrote nothing shows."""
    return np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float32)


def rand_int_f32(n: int, seed: int, lo: int = -8, hi: int = 9) -> np.ndarray:
    """Integer-valued float32, so sums are exact in any order."""
    return np.random.default_rng(seed).integers(lo, hi, n).astype(np.float32)


def record(device: Device, fn: Callable[[CommandBuffer], None], profile: bool = False) -> CommandBuffer:
    cb = device.command_buffer(profile=profile)
    fn(cb)
    cb.end()
    return cb


def run(device: Device, fn: Callable[[CommandBuffer], None], profile: bool = False) -> Submission:
    """Record, submit and wait for one command buffer."""
    sub = device.submit(record(device, fn, profile))
    sub.wait(TIMEOUT_S)
    return sub


def groups(n: int, size: int) -> int:
    return max(1, -(-n // size))


def f32_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])
