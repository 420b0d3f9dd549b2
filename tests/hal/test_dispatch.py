"""Dispatches of the contract kernels (backends.py): results checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from tests.hal.util import f32_bits, groups, rand_f32, rand_int_f32, run

SENTINEL = np.float32(-7.25)


def _sum_tree(x: np.ndarray, n: int) -> np.ndarray:
    padded = np.zeros(groups(n, 256) * 256, dtype=np.float64)
    padded[:n] = x[:n]
    return padded.reshape(-1, 256).sum(axis=1).astype(np.float32)


def test_entry_point_abi(build):
    exe = build("scale_add")
    ep = exe.entry("main")
    assert (ep.bindings, ep.constants, ep.workgroup_size) == (3, 2, (64, 1, 1))
    assert build("many_bindings").entry("main").bindings == 8


@pytest.mark.parametrize("n", [1, 64, 1000, 65536 + 3])
def test_scale_add(device, build, n):
    a, b = rand_f32(n, seed=n), rand_f32(n, seed=n + 1)
    alpha = np.float32(1.75)
    ba, bb, bout = device.allocate(4 * n), device.allocate(4 * n), device.allocate(4 * n + 256)
    ba.write(a)
    bb.write(b)
    bout.write(np.full(n + 64, SENTINEL, dtype=np.float32))
    run(device, lambda cb: cb.dispatch(build("scale_add"), "main", (groups(n, 64), 1, 1), [ba, bb, bout],
                                       [n, f32_bits(alpha)]))
    got = bout.read(np.float32)
    # Positive inputs: no cancellation, so a fused multiply-add differs by at most an ulp or so.
    np.testing.assert_allclose(got[:n], alpha * a + b, rtol=1e-6, atol=0)
    assert (got[n:] == SENTINEL).all(), "the kernel wrote past n"


def test_scale_add_extra_workgroups_stay_in_bounds(device, build):
    n = 100
    ba, bb, bout = device.allocate(4 * n), device.allocate(4 * n), device.allocate(4096)
    ba.write(rand_f32(n, 1))
    bb.write(rand_f32(n, 2))
    bout.write(np.full(1024, SENTINEL, dtype=np.float32))
    run(device, lambda cb: cb.dispatch(build("scale_add"), "main", (8, 1, 1), [ba, bb, (bout, 0, 4 * n)],
                                       [n, f32_bits(2.0)]))
    got = bout.read(np.float32)
    np.testing.assert_allclose(got[:n], 2.0 * rand_f32(n, 1) + rand_f32(n, 2), rtol=1e-6)
    assert (got[n:] == SENTINEL).all()


def test_bindings_with_offsets(device, build):
    """Three bindings carved out of one buffer at 256-byte offsets: (buffer, offset, length)."""
    n = 1000
    span = 4096  # >= 4 * n, a multiple of 256
    big = device.allocate(256 + 3 * span + 256)
    a, b = rand_f32(n, 10), rand_f32(n, 11)
    big.write(np.full(big.nbytes // 4, SENTINEL, dtype=np.float32))
    big.write(a, offset=256)
    big.write(b, offset=256 + span)
    out_off = 256 + 2 * span
    run(device, lambda cb: cb.dispatch(
        build("scale_add"), "main", (groups(n, 64), 1, 1),
        [(big, 256, 4 * n), (big, 256 + span, 4 * n), (big, out_off, 4 * n)], [n, f32_bits(-0.5)]))
    got = big.read(np.float32)
    np.testing.assert_allclose(got[out_off // 4:out_off // 4 + n], np.float32(-0.5) * a + b, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(got[256 // 4:256 // 4 + n], a)  # inputs untouched
    assert (got[out_off // 4 + n:] == SENTINEL).all()
    assert (got[:256 // 4] == SENTINEL).all()


def test_same_buffer_bound_twice(device, build):
    n = 256
    x, out = device.allocate(4 * n), device.allocate(4 * n)
    data = rand_f32(n, 3)
    x.write(data)
    run(device, lambda cb: cb.dispatch(build("scale_add"), "main", (groups(n, 64), 1, 1), [x, x, out],
                                       [n, f32_bits(3.0)]))
    np.testing.assert_allclose(out.read(np.float32), np.float32(3.0) * data + data, rtol=1e-6)


@pytest.mark.parametrize("n", [1, 255, 256, 256 * 37 + 5])
def test_reduce_sum(device, build, n):
    g = groups(n, 256)
    x = rand_int_f32(n, seed=n)
    x[x == 0] = 1  # a dropped element always changes the sum's expectation
    bx, bout = device.allocate(4 * n), device.allocate(4 * g + 64)
    bx.write(x)
    bout.write(np.full(g + 16, SENTINEL, dtype=np.float32))
    run(device, lambda cb: cb.dispatch(build("reduce_sum"), "main", (g, 1, 1), [bx, bout], [n]))
    got = bout.read(np.float32)
    np.testing.assert_array_equal(got[:g], _sum_tree(x, n))  # integer-valued: exact
    assert (got[g:] == SENTINEL).all()


def test_many_bindings(device, build):
    n = 777
    ins = [rand_int_f32(n, seed=k, lo=1, hi=50) for k in range(7)]
    bufs = [device.allocate(4 * n) for _ in range(8)]
    for buf, data in zip(bufs, ins):
        buf.write(data)
    bufs[7].write(np.full(n, SENTINEL, dtype=np.float32))
    run(device, lambda cb: cb.dispatch(build("many_bindings"), "main", (groups(n, 64), 1, 1), bufs, [n]))
    expect = sum((k + 1) * ins[k].astype(np.float64) for k in range(7)).astype(np.float32)
    np.testing.assert_array_equal(bufs[7].read(np.float32), expect)


def test_add_one(device, build):
    n = 1000
    buf = device.allocate(4 * n + 64)
    start = np.arange(n + 16, dtype=np.uint32) * 5
    buf.write(start)
    run(device, lambda cb: cb.dispatch(build("add_one"), "main", (groups(n, 64), 1, 1), [buf], [n]))
    got = buf.read(np.uint32)
    np.testing.assert_array_equal(got[:n], start[:n] + 1)
    np.testing.assert_array_equal(got[n:], start[n:])


def test_noop(device, build):
    buf = device.allocate(256)
    buf.write(np.arange(64, dtype=np.uint32))
    run(device, lambda cb: [cb.dispatch(build("noop"), "main", (1, 1, 1), [buf]) for _ in range(3)])
    assert buf.read(np.uint32).tolist() == list(range(64))


def test_dependent_dispatches(device, build):
    """scale_add, a barrier, then reduce_sum over its output, in one command buffer."""
    n = 4096
    a, b = rand_int_f32(n, 20), rand_int_f32(n, 21)
    ba, bb, mid, out = (device.allocate(4 * n), device.allocate(4 * n), device.allocate(4 * n),
                        device.allocate(4 * 16))
    ba.write(a)
    bb.write(b)

    def rec(cb):
        cb.dispatch(build("scale_add"), "main", (groups(n, 64), 1, 1), [ba, bb, mid], [n, f32_bits(2.0)])
        cb.barrier()
        cb.dispatch(build("reduce_sum"), "main", (16, 1, 1), [mid, out], [n])

    run(device, rec)
    np.testing.assert_array_equal(out.read(np.float32), _sum_tree(2 * a + b, n))


def test_many_dispatches_in_one_command_buffer(device, build):
    n = 64
    buf = device.allocate(4 * n)
    buf.write(np.zeros(n, dtype=np.uint32))

    def rec(cb):
        for _ in range(100):
            cb.dispatch(build("add_one"), "main", (1, 1, 1), [buf], [n])
            cb.barrier()

    run(device, rec)
    assert buf.read(np.uint32).tolist() == [100] * n
