"""Device-peak microbenchmarks run, check their own output, and count what they move."""

from __future__ import annotations

import itertools

import pytest

import halbench
from halbench.bench.micro import KINDS, Unsupported, prepare_micro
from halbench.errors import HalbenchError, UserError

SMALL = {
    "bandwidth-copy": {"bytes": 1 << 20},
    "bandwidth-triad": {"bytes": 1 << 20},
    "fma-f32": {"workgroups": 2, "iters": 16},
    "fma-f16": {"workgroups": 2, "iters": 16},
    "dot-int8": {"workgroups": 2, "iters": 16},
    "matrix-f16": {"workgroups": 2, "iters": 16},
    "matrix-bf16": {"workgroups": 2, "iters": 16},
    "gemm-f16": {"m": 256, "n": 128, "k": 96},
    "gemm-bf16": {"m": 128, "n": 256, "k": 64},
    "latency-dispatch": {},
    "latency-replay": {"dispatches": 10},
    "latency-chain": {"dispatches": 10},
    "transfer-h2d": {"bytes": 1 << 20},
    "transfer-d2h": {"bytes": 1 << 20},
}

DEVICES = ["local-sync://", "local-task://", "vulkan://", "cuda://"]


@pytest.fixture(scope="module", params=DEVICES)
def device(request):
    try:
        dev = halbench.create_device(request.param)
    except HalbenchError as e:
        pytest.skip(f"{request.param} unavailable: {e}")
    yield dev
    dev.close()


@pytest.mark.parametrize("kind", KINDS)
def test_micro_runs_and_checks(device, kind: str) -> None:
    try:
        mb = prepare_micro(kind, device, SMALL[kind])
    except Unsupported as e:
        pytest.skip(str(e))
    try:
        samples = [mb.run() for _ in range(3)]
        assert all(s.device_ms > 0 and s.host_ms > 0 for s in samples)
        if not kind.startswith("transfer"):
            # the host waited for the device: its time brackets the device time
            assert all(s.host_ms >= s.device_ms * 0.5 for s in samples)
            assert samples[0].profile is not None
        result = mb.check()
        assert result["passed"], result
        if kind.startswith(("bandwidth", "transfer")):
            assert mb.metrics["bytes"] >= SMALL[kind]["bytes"]
        if kind.startswith(("fma", "matrix", "dot", "gemm")):
            assert mb.metrics["flops"] > 0
    finally:
        mb.close()


def test_replay_records_every_dispatch(device) -> None:
    mb = prepare_micro("latency-replay", device, {"dispatches": 7})
    try:
        assert len(mb.run().profile.dispatches) == 7
    finally:
        mb.close()


def test_chain_orders_its_dispatches(device) -> None:
    """latency-chain puts a barrier between dispatches and is timed whole (per-dispatch times
    only where the driver cannot skip them, and then each starts after the one before ends)."""
    mb = prepare_micro("latency-chain", device, {"dispatches": 6})
    try:
        prof = mb.run().profile
        assert mb.metrics["dispatches"] == 6 and prof.total_ns > 0
        times = prof.dispatches
        assert len(times) in (0, 6)
        assert all(b.start_ns >= a.end_ns for a, b in itertools.pairwise(times))
    finally:
        mb.close()


def test_wrong_output_is_caught(device) -> None:
    mb = prepare_micro("bandwidth-copy", device, {"bytes": 1 << 16})
    try:
        mb.run()
        assert mb.check()["passed"]
        mb._buffers[1].write(b"\xff" * 16, offset=64)  # corrupt what the kernel wrote
        assert not mb.check()["passed"]
    finally:
        mb.close()


def test_unknown_kind_is_refused(device) -> None:
    with pytest.raises(UserError, match="unknown microbenchmark kind"):
        prepare_micro("warp-speed", device)


@pytest.mark.parametrize("params", [{"unroll": 1}, {"unroll": 2, "workgroups": 3}, {"unroll": 8, "workgroups": 1}])
def test_copy_variants_copy_everything(device, params) -> None:
    # an odd size (not a multiple of any tile) and a grid too small to cover it in one pass
    mb = prepare_micro("bandwidth-copy", device, {"bytes": (1 << 18) + 48, **params})
    try:
        mb.run()
        assert mb.check()["passed"]
    finally:
        mb.close()


@pytest.mark.parametrize("params", [{"chains": 16, "unroll": 1}, {"chains": 64, "unroll": 8},
                                    {"chains": 32, "vector": 4}])
def test_fma_variants_count_their_chains(device, params) -> None:
    try:
        mb = prepare_micro("fma-f32", device, {"workgroups": 2, "iters": 16, **params})
    except Unsupported as e:
        pytest.skip(str(e))
    try:
        mb.run()
        assert mb.check()["passed"]
        assert mb.metrics["flops"] == 2 * 256 * 16 * 2 * params["chains"]
    finally:
        mb.close()


def _gemm_right_and_a_wrong_output_caught(mb, n: int) -> None:
    """The GEMM's output passes its check, then eight 1.0s written into C (row 77 of n columns)
    fail it; ``mb`` is closed either way."""
    try:
        mb.run()
        assert mb.check()["passed"]
        mb._buffers[2].write(b"\x00\x3c" * 8, offset=2 * (n * 77 + 64))  # eight 1.0s where C was
        assert not mb.check()["passed"]
    finally:
        mb.close()


@pytest.mark.parametrize("kind", ["gemm-f16", "gemm-bf16"])
def test_gemm_wrong_output_is_caught(device, kind) -> None:
    try:
        mb = prepare_micro(kind, device, {"m": 128, "n": 128, "k": 64})
    except Unsupported as e:
        pytest.skip(str(e))
    _gemm_right_and_a_wrong_output_caught(mb, 128)


@pytest.mark.parametrize(("kind", "params", "match"), [
    ("gemm-f16", {"m": 100, "n": 128, "k": 64}, "must be multiples of the"),
    ("gemm-bf16", {"m": 1 << 16, "n": 1 << 16, "k": 64}, "2\\^31 elements"),
    ("fma-f32", {"iters": 10, "unroll": 4}, "multiple of unroll"),
    ("fma-f32", {"chains": 30, "vector": 4}, "vector must be 1 or 4"),
    ("bandwidth-copy", {"unroll": 64}, "use 1 to 16"),
])
def test_bad_kernel_parameters_are_one_line_errors(device, kind, params, match) -> None:
    try:
        mb = prepare_micro(kind, device, params)
    except Unsupported as e:
        pytest.skip(str(e))
    except UserError as e:
        assert "\n" not in str(e)
        with pytest.raises(UserError, match=match):
            prepare_micro(kind, device, params)
        return
    mb.close()
    pytest.fail(f"{kind} {params} was accepted")


@pytest.mark.parametrize(("kind", "params"), [("bandwidth-copy", {"bytes": 1 << 16}),
                                              ("gemm-f16", {"m": 128, "n": 128, "k": 64})])
def test_output_not_written_fails_the_check(device, kind, params) -> None:
    # a first run leaves the right answer in memory; the next benchmark's output starts as NaNs,
    # so a kernel that wrote nothing could not pass on what the first one left behind
    try:
        first = prepare_micro(kind, device, params)
    except Unsupported as e:
        pytest.skip(str(e))
    first.run()
    assert first.check()["passed"]
    first.close()
    mb = prepare_micro(kind, device, params)
    try:
        assert not mb.check()["passed"]
    finally:
        mb.close()


@pytest.mark.parametrize(("mma", "tile", "invocations"), [(2, (128, 128, 32), 128), (3, (128, 128, 64), 256),
                                                           (3, (128, 128, 32), 128), (4, (128, 128, 32), 256)])
def test_workgroup_scope_gemm_runs_and_checks(device, mma, tile, invocations) -> None:
    """Vulkan's GEMM on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2): right
    where the device has them (the H100), skipped with the reason elsewhere (lavapipe)."""
    if not device.uri.startswith("vulkan"):
        pytest.skip("workgroup-scope cooperative matrices are a Vulkan kernel")
    p = {"m": 256, "n": 256, "k": 192, "tile_m": tile[0], "tile_n": tile[1], "tile_k": tile[2], "mma": mma,
         "invocations": invocations}
    try:
        mb = prepare_micro("gemm-f16", device, p)
    except Unsupported as e:  # no VK_NV_cooperative_matrix2 here, or (mma 4) no glslang for its GLSL
        assert "_cooperative_matrix2" in str(e)
        pytest.skip(str(e))
    _gemm_right_and_a_wrong_output_caught(mb, 256)
