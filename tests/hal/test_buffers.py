"""Buffer round trips: host -> device -> host, whole and at offsets, 1 B to 256 MiB."""

from __future__ import annotations

import numpy as np
import pytest

from tests.hal.util import pattern

MiB = 1 << 20
SIZES = [1, 3, 4096, MiB + 7]


@pytest.mark.parametrize("nbytes", SIZES + [256 * MiB], ids=lambda n: f"{n}B")
def test_round_trip(device, nbytes):
    buf = device.allocate(nbytes)
    try:
        assert buf.nbytes == nbytes
        data = pattern(nbytes, seed=1)
        buf.write(data)
        np.testing.assert_array_equal(buf.read(np.uint8), data)
        if nbytes >= 4096:  # a second write replaces the first everywhere it covers
            data2 = pattern(nbytes, seed=2)
            buf.write(data2)
            got = buf.read()
            assert got[0] == data2[0] and got[-1] == data2[-1]
            np.testing.assert_array_equal(got, data2)
    finally:
        buf.free()


@pytest.mark.parametrize("offset", [4, 256, 4096 + 3])
@pytest.mark.parametrize("nbytes", SIZES, ids=lambda n: f"{n}B")
def test_round_trip_at_offset(device, nbytes, offset):
    buf = device.allocate(offset + nbytes + 64)
    try:
        around = pattern(buf.nbytes, seed=3)
        buf.write(around)
        data = pattern(nbytes, seed=4)
        buf.write(data, offset=offset)
        np.testing.assert_array_equal(buf.read(np.uint8, nbytes, offset=offset), data)
        # Bytes on both sides of the written range are untouched.
        got = buf.read()
        np.testing.assert_array_equal(got[:offset], around[:offset])
        np.testing.assert_array_equal(got[offset + nbytes:], around[offset + nbytes:])
    finally:
        buf.free()


def test_write_accepts_bytes_and_typed_arrays(device):
    buf = device.allocate(64)
    buf.write(b"\x01\x02\x03\x04" * 16)
    assert buf.read(np.uint32, 16).tolist() == [0x04030201] * 16
    values = np.arange(16, dtype=np.float32) + 0.5
    buf.write(values)
    np.testing.assert_array_equal(buf.read(np.float32, (4, 4)), values.reshape(4, 4))
    buf.write(bytearray(b"\xff" * 8), offset=8)
    assert buf.read(np.uint8, 8, offset=8).tolist() == [255] * 8
    np.testing.assert_array_equal(buf.read(np.float32, 2, offset=0), values[:2])


def test_buffers_are_independent(device):
    a, b = device.allocate(4096), device.allocate(4096)
    a.write(pattern(4096, seed=5))
    b.write(pattern(4096, seed=6))
    np.testing.assert_array_equal(a.read(), pattern(4096, seed=5))
    np.testing.assert_array_equal(b.read(), pattern(4096, seed=6))


def test_many_small_buffers(device):
    bufs = [device.allocate(256) for _ in range(200)]
    for i, buf in enumerate(bufs):
        buf.write(pattern(256, seed=i))
    for i, buf in enumerate(bufs):
        np.testing.assert_array_equal(buf.read(), pattern(256, seed=i))
    for buf in bufs:
        buf.free()
