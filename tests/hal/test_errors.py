"""Clear UserErrors for bad arguments and bad states, on every driver."""

from __future__ import annotations

import numpy as np
import pytest

import halbench
from halbench.drivers import known_formats
from halbench.errors import UserError
from halbench.hal import EntryPoint, ExecutableBinary
from tests.hal.util import TIMEOUT_S, f32_bits, record, run


@pytest.fixture
def scale_add_args(device):
    bufs = [device.allocate(4096) for _ in range(3)]
    return bufs, [64, f32_bits(1.0)]


def _dispatch_error(device, exe, bindings, constants, workgroups=(1, 1, 1)):
    cb = device.command_buffer()
    with pytest.raises(UserError) as e:
        cb.dispatch(exe, "main", workgroups, bindings, constants)
    return str(e.value)


def test_wrong_binding_count(device, build, scale_add_args):
    bufs, consts = scale_add_args
    msg = _dispatch_error(device, build("scale_add"), bufs[:2], consts)
    assert "3 bindings" in msg and "got 2" in msg


def test_wrong_constant_count(device, build, scale_add_args):
    bufs, _ = scale_add_args
    msg = _dispatch_error(device, build("scale_add"), bufs, [64])
    assert "2 constants" in msg and "got 1" in msg


def test_constant_out_of_range(device, build, scale_add_args):
    bufs, _ = scale_add_args
    _dispatch_error(device, build("scale_add"), bufs, [64, 1 << 32])


def test_unknown_entry_point(device, build, scale_add_args):
    bufs, consts = scale_add_args
    cb = device.command_buffer()
    with pytest.raises(UserError, match="no entry point 'nope'.*main"):
        cb.dispatch(build("scale_add"), "nope", (1, 1, 1), bufs, consts)


def test_bad_workgroups(device, build, scale_add_args):
    bufs, consts = scale_add_args
    _dispatch_error(device, build("scale_add"), bufs, consts, workgroups=(0, 1, 1))
    _dispatch_error(device, build("scale_add"), bufs, consts, workgroups=(1, 1))


def test_misaligned_binding_offset(device, build, scale_add_args):
    bufs, consts = scale_add_args
    align = device.binding_alignment
    if align == 1:
        pytest.skip(f"{device.uri} binds at any byte offset")
    msg = _dispatch_error(device, build("scale_add"), [(bufs[0], align + 1, 256), bufs[1], bufs[2]], consts)
    assert f"multiple of {align}" in msg


def test_out_of_range_binding(device, build, scale_add_args):
    bufs, consts = scale_add_args
    exe = build("scale_add")
    msg = _dispatch_error(device, exe, [(bufs[0], 4096 - 256, 512), bufs[1], bufs[2]], consts)
    assert "outside the buffer" in msg
    _dispatch_error(device, exe, [(bufs[0], 8192, 16), bufs[1], bufs[2]], consts)
    _dispatch_error(device, exe, [(bufs[0], 0, 0), bufs[1], bufs[2]], consts)
    _dispatch_error(device, exe, [("not a buffer", 0, 16), bufs[1], bufs[2]], consts)


def test_out_of_range_transfers(device):
    buf, other = device.allocate(1024), device.allocate(1024)
    with pytest.raises(UserError, match="outside the buffer"):
        buf.write(np.zeros(300, dtype=np.float32))
    with pytest.raises(UserError, match="outside the buffer"):
        buf.write(b"x", offset=1024)
    with pytest.raises(UserError, match="outside the buffer"):
        buf.read(np.uint8, 16, offset=1020)
    with pytest.raises(UserError):
        buf.write([1, 2, 3])  # not an array or bytes
    cb = device.command_buffer()
    with pytest.raises(UserError, match="outside the buffer"):
        cb.copy(buf, other, src_offset=512, nbytes=1024)
    with pytest.raises(UserError, match="outside the buffer"):
        cb.fill(buf, 0, offset=1024, nbytes=4)
    with pytest.raises(UserError, match="multiples"):
        cb.fill(buf, 0, offset=2, nbytes=4)
    with pytest.raises(UserError, match="1, 2 or 4 bytes"):
        cb.fill(buf, b"abc")
    with pytest.raises(UserError, match="does not fit"):
        cb.fill(buf, 256, pattern_size=1)
    with pytest.raises(UserError, match="overlap"):
        cb.copy(buf, buf, 0, 256, 512)


def test_nonpositive_allocation(device):
    for n in (0, -4):
        with pytest.raises(UserError, match="positive"):
            device.allocate(n)


def test_unsupported_format(device):
    other = [f for f in known_formats() if not device.supports(f)]
    if not other:
        pytest.skip(f"{device.uri} supports every format")
    binary = ExecutableBinary(other[0], b"\0" * 16, [EntryPoint("main", 1)])
    with pytest.raises(UserError, match=f"cannot load '{other[0]}'"):
        device.load_executable(binary)


def test_freed_buffer(device, build):
    buf = device.allocate(256)
    buf.free()
    buf.free()  # twice is harmless
    with pytest.raises(UserError, match="freed"):
        buf.write(b"\0" * 4)
    with pytest.raises(UserError, match="freed"):
        buf.read()
    cb = device.command_buffer()
    with pytest.raises(UserError, match="freed"):
        cb.dispatch(build("add_one"), "main", (1, 1, 1), [buf], [1])
    with pytest.raises(UserError, match="freed"):
        cb.fill(buf, 0)


def test_recording_after_end(device, build):
    buf = device.allocate(256)
    cb = device.command_buffer()
    cb.fill(buf, 1)
    cb.end()
    with pytest.raises(UserError, match="already ended"):
        cb.fill(buf, 2)
    with pytest.raises(UserError, match="already ended"):
        cb.dispatch(build("add_one"), "main", (1, 1, 1), [buf], [64])
    with pytest.raises(UserError, match="already ended"):
        cb.end()
    device.submit(cb).wait(TIMEOUT_S)
    assert buf.read(np.uint32).tolist() == [1] * 64  # the refused commands were not recorded


def test_submit_unended(device):
    cb = device.command_buffer()
    with pytest.raises(UserError, match="end()"):
        device.submit(cb)


def test_timings_before_wait(device, build):
    buf = device.allocate(256)
    sem = device.semaphore(0)
    cb = record(device, lambda cb: cb.dispatch(build("noop"), "main", (1, 1, 1), [buf]), profile=True)
    sub = device.submit(cb, wait=[(sem, 1)])
    with pytest.raises(UserError, match="wait"):
        sub.timings()
    sem.signal(1)
    sub.wait(TIMEOUT_S)
    assert len(sub.timings()) == 1


def test_semaphore_signal_must_grow(device):
    sem = device.semaphore(5)
    with pytest.raises(UserError, match="greater"):
        sem.signal(5)
    with pytest.raises(UserError, match="greater"):
        sem.signal(3)
    assert sem.value == 5
    with pytest.raises(UserError):
        device.semaphore(-1)


def test_bad_semaphore_arguments(device):
    cb = record(device, lambda cb: None)
    sem = device.semaphore(0)
    with pytest.raises(UserError, match="pairs"):
        device.submit(cb, wait=[sem])
    with pytest.raises(UserError, match="finite timeout"):
        sem.wait(1, timeout_s=None)
    with pytest.raises(UserError, match="finite"):
        sem.wait(1, timeout_s=float("inf"))


def test_closed_device(device, backend):
    dev = halbench.create_device(backend.uri)  # its own device: the shared one stays open
    buf = dev.allocate(64)
    sem = dev.semaphore(0)
    cb = record(dev, lambda cb: cb.fill(buf, 3))
    dev.close()
    dev.close()  # twice is harmless
    assert dev.closed
    for call in (lambda: dev.allocate(64), lambda: dev.command_buffer(), lambda: dev.semaphore(),
                 lambda: dev.submit(cb), lambda: sem.signal(1), lambda: sem.value):
        with pytest.raises(UserError, match="closed"):
            call()
    for call in (lambda: buf.write(b"\0" * 4), lambda: buf.read()):  # close() freed it
        with pytest.raises(UserError, match="closed|freed"):
            call()


def test_objects_of_another_device(device, backend):
    other = halbench.create_device(backend.uri)
    try:
        buf = other.allocate(64)
        cb = device.command_buffer()
        with pytest.raises(UserError, match="allocated on"):
            cb.fill(buf, 0)
        with pytest.raises(UserError, match="another device"):
            device.submit(record(device, lambda cb: None), signal=[(other.semaphore(0), 1)])
        with pytest.raises(UserError, match="this device"):
            device.submit(record(other, lambda cb: None))
    finally:
        other.close()


def test_run_helper_still_works_after_errors(device):
    """A refused call leaves the device usable."""
    buf = device.allocate(64)
    with pytest.raises(UserError):
        buf.write(b"\0" * 65)
    run(device, lambda cb: cb.fill(buf, 9))
    assert buf.read(np.uint32).tolist() == [9] * 16
