"""Timeline semaphores: host signal/wait, submissions that wait and signal, timeouts."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from halbench.errors import WaitTimeout
from tests.hal.util import TIMEOUT_S, groups, record

N = 256


def _add_one_cb(device, build, buf):
    return record(device, lambda cb: cb.dispatch(build("add_one"), "main", (groups(N, 64), 1, 1), [buf], [N]))


def _u32_buffer(device, value: int):
    buf = device.allocate(4 * N)
    buf.write(np.full(N, value, dtype=np.uint32))
    return buf


def test_host_signal_and_wait(device):
    sem = device.semaphore(2)
    assert sem.value == 2
    sem.signal(5)
    assert sem.value == 5
    sem.wait(5, timeout_s=1)
    sem.wait(3, timeout_s=0)  # already past: returns at once


def test_host_wait_times_out(device):
    sem = device.semaphore(0)
    with pytest.raises(WaitTimeout):
        sem.wait(1, timeout_s=0.05)
    assert sem.value == 0


def test_signal_from_another_thread_wakes_waiter(device):
    sem = device.semaphore(0)
    t = threading.Timer(0.05, sem.signal, (7,))
    t.start()
    try:
        sem.wait(7, timeout_s=TIMEOUT_S)
    finally:
        t.join()
    assert sem.value == 7


def test_submission_signals_after_its_work(device, build):
    buf = _u32_buffer(device, 10)
    sem = device.semaphore(0)
    sub = device.submit(_add_one_cb(device, build, buf), signal=[(sem, 4)])
    sem.wait(4, timeout_s=TIMEOUT_S)
    assert sem.value == 4
    # The semaphore is signalled only once the work is done: its results are there now.
    assert buf.read(np.uint32).tolist() == [11] * N
    sub.wait(TIMEOUT_S)
    assert sub.done


def test_ordering_across_two_submissions(device, build):
    """B waits on sem >= 1 and is submitted before A signals it (A itself waits on a host gate).
    A fills the buffer, B adds one: if B ran before A, the result would be the fill value."""
    buf = _u32_buffer(device, 0)
    gate, sem = device.semaphore(0), device.semaphore(0)
    cb_a = record(device, lambda cb: cb.fill(buf, 100))
    cb_b = _add_one_cb(device, build, buf)
    sub_a = device.submit(cb_a, wait=[(gate, 1)], signal=[(sem, 1)])
    sub_b = device.submit(cb_b, wait=[(sem, 1)], signal=[(sem, 2)])
    assert sem.value == 0 and not sub_b.done
    assert buf.read(np.uint32).tolist() == [0] * N  # nothing ran yet
    gate.signal(1)
    sub_b.wait(TIMEOUT_S)
    assert sub_a.done
    assert sem.value == 2
    assert buf.read(np.uint32).tolist() == [101] * N


def test_wait_on_unsignalled_semaphore_times_out_then_completes(device, build):
    buf = _u32_buffer(device, 1)
    sem = device.semaphore(0)
    sub = device.submit(_add_one_cb(device, build, buf), wait=[(sem, 1)])
    with pytest.raises(WaitTimeout):
        sub.wait(timeout_s=0.2)
    assert not sub.done
    assert buf.read(np.uint32).tolist() == [1] * N
    sem.signal(1)
    sub.wait(TIMEOUT_S)
    assert sub.done
    assert buf.read(np.uint32).tolist() == [2] * N


def test_chain_of_submissions(device, build):
    """Ten submissions of one command buffer, each waiting on the previous one's signal."""
    buf = _u32_buffer(device, 0)
    sem = device.semaphore(0)
    cb = _add_one_cb(device, build, buf)
    subs = [device.submit(cb, wait=[(sem, i)], signal=[(sem, i + 1)]) for i in range(10)]
    sem.wait(10, timeout_s=TIMEOUT_S)
    subs[-1].wait(TIMEOUT_S)
    assert sem.value == 10
    assert buf.read(np.uint32).tolist() == [10] * N


def test_wait_already_satisfied(device, build):
    buf = _u32_buffer(device, 0)
    sem = device.semaphore(3)
    device.submit(_add_one_cb(device, build, buf), wait=[(sem, 2)], signal=[(sem, 9)]).wait(TIMEOUT_S)
    assert sem.value == 9
    assert buf.read(np.uint32).tolist() == [1] * N


def test_several_waits_and_signals(device, build):
    buf = _u32_buffer(device, 0)
    s1, s2, out1, out2 = (device.semaphore(0) for _ in range(4))
    sub = device.submit(_add_one_cb(device, build, buf), wait=[(s1, 1), (s2, 1)],
                        signal=[(out1, 1), (out2, 5)])
    s1.signal(1)
    with pytest.raises(WaitTimeout):
        sub.wait(timeout_s=0.1)  # s2 still holds it back
    s2.signal(1)
    sub.wait(TIMEOUT_S)
    assert (out1.value, out2.value) == (1, 5)
    assert buf.read(np.uint32).tolist() == [1] * N
