"""cuda:// specifics beyond the generic conformance suite: availability, arch checks, graphs
versus stream launches, errors, profiles. The GPU tests run on the GPU machine (--gpu)."""

from __future__ import annotations

import numpy as np
import pytest

import halbench
from halbench.drivers import get_driver, query_available_drivers
from halbench.errors import DriverUnavailable, HalbenchError, OutOfDeviceMemory, UserError
from tests.hal import kernels_cuda
from tests.hal.util import TIMEOUT_S, groups, record


def _cuda_available() -> str | None:
    try:
        get_driver("cuda").query_available_devices()
        return None
    except DriverUnavailable as e:
        return e.reason


def test_unavailable_is_listed_with_reason():
    reason = _cuda_available()
    status = next(s for s in query_available_drivers() if s.name == "cuda")
    if reason is None:
        assert status.available
    else:
        assert not status.available and status.reason == reason
        with pytest.raises(DriverUnavailable, match="libcuda|cuInit|NVIDIA"):
            halbench.create_device("cuda://")


def test_import_loads_no_gpu_api():
    import subprocess
    import sys

    code = ("import sys, halbench, halbench.drivers.cuda, halbench.drivers.hip, halbench.drivers._gpu.device; "
            "bad = [m for m in sys.modules if m.startswith(('cuda.bindings.driver', 'hip.', 'rocm'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def dev():
    if _cuda_available() is not None:
        pytest.skip(f"cuda unavailable: {_cuda_available()}")
    d = halbench.create_device("cuda://")
    yield d
    d.close()


def _add_one(d, n=256, fmt="cuda-cubin-v1"):
    exe = d.load_executable(kernels_cuda.build("add_one", fmt))
    buf = d.allocate(4 * n)
    buf.write(np.zeros(n, np.uint32))
    return exe, buf


@pytest.mark.gpu
def test_cubin_for_another_arch_is_refused_naming_both(dev):
    other = "sm_80" if dev.arch != "sm_80" else "sm_90"
    with pytest.raises(UserError, match=f"{other}.*{dev.arch}"):
        dev.load_executable(kernels_cuda.build("noop", "cuda-cubin-v1", arch=other))


@pytest.mark.gpu
def test_ptx_is_cached_by_content(dev):
    a = dev.load_executable(kernels_cuda.build("noop", "cuda-ptx-v1"))
    b = dev.load_executable(kernels_cuda.build("noop", "cuda-ptx-v1"))
    assert a.module is b.module


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "stream"])
def test_graph_and_stream_launches_agree(dev, graphs):
    old = dev.use_graphs
    dev.use_graphs = graphs
    try:
        exe, buf = _add_one(dev)

        def rec(cb):
            for _ in range(5):
                cb.dispatch(exe, "main", (groups(256, 64),), [buf], [256])
                cb.barrier()
        cb = record(dev, rec)
        assert (cb.exec is not None) is graphs
        for _ in range(3):
            dev.submit(cb).wait(TIMEOUT_S)
        assert (buf.read(np.uint32) == 15).all()
    finally:
        dev.use_graphs = old


@pytest.mark.gpu
def test_out_of_memory_is_named(dev):
    with pytest.raises(OutOfDeviceMemory, match=r"CUDA_ERROR_OUT_OF_MEMORY.*allocating .* on cuda://"):
        dev.allocate(1 << 50)


@pytest.mark.gpu
@pytest.mark.parametrize("unprofiled", [False, True])
def test_profile_maps_onto_host_clock(dev, unprofiled):
    old = dev.unprofiled_total
    dev.unprofiled_total = unprofiled
    try:
        exe, buf = _add_one(dev)
        cb = record(dev, lambda cb: [cb.dispatch(exe, "main", (4,), [buf], [256]) for _ in range(3)],
                    profile=True)
        sub = dev.submit(cb)
        sub.wait(TIMEOUT_S)
        p = sub.profile()
        # Only graph replays have an event-free twin; stream launches time themselves.
        assert p.total_source == ("unprofiled" if unprofiled and dev.use_graphs else "timestamps")
        assert len(p.dispatches) == 3 and p.total_ns > 0
        slack = 2_000_000 + (p.deviation_ns or 0)  # calibration and event resolution
        for t in p.dispatches:
            assert t.end_ns >= t.start_ns
            assert sub.host_submit_ns - slack <= t.start_ns <= sub.host_done_ns + slack
        # A second submission of the same command buffer reads the first one's events first.
        s2 = dev.submit(cb)
        s2.wait(TIMEOUT_S)
        assert len(s2.profile().dispatches) == 3
    finally:
        dev.unprofiled_total = old


@pytest.mark.gpu
def test_host_signal_releases_a_queued_wait_without_blocking_submit(dev):
    exe, buf = _add_one(dev)
    cb = record(dev, lambda cb: cb.dispatch(exe, "main", (4,), [buf], [256]))
    sem, done = dev.semaphore(0), dev.semaphore(0)
    sub = dev.submit(cb, wait=[(sem, 1)], signal=[(done, 1)])  # returns at once
    assert not sub.done
    assert (buf.read(np.uint32) == 0).all()  # reads do not queue behind the blocked stream
    sem.signal(1)
    done.wait(1, TIMEOUT_S)
    sub.wait(TIMEOUT_S)
    assert (buf.read(np.uint32) == 1).all()


@pytest.mark.gpu
def test_errors_are_halbench_errors(dev):
    with pytest.raises(HalbenchError):
        dev.load_executable(halbench.hal.ExecutableBinary("cuda-ptx-v1", b"not ptx",
                                                          (halbench.hal.EntryPoint("main", 0),)))


@pytest.mark.gpu
def test_kernel_resources_come_from_the_driver(dev):
    """Registers, shared bytes and resident workgroups per SM, as cuFuncGetAttribute and the
    occupancy calculator give them (what `halbench inspect --device` prints)."""
    exe = dev.load_executable(kernels_cuda.build("add_one", "cuda-cubin-v1"))
    res = exe.resources("main")
    assert 1 <= res["registers"] <= 255 and res["local_bytes"] == 0
    assert res["max_threads"] >= 64 and res["workgroups_per_multiprocessor"] >= 1
    assert 0 < res["occupancy"] <= 1
    with pytest.raises(UserError, match="no entry point"):
        exe.resources("nope")


def _programmatic_edges(dev, graph) -> int:
    d = dev.api.d
    status, _, _, _, n = d.cuGraphGetEdges(graph, 0)
    status, _, _, data, n = d.cuGraphGetEdges(graph, n)
    assert status == d.CUresult.CUDA_SUCCESS
    return sum(1 for e in data[:n] if int(e.type) == 1)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", ["1", "0"])
def test_dependent_launch_chains_kernels_through_programmatic_edges(dev, pdl, monkeypatch):
    """Kernels whose entry points wait for their predecessors (EntryPoint.dependent_launch) follow
    a lone kernel through a programmatic edge (HALBENCH_CUDA_PDL=0: full edges); 40 dependent
    dispatches over 1M elements still add up exactly (a launch that did not wait would lose adds)."""
    from halbench.arch import parse_sm

    if parse_sm(kernels_cuda.device_arch()).major < 9:
        pytest.skip("griddepcontrol needs sm_90+")
    monkeypatch.setenv("HALBENCH_CUDA_PDL", pdl)
    n, chain = 1 << 20, 40
    exe = dev.load_executable(kernels_cuda.build("add_one_early", "cuda-cubin-v1"))
    plain = dev.load_executable(kernels_cuda.build("add_one", "cuda-cubin-v1"))
    buf = dev.allocate(4 * n)
    buf.write(np.zeros(n, np.uint32))

    def rec(cb):
        for i in range(chain):
            # every tenth kernel does not wait for its predecessor itself: a full edge before it
            cb.dispatch(plain if i % 10 == 5 else exe, "main", (groups(n, 64),), [buf], [n])
            cb.barrier()
    cb = record(dev, rec)
    for _ in range(3):
        dev.submit(cb).wait(TIMEOUT_S)
    assert (buf.read(np.uint32) == 3 * chain).all()
    edges = _programmatic_edges(dev, cb._graphs[0])
    assert edges == (chain - 1 - 4 if pdl == "1" else 0)
