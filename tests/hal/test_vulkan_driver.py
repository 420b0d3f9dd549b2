"""Vulkan-specific behaviour: both ABIs and both descriptor paths agree, staging, sub-allocation,
the baseline check, error mapping, the pipeline cache, calibration and timestamp wrap."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from halbench.errors import DeviceLost, DriverError, OutOfDeviceMemory, UserError
from tests.hal.util import TIMEOUT_S, f32_bits, groups, rand_f32, rand_int_f32

BDA, DESC = "vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1"


def _driver():
    from halbench.drivers import get_driver
    from halbench.errors import DriverUnavailable

    try:
        drv = get_driver("vulkan")
        return drv, drv.select("")
    except (DriverUnavailable, UserError) as e:
        pytest.skip(f"vulkan unavailable: {e}")


def _open(**options):
    from halbench.drivers.vulkan.device import create_device

    drv, info = _driver()
    return create_device(drv, info, **options)


@pytest.fixture(scope="module")
def dev():
    d = _open()
    yield d
    d.close()


def _kernel(device, kernel: str, fmt: str):
    from tests.hal.kernels_vulkan import build

    return device.load_executable(build(kernel, fmt))


def _workload(device, fmt: str) -> list[np.ndarray]:
    """scale_add, reduce_sum and many_bindings in one command buffer; returns every output."""
    n = 3000
    a, b = rand_f32(n, 1), rand_f32(n, 2)
    x = rand_int_f32(n, 3)
    ins = [rand_f32(n, 10 + k) for k in range(7)]
    bufs = {k: device.allocate(4 * n) for k in ("a", "b", "o1", "x", "o3")}
    bufs["o2"] = device.allocate(4 * groups(n, 256))
    ib = [device.allocate(4 * n) for _ in ins]
    for k, v in (("a", a), ("b", b), ("x", x)):
        bufs[k].write(v)
    for buf, v in zip(ib, ins):
        buf.write(v)
    cb = device.command_buffer()
    cb.dispatch(_kernel(device, "scale_add", fmt), "main", (groups(n, 64),),
                [bufs["a"], bufs["b"], bufs["o1"]], [n, f32_bits(1.5)])
    cb.dispatch(_kernel(device, "reduce_sum", fmt), "main", (groups(n, 256),), [bufs["x"], bufs["o2"]], [n])
    cb.dispatch(_kernel(device, "many_bindings", fmt), "main", (groups(n, 64),), ib + [bufs["o3"]], [n])
    cb.end()
    device.submit(cb).wait(TIMEOUT_S)
    out = [bufs[k].read(np.float32) for k in ("o1", "o2", "o3")]
    np.testing.assert_allclose(out[0], 1.5 * a + b, rtol=1e-6)
    np.testing.assert_array_equal(out[1], np.add.reduceat(x, np.arange(0, n, 256)))
    return out


def test_both_abis_give_identical_results(dev):
    if BDA not in dev.formats:
        pytest.skip("no bufferDeviceAddress on this device")
    assert dev.formats == (BDA, DESC)  # BDA preferred
    for r_bda, r_desc in zip(_workload(dev, BDA), _workload(dev, DESC)):
        assert r_bda.tobytes() == r_desc.tobytes()


def test_descriptor_sets_match_push_descriptors(dev):
    if not dev.push_descriptors:
        pytest.skip("no VK_KHR_push_descriptor: the default path already uses descriptor sets")
    with _open(push_descriptors=False) as d2:
        assert not d2.push_descriptors and "VK_KHR_push_descriptor" not in d2.extensions
        for r1, r2 in zip(_workload(dev, DESC), _workload(d2, DESC)):
            assert r1.tobytes() == r2.tobytes()


def test_many_descriptor_sets_span_pools():
    with _open(push_descriptors=False) as d:
        exe = _kernel(d, "add_one", DESC)
        buf = d.allocate(4 * 64)
        buf.write(np.zeros(64, np.uint32))
        cb = d.command_buffer()
        for _ in range(150):  # more than one descriptor pool's worth of sets
            cb.dispatch(exe, "main", (1,), [buf], [64])
            cb.barrier()
        cb.end()
        d.submit(cb).wait(TIMEOUT_S)
        assert (buf.read(np.uint32) == 150).all()


@pytest.mark.parametrize("nbytes", [1, 4, 1000, (16 << 20) + 12, 40 << 20])
def test_staging_round_trip(nbytes):
    rng = np.random.default_rng(nbytes)
    data = rng.integers(0, 256, nbytes, dtype=np.uint8)
    with _open(direct_host_access=False) as d:
        buf = d.allocate(nbytes + 16)
        assert buf.block.ptr is None  # really staged
        buf.write(data, offset=16)
        assert buf.read(np.uint8, nbytes, offset=16).tobytes() == data.tobytes()


def test_staging_dispatch_matches_direct(dev):
    with _open(direct_host_access=False) as d:
        for r1, r2 in zip(_workload(dev, DESC), _workload(d, DESC)):
            assert r1.tobytes() == r2.tobytes()


def test_thousands_of_buffers_share_blocks(dev):
    before = len(dev.device_pool.blocks)
    bufs = [dev.allocate(4096) for _ in range(5000)]
    # 5000 x 4 KiB = 20 MiB: one 64 MiB block, not 5000 allocations.
    assert len(dev.device_pool.blocks) - before <= 1
    for i, b in enumerate(bufs[::500]):
        b.write(np.full(1024, i, np.uint32))
    for i, b in enumerate(bufs[::500]):
        assert (b.read(np.uint32) == i).all()
    for b in bufs:
        b.free()
    big = dev.allocate(100 << 20)  # larger than half a block: a dedicated allocation
    assert big.block.dedicated
    big.free()


def test_allocating_more_than_the_heap_is_out_of_memory(dev):
    mem = dev.physical.memory
    heap = max(mem.memoryHeaps[i].size for i in range(mem.memoryHeapCount))
    with pytest.raises(OutOfDeviceMemory) as e:
        dev.allocate(heap + (1 << 30))
    assert e.value.status == "VK_ERROR_OUT_OF_DEVICE_MEMORY" and isinstance(e.value, MemoryError)


def test_below_baseline_device_is_refused_naming_what_it_lacks():
    from halbench.drivers.vulkan.device import create_device
    from halbench.drivers.vulkan.physical import baseline_missing

    drv, info = _driver()
    flags = {**info.features.flags, "synchronization2": False, "timelineSemaphore": False}
    masked = dataclasses.replace(info, features=dataclasses.replace(info.features, flags=flags),
                                 identity=dataclasses.replace(info.identity, api_version="1.2.199"))
    missing = baseline_missing(masked)
    assert missing[0].startswith("Vulkan 1.3") and "synchronization2" in missing and "timelineSemaphore" in missing
    with pytest.raises(UserError, match="synchronization2") as e:
        create_device(drv, masked)
    assert "vulkan-1.3 baseline" in str(e.value) and "Vulkan 1.3" in str(e.value)
    no_compute = dataclasses.replace(info, queues=tuple(dataclasses.replace(q, flags=("transfer",))
                                                        for q in info.queues))
    assert baseline_missing(no_compute) == ["a compute queue"]


def test_device_without_bda_offers_descriptors_only():
    from halbench.drivers.vulkan.device import create_device

    drv, info = _driver()
    masked = dataclasses.replace(info, features=dataclasses.replace(
        info.features, flags={**info.features.flags, "bufferDeviceAddress": False}))
    with create_device(drv, masked) as d:
        assert d.formats == (DESC,) and not d.bda
        _workload(d, DESC)


def test_vkresult_mapping():
    from halbench.drivers.vulkan._vk import check, vk, vk_errors

    with pytest.raises(OutOfDeviceMemory, match="VK_ERROR_OUT_OF_DEVICE_MEMORY"), vk_errors("vkAllocateMemory"):
        raise vk.VkErrorOutOfDeviceMemory()
    with pytest.raises(DriverError) as e:
        check(vk.VK_ERROR_FEATURE_NOT_PRESENT, "vkCreateDevice")
    assert e.value.api == "vulkan" and e.value.status == "VK_ERROR_FEATURE_NOT_PRESENT"
    check(vk.VK_SUCCESS, "nothing")


def test_lost_device_refuses_further_work():
    from halbench.drivers.vulkan._vk import check, vk

    d = _open()
    try:
        buf = d.allocate(64)
        with pytest.raises(DeviceLost, match="VK_ERROR_DEVICE_LOST"):
            check(vk.VK_ERROR_DEVICE_LOST, "vkQueueSubmit2", d)  # what the driver does on any lost call
        assert d.lost
        with pytest.raises(UserError, match="lost"):
            d.command_buffer()
        with pytest.raises(UserError, match="lost"):
            buf.write(b"1234")
    finally:
        d.close()


def test_pipeline_cache_is_persisted(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with _open() as d1:
        assert d1.pipeline_cache.loaded_bytes == 0
        _kernel(d1, "scale_add", DESC)
        path = d1.pipeline_cache.path
    assert path.is_relative_to(tmp_path / "halbench") and path.stat().st_size > 0
    assert not list(path.parent.glob("*.tmp"))  # written atomically, nothing left behind
    with _open() as d2:
        assert d2.pipeline_cache.loaded_bytes == path.stat().st_size
        _kernel(d2, "scale_add", DESC)
        if d2.stats["pipeline_cache_hits"] == 0:
            pytest.skip(f"{d2.info.name} reports no pipeline-cache hits through creation feedback")
        assert d2.stats["pipeline_cache_hits"] == d2.stats["pipelines"]


def _profiled(device, repeats: int = 1):
    buf = device.allocate(4 * 256)
    buf.write(np.zeros(256, np.uint32))
    exe = _kernel(device, "add_one", DESC)
    cb = device.command_buffer(profile=True)
    for _ in range(3):
        cb.dispatch(exe, "main", (4,), [buf], [256])
        cb.barrier()
    cb.end()
    subs = [device.submit(cb) for _ in range(repeats)]
    subs[-1].wait(TIMEOUT_S)
    return buf, subs


def test_calibrated_profile_lies_in_the_submission_window(dev):
    if dev.clock is None or not dev.clock.calibrated:
        pytest.skip("no calibrated timestamps (CLOCK_MONOTONIC) on this device")
    _, (sub,) = _profiled(dev)
    p = sub.profile()
    assert p.calibrated and p.deviation_ns is not None and p.deviation_ns >= 0
    assert sub.host_submit_ns - p.deviation_ns <= p.start_ns <= p.end_ns <= sub.host_done_ns + p.deviation_ns
    starts = [t.start_ns for t in p.dispatches]
    assert starts == sorted(starts) and all(t.duration_ns >= 0 for t in p.dispatches)


def test_resubmitted_profiled_command_buffer_keeps_each_profile(dev):
    buf, subs = _profiled(dev, repeats=3)
    profiles = [s.profile() for s in subs]
    assert (buf.read(np.uint32) == 9).all()
    assert profiles[0].end_ns <= profiles[1].start_ns + 1000 and profiles[1].end_ns <= profiles[2].start_ns + 1000


def test_uncalibrated_profile_keeps_durations():
    with _open(calibrate=False) as d:
        _, (sub,) = _profiled(d)
        p = sub.profile()
        assert not p.calibrated and p.deviation_ns is None
        assert p.total_ns > 0 and all(t.duration_ns >= 0 for t in p.dispatches)
        assert p.end_ns == sub.host_done_ns  # anchored where the host saw it finish


def test_timestamp_wrap_is_unwrapped():
    from halbench.drivers.vulkan.timing import Clock

    clock = object.__new__(Clock)
    clock.bits, clock.mask, clock.period_ns, clock._fn = 32, (1 << 32) - 1, 2.0, None
    # The counter wrapped between the begin and end timestamps of a 48-bit-wide run.
    begin, end = (1 << 32) - 100, 50
    p = clock.profile([begin, end, begin + 10, 20], ["k"], host_submit_ns=0, host_done_ns=10_000)
    assert p.total_ns == 2 * 150 and p.dispatches[0].duration_ns == 2 * (100 - 10 + 20)
    # And around a calibration point: ticks before it are negative deltas, after it positive.
    assert clock._delta(5, (1 << 32) - 5) == 10 and clock._delta((1 << 32) - 5, 5) == -10


def test_queue_family_choice_prefers_compute_only():
    from halbench.drivers.vulkan._vk import vk
    from halbench.drivers.vulkan.device import pick_queue_family

    g, c, t = vk.VK_QUEUE_GRAPHICS_BIT, vk.VK_QUEUE_COMPUTE_BIT, vk.VK_QUEUE_TRANSFER_BIT
    assert pick_queue_family([(g | c | t, 16, 64), (t, 2, 64), (c | t, 8, 64)]) == 2
    assert pick_queue_family([(g | c | t, 1, 64)]) == 0
    assert pick_queue_family([(c | t, 1, 0), (g | c | t, 1, 64), (c | t, 4, 64)]) == 2
    assert pick_queue_family([(t, 1, 64)]) is None


@pytest.mark.parametrize("fmt", ["vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1"])
def test_corrupted_spirv_is_refused_not_run(dev, fmt):
    """A bundle is untrusted: SPIR-V with flipped words (valid magic, hashes recomputed by whoever
    tampered with it) must be a one-line error, never a driver crash."""
    from halbench.hal import ExecutableBinary
    from tests.hal import kernels_vulkan

    good = kernels_vulkan.build("add_one", fmt)
    words = np.frombuffer(good.data, np.uint32).copy()
    words[5:40] ^= np.uint32(0x00FF00FF)
    bad = ExecutableBinary(fmt, words.tobytes(), good.entries, good.target)
    with pytest.raises(UserError, match="spirv-val rejected") as e:
        dev.load_executable(bad)
    assert "\n" not in str(e.value)
    dev.load_executable(good)  # the device still works


def test_bda_bindings_may_be_larger_than_max_storage_buffer_range(dev):
    """maxStorageBufferRange limits a descriptor's range, not a buffer device address: a binding
    larger than it runs through the BDA ABI (a 151-302 MB fully connected weight on lavapipe,
    whose limit is 128 MB: zoo-alexnet and zoo-zfnet512 at 224x224) and is refused in one line
    through descriptors, naming the way out."""
    limit = dev.physical.limits.maxStorageBufferRange
    if limit >= 1 << 30:
        pytest.skip(f"maxStorageBufferRange is {limit} B here: a test buffer past it would be too big")
    n = limit // 4 + 1024
    touched = 64 * 65535  # add_one's 1-D grid: the first 4M elements of the large binding
    buf = dev.allocate(4 * n)
    try:
        buf.write(np.arange(8, dtype=np.uint32), 4 * (touched - 8))  # add_one adds 1 to uint words
        cb = dev.command_buffer()
        cb.dispatch(_kernel(dev, "add_one", BDA), "main", (65535, 1, 1), [buf], [touched])
        cb.end()
        dev.submit(cb).wait(TIMEOUT_S)
        np.testing.assert_array_equal(buf.read(np.uint32, 8, 4 * (touched - 8)), np.arange(8) + 1)
        cb = dev.command_buffer()
        with pytest.raises(UserError, match="maxStorageBufferRange.*bda"):
            cb.dispatch(_kernel(dev, "add_one", DESC), "main", (65535, 1, 1), [buf], [touched])
    finally:
        buf.free()


def test_pipeline_statistics_are_what_the_driver_reports():
    """With ``pipeline_statistics`` on, a device that has VK_KHR_pipeline_executable_properties
    reports each pipeline's statistics (on NVIDIA: registers, shared memory...); one without it
    (Mesa's lavapipe) reports nothing, and the pipelines still run."""
    d = _open(pipeline_statistics=True)
    try:
        has = "VK_KHR_pipeline_executable_properties" in d.physical.extensions
        assert d.pipeline_statistics == has
        exe = _kernel(d, "reduce_sum", "vulkan-spirv-bda-v1" if d.bda else "vulkan-spirv-descriptors-v1")
        res = exe.resources("main")
        if has:
            assert res and all(isinstance(v, (int, float)) for v in res.values()), res
        else:
            assert res == {}
        with pytest.raises(UserError, match="no entry point"):
            exe.resources("nope")
    finally:
        d.close()


@pytest.mark.gpu
def test_nvidia_reports_registers_per_pipeline():
    d = _open(pipeline_statistics=True)
    try:
        if "VK_KHR_pipeline_executable_properties" not in d.physical.extensions:
            pytest.skip("this Vulkan driver has no VK_KHR_pipeline_executable_properties")
        res = _kernel(d, "reduce_sum", "vulkan-spirv-bda-v1").resources("main")
        assert any("register" in k and 0 < v <= 255 for k, v in res.items()), res
    finally:
        d.close()
