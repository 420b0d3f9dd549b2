"""Transfer commands (fill, copy), barriers, and one command buffer submitted many times."""

from __future__ import annotations

import numpy as np
import pytest

from tests.hal.util import TIMEOUT_S, groups, pattern, record, run


@pytest.mark.parametrize("size,value", [(1, 0xA5), (2, 0xBEEF), (4, 0x12345678)])
def test_fill_patterns(device, size, value):
    buf = device.allocate(4096)
    before = pattern(4096, seed=1)
    buf.write(before)
    run(device, lambda cb: cb.fill(buf, value, offset=256, nbytes=1024, pattern_size=size))
    got = buf.read()
    expect = np.frombuffer(value.to_bytes(size, "little") * (1024 // size), dtype=np.uint8)
    np.testing.assert_array_equal(got[256:1280], expect)
    np.testing.assert_array_equal(got[:256], before[:256])
    np.testing.assert_array_equal(got[1280:], before[1280:])


def test_fill_bytes_pattern_and_whole_buffer(device):
    buf = device.allocate(1 << 16)
    buf.write(pattern(1 << 16))
    run(device, lambda cb: cb.fill(buf, b"\x01\x02"))
    assert buf.read(np.uint16).tolist() == [0x0201] * (1 << 15)
    run(device, lambda cb: cb.fill(buf, 0))
    assert not buf.read().any()


def test_copy(device):
    src, dst = device.allocate(8192), device.allocate(8192)
    data, before = pattern(8192, seed=2), pattern(8192, seed=3)
    src.write(data)
    dst.write(before)
    run(device, lambda cb: cb.copy(src, dst, src_offset=512, dst_offset=1024, nbytes=4096))
    got = dst.read()
    np.testing.assert_array_equal(got[1024:5120], data[512:4608])
    np.testing.assert_array_equal(got[:1024], before[:1024])
    np.testing.assert_array_equal(got[5120:], before[5120:])
    np.testing.assert_array_equal(src.read(), data)  # the source is only read


def test_copy_whole_and_within_one_buffer(device):
    src, dst = device.allocate(4096), device.allocate(4096)
    src.write(pattern(4096, seed=4))
    run(device, lambda cb: cb.copy(src, dst))
    np.testing.assert_array_equal(dst.read(), pattern(4096, seed=4))
    run(device, lambda cb: cb.copy(dst, dst, src_offset=0, dst_offset=2048, nbytes=2048))
    got = dst.read()
    np.testing.assert_array_equal(got[2048:], got[:2048])
    np.testing.assert_array_equal(got[:2048], pattern(4096, seed=4)[:2048])


def test_barrier_orders_commands(device, build):
    """fill -> copy -> dispatch -> copy, each depending on the one before through a barrier."""
    n = 1000
    a, b, c = device.allocate(4 * n), device.allocate(4 * n), device.allocate(4 * n)
    exe = build("add_one")

    def rec(cb):
        cb.fill(a, 41)
        cb.barrier()
        cb.copy(a, b)
        cb.barrier()
        cb.dispatch(exe, "main", (groups(n, 64), 1, 1), [b], [n])
        cb.barrier()
        cb.copy(b, c)

    run(device, rec)
    assert a.read(np.uint32).tolist() == [41] * n
    assert c.read(np.uint32).tolist() == [42] * n


def test_resubmit(device, build):
    """One recorded command buffer, submitted 10 times: each submission adds exactly one."""
    n = 333
    buf = device.allocate(4 * n)
    start = np.arange(n, dtype=np.uint32) * 3
    buf.write(start)
    cb = record(device, lambda cb: cb.dispatch(build("add_one"), "main", (groups(n, 64), 1, 1), [buf], [n]))
    for _ in range(10):
        device.submit(cb).wait(TIMEOUT_S)
    np.testing.assert_array_equal(buf.read(np.uint32), start + 10)


def test_resubmit_sees_host_writes(device, build):
    """A recorded command buffer reads the buffer's contents at submit time, not record time."""
    n = 64
    src, dst = device.allocate(4 * n), device.allocate(4 * n)
    cb = record(device, lambda cb: cb.copy(src, dst))
    for k in (7, 8):
        src.write(np.full(n, k, dtype=np.uint32))
        device.submit(cb).wait(TIMEOUT_S)
        assert dst.read(np.uint32).tolist() == [k] * n


def test_empty_command_buffer(device):
    sub = device.submit(record(device, lambda cb: None))
    sub.wait(TIMEOUT_S)
    assert sub.done
