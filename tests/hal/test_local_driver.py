"""What only the local drivers do: the local-v1 format, the kernel registry, how work is split."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import halbench
from halbench.errors import DriverError, UserError, WaitTimeout
from halbench.hal import EntryPoint, ExecutableBinary
from halbench.kernels.format import (
    get_kernel,
    local_binary,
    register_kernel,
    registered_kernels,
    workgroup_xyz,
)
from tests.hal import kernels_local  # noqa: F401  (registers the test.* kernels)
from tests.hal.util import TIMEOUT_S, record

URIS = ["local-sync://", "local-task://"]


@pytest.fixture(params=URIS, ids=lambda u: u.split(":")[0])
def dev(request):
    with halbench.create_device(request.param) as d:
        yield d


def _ep(bindings=1, constants=0, name="main"):
    return EntryPoint(name, bindings, constants)


def test_local_binary_format():
    b = local_binary({"main": ("test.noop", {"k": np.int64(3), "shape": (2, 4)}, _ep()),
                      "other": ("test.add_one", {}, _ep(1, 1, "other"))})
    assert b.format == "local-v1"
    assert [e.name for e in b.entries] == ["main", "other"]
    assert json.loads(b.data) == {"entries": {
        "main": {"kernel": "test.noop", "attrs": {"k": 3, "shape": [2, 4]}},
        "other": {"kernel": "test.add_one", "attrs": {}}}}
    # Deterministic bytes, whatever the order of attrs.
    assert local_binary({"main": ("test.noop", {"b": 1, "a": 2}, _ep())}).data == \
        local_binary({"main": ("test.noop", {"a": 2, "b": 1}, _ep())}).data


def test_local_binary_refuses_bad_entries():
    with pytest.raises(UserError, match="EntryPoint named 'main'"):
        local_binary({"main": ("test.noop", {}, _ep(name="other"))})
    with pytest.raises(UserError, match="JSON"):
        local_binary({"main": ("test.noop", {"x": object()}, _ep())})


def test_unknown_kernel_refused_at_load(dev):
    with pytest.raises(UserError, match="'nope' is not registered.*test.add_one"):
        dev.load_executable(local_binary({"main": ("nope", {}, _ep())}))


def test_shorthand_and_malformed_binaries(dev):
    short = ExecutableBinary("local-v1", json.dumps({"kernel": "test.noop"}).encode(), [_ep()])
    assert dev.load_executable(short).kernels["main"][0].name == "test.noop"
    two = [_ep(), _ep(name="b")]
    for data, match in [(b"\xff", "UTF-8 JSON"), (b"[1]", "entries"),
                        (json.dumps({"kernel": "test.noop"}).encode(), "exactly one entry point"),
                        (json.dumps({"entries": {"main": {"kernel": "test.noop"}}}).encode(), "missing"),
                        (json.dumps({"entries": {"main": {"kernel": "test.noop", "attrs": 1},
                                                 "b": {"kernel": "test.noop"}}}).encode(), "attrs")]:
        with pytest.raises(UserError, match=match):
            dev.load_executable(ExecutableBinary("local-v1", data, two))


def test_registry():
    def k(b, c, a, wg, r):
        pass

    register_kernel("test.registry_probe", k)
    register_kernel("test.registry_probe", k)  # the same function again: fine
    assert get_kernel("test.registry_probe").fn is k
    assert "test.registry_probe" in registered_kernels()

    def other(b, c, a, wg, r):
        pass

    with pytest.raises(UserError, match="already registered"):
        register_kernel("test.registry_probe", other)
    register_kernel("test.registry_probe", other, parallel=False, replace=True)
    assert get_kernel("test.registry_probe").parallel is False


def test_workgroup_xyz():
    x, y, z = workgroup_xyz((3, 2, 2), range(0, 12))
    assert list(zip(x, y, z))[:4] == [(0, 0, 0), (1, 0, 0), (2, 0, 0), (0, 1, 0)]
    assert (x[-1], y[-1], z[-1]) == (2, 1, 1)


def _recording_kernel(name, parallel):
    calls: list[tuple[range, tuple, bool, dict]] = []
    lock = threading.Lock()

    def k(bindings, constants, attrs, workgroups, wg_range):
        with lock:
            calls.append((wg_range, workgroups, bindings[0].flags.writeable, dict(attrs)))
        bindings[0][wg_range.start:wg_range.stop] += 1  # one byte per workgroup

    register_kernel(name, k, parallel=parallel, replace=True)
    return calls


@pytest.mark.parametrize("parallel", [True, False])
def test_workgroups_split(dev, parallel):
    name = f"test.split_{parallel}"
    calls = _recording_kernel(name, parallel)
    exe = dev.load_executable(local_binary({"main": (name, {"tile": 8}, _ep())}))
    buf = dev.allocate(4 * 5 * 6 + 16)
    cb = record(dev, lambda cb: cb.dispatch(exe, "main", (4, 5, 6), [(buf, 16, 120)]))
    dev.submit(cb).wait(TIMEOUT_S)
    assert buf.read().tolist() == [0] * 16 + [1] * 120  # every workgroup exactly once, at the offset
    ranges = sorted((c[0] for c in calls), key=lambda r: r.start)
    assert ranges[0].start == 0 and ranges[-1].stop == 120
    assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:]))
    assert all(c[1] == (4, 5, 6) and c[2] and c[3] == {"tile": 8} for c in calls)
    split = dev.uri.startswith("local-task") and parallel
    assert (len(calls) > 1) == split


def test_failing_kernel_fails_its_submission_and_dependents(dev):
    def boom(b, c, a, wg, r):
        raise IndexError("bad index in kernel")

    register_kernel("test.boom", boom, replace=True)
    exe = dev.load_executable(local_binary({"main": ("test.boom", {}, _ep())}))
    buf = dev.allocate(64)
    sem = dev.semaphore(0)
    bad = dev.submit(record(dev, lambda cb: cb.dispatch(exe, "main", (2, 1, 1), [buf])), signal=[(sem, 1)])
    after = dev.submit(record(dev, lambda cb: cb.fill(buf, 5)), wait=[(sem, 1)])
    with pytest.raises(DriverError, match="KERNEL_FAILED.*bad index") as e:
        bad.wait(TIMEOUT_S)
    assert isinstance(e.value.__cause__, IndexError)
    with pytest.raises(DriverError, match="bad index"):
        after.wait(TIMEOUT_S)
    with pytest.raises(DriverError, match="bad index"):
        sem.wait(1, TIMEOUT_S)
    assert buf.read(np.uint32).tolist() == [0] * 16  # the dependent fill never ran
    # The device itself goes on working.
    dev.submit(record(dev, lambda cb: cb.fill(buf, 6))).wait(TIMEOUT_S)
    assert buf.read(np.uint32).tolist() == [6] * 16


def test_submit_does_not_block(dev):
    """local-sync runs a ready submission inline; local-task hands it to its queue thread."""
    release, entered = threading.Event(), threading.Event()

    def blocker(b, c, a, wg, r):
        entered.set()
        assert release.wait(TIMEOUT_S)

    register_kernel("test.blocker", blocker, parallel=False, replace=True)
    exe = dev.load_executable(local_binary({"main": ("test.blocker", {}, _ep())}))
    buf = dev.allocate(64)
    cb = record(dev, lambda cb: cb.dispatch(exe, "main", (1, 1, 1), [buf]))
    if dev.uri.startswith("local-sync"):
        release.set()
        sub = dev.submit(cb)
        assert sub.done  # ran inline before submit returned
        return
    sub = dev.submit(cb)
    assert entered.wait(TIMEOUT_S) and not sub.done
    with pytest.raises(WaitTimeout):
        sub.wait(0.05)
    release.set()
    sub.wait(TIMEOUT_S)
    assert sub.done


def test_close_with_pending_submission(request):
    dev = halbench.create_device("local-task://")
    buf = dev.allocate(64)
    sem = dev.semaphore(0)
    sub = dev.submit(record(dev, lambda cb: cb.fill(buf, 1)), wait=[(sem, 1)])
    dev.close()  # never signalled: dropped, not waited for
    with pytest.raises(UserError, match="closed"):
        sub.wait(TIMEOUT_S)


def test_freed_buffer_in_recorded_command_buffer(dev):
    buf = dev.allocate(64)
    cb = record(dev, lambda cb: cb.fill(buf, 1))
    buf.free()
    with pytest.raises(UserError, match="freed"):
        dev.submit(cb)


def test_no_device_address(dev):
    with pytest.raises(UserError, match="no device address"):
        dev.allocate(16).device_address


def test_info(dev):
    assert dev.info.driver in ("local-sync", "local-task")
    assert dev.supports("local-v1") and not dev.supports("cuda-ptx-v1")
    assert dev.uri == f"{dev.info.driver}://0"
