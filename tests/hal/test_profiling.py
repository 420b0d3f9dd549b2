"""Profiling: one timing per dispatch, increasing, inside the host window of its submission."""

from __future__ import annotations

import numpy as np
import pytest

from halbench.errors import UserError
from tests.hal.util import TIMEOUT_S, f32_bits, groups, record, run

N = 4096


def _three_dispatches(device, build):
    a, b, out = (device.allocate(4 * N) for _ in range(3))
    a.write(np.ones(N, dtype=np.float32))
    b.write(np.ones(N, dtype=np.float32))

    def rec(cb):
        cb.dispatch(build("scale_add"), "main", (groups(N, 64), 1, 1), [a, b, out], [N, f32_bits(2.0)])
        cb.barrier()
        cb.dispatch(build("add_one"), "main", (groups(N, 64), 1, 1), [a], [N])
        cb.barrier()
        cb.dispatch(build("noop"), "main", (1, 1, 1), [b])

    return rec, out


def _slack(profile) -> float:
    return (profile.deviation_ns or 0) if profile.calibrated else 0


def _check_inside_window(sub) -> None:
    p = sub.profile()
    assert p.host_submit_ns == sub.host_submit_ns and p.host_done_ns == sub.host_done_ns
    assert 0 < p.host_submit_ns <= p.host_done_ns
    if not p.calibrated:
        return  # durations only: absolute times are not on the host clock
    lo, hi = p.host_submit_ns - _slack(p), p.host_done_ns + _slack(p)
    for t in p.dispatches:
        assert lo <= t.start_ns <= t.end_ns <= hi, (t, lo, hi)


def test_one_timing_per_dispatch_in_order(device, build):
    rec, out = _three_dispatches(device, build)
    sub = run(device, rec, profile=True)
    timings = sub.timings()
    assert [t.index for t in timings] == [0, 1, 2]
    assert [t.entry for t in timings] == ["main"] * 3
    for t in timings:
        assert t.start_ns <= t.end_ns and t.duration_ns >= 0
    for prev, nxt in zip(timings, timings[1:]):  # barriers between them: no overlap
        assert prev.end_ns <= nxt.start_ns
    np.testing.assert_array_equal(out.read(np.float32), np.full(N, 3.0, dtype=np.float32))


def test_timings_inside_host_window(device, build):
    rec, _ = _three_dispatches(device, build)
    _check_inside_window(run(device, rec, profile=True))


def test_profile_totals(device, build):
    rec, _ = _three_dispatches(device, build)
    p = run(device, rec, profile=True).profile()
    assert len(p.dispatches) == 3
    assert p.total_ns >= 0
    assert p.total_source in ("timestamps", "unprofiled")
    if p.total_source == "timestamps" and p.calibrated:
        assert p.start_ns <= p.dispatches[0].start_ns
        assert p.dispatches[-1].end_ns <= p.end_ns
        assert p.total_ns == p.end_ns - p.start_ns
    d = p.to_dict()
    assert len(d["dispatches"]) == 3 and d["total_ns"] == p.total_ns


def test_resubmitted_buffer_has_fresh_timings(device, build):
    rec, _ = _three_dispatches(device, build)
    cb = record(device, rec, profile=True)
    first = device.submit(cb)
    first.wait(TIMEOUT_S)
    second = device.submit(cb)
    second.wait(TIMEOUT_S)
    for sub in (first, second):
        assert len(sub.timings()) == 3
        _check_inside_window(sub)
    if first.profile().calibrated and second.profile().calibrated:
        slack = _slack(first.profile()) + _slack(second.profile())
        assert first.timings()[-1].end_ns <= second.timings()[0].start_ns + slack


def test_unprofiled_buffer_has_no_timings(device, build):
    rec, _ = _three_dispatches(device, build)
    sub = run(device, rec, profile=False)
    with pytest.raises(UserError, match="profile=True"):
        sub.timings()


def test_total_only_profile_times_the_whole_submission(device, build):
    """dispatch_times=False: the submission is timed whole, with no timestamps between its
    dispatches, where the driver can (Vulkan, CUDA, HIP); the others time each dispatch as
    before. Either way the result is the same and the total covers the work."""
    rec, out = _three_dispatches(device, build)
    cb = device.command_buffer(profile=True, dispatch_times=False)
    rec(cb)
    cb.end()
    for k in range(2):  # resubmitted: each submission has its own total
        sub = device.submit(cb)
        sub.wait(TIMEOUT_S)
        if k == 0:
            np.testing.assert_array_equal(out.read(np.float32), np.full(N, 3.0, dtype=np.float32))
        p = sub.profile()
        assert p.total_ns > 0
        if p.total_source == "total":
            assert p.dispatches == () and sub.timings() == []
            assert p.host_submit_ns <= p.host_done_ns
            if p.calibrated:
                assert p.end_ns - p.start_ns == p.total_ns
        else:
            assert p.total_source in ("timestamps", "unprofiled") and len(p.dispatches) == 3
    if device.uri.startswith(("vulkan", "cuda", "hip")):
        assert p.total_source == "total"
