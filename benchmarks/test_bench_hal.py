"""Host cost of the HAL's submit path on every available backend (pytest-benchmark).

Run with ``pytest benchmarks/test_bench_hal.py --benchmark-enable``. Each case is one submit and
one wait of an already recorded command buffer:

  noop-100   100 noop dispatches (the dispatch-latency kernel of tests/hal/backends.py)
  empty      no commands: the bare submit / wait round trip

Backends are those of the conformance suite; an unavailable one skips with its reason. With
pytest's default ``--benchmark-disable`` each case runs once, as a quick smoke test.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.hal.* holds the backends and their kernels
    sys.path.insert(0, str(ROOT))

from tests.hal.backends import BACKENDS, Backend

DISPATCHES = 100
TIMEOUT_S = 30.0
_devices: dict[str, object] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_devices():
    yield
    for d in _devices.values():
        if not isinstance(d, Exception):
            d.close()
    _devices.clear()


def _device(backend: Backend):
    import halbench
    from halbench.errors import HalbenchError

    if backend.uri not in _devices:
        try:
            _devices[backend.uri] = halbench.create_device(backend.uri)
        except HalbenchError as e:
            _devices[backend.uri] = e
    dev = _devices[backend.uri]
    if isinstance(dev, Exception):
        pytest.skip(f"{backend.uri} unavailable: {dev}")
    if not dev.supports(backend.format):
        pytest.skip(f"{backend.uri} does not support {backend.format}")
    return dev


def _command_buffer(dev, backend: Backend, dispatches: int):
    kernels = importlib.import_module(f"tests.hal.{backend.kernels}")
    exe = dev.load_executable(kernels.build("noop", backend.format))
    buf = dev.allocate(256)
    cb = dev.command_buffer()
    for _ in range(dispatches):
        cb.dispatch(exe, "main", (1, 1, 1), [buf])
    cb.end()
    return cb


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.id)
@pytest.mark.parametrize("case", ["noop-100", "empty"])
def test_submit_and_wait(benchmark, backend: Backend, case: str) -> None:
    dev = _device(backend)
    cb = _command_buffer(dev, backend, DISPATCHES if case == "noop-100" else 0)

    def submit_and_wait() -> None:
        dev.submit(cb).wait(TIMEOUT_S)

    submit_and_wait()  # warm-up: first-use costs (pipeline upload, page faults) stay out
    benchmark.extra_info.update(device=dev.info.name, dispatches=DISPATCHES if case == "noop-100" else 0)
    benchmark(submit_and_wait)
