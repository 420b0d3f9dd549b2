"""Device-peak microbenchmarks run, check their own output, and count what they move."""

from __future__ import annotations

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
    "latency-dispatch": {},
    "latency-replay": {"dispatches": 10},
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
        if kind.startswith(("fma", "matrix", "dot")):
            assert mb.metrics["flops"] > 0
    finally:
        mb.close()


def test_replay_records_every_dispatch(device) -> None:
    mb = prepare_micro("latency-replay", device, {"dispatches": 7})
    try:
        assert len(mb.run().profile.dispatches) == 7
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
