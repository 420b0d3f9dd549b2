"""pytest-benchmark integration: time halbench modules with the *device* clock.

Teams that already gate with ``pytest --benchmark-compare-fail`` can time a compiled model on a
HAL device with the fixtures below; the numbers pytest-benchmark stores, compares and fails on
are then device time (timestamps bracketing the dispatches), not host time::

    # test_speed.py
    def test_mobilenet(halbench_benchmark):
        halbench_benchmark.model("mobilenetv2", batch=1)          # a zoo model, compiled (cached)

    def test_my_bundle(halbench_benchmark, my_inputs):
        halbench_benchmark("model.hbx", my_inputs, rounds=50)     # any bundle

    $ pytest test_speed.py --halbench-device=vulkan://0 --benchmark-enable \\
          --benchmark-autosave --benchmark-compare --benchmark-compare-fail=median:5%

How: pedantic mode with a clock that advances only by the device time of each submission, so
pytest-benchmark's ``end - start`` around one round is that round's device time. The device's
``DeviceInfo`` goes into ``extra_info`` (per benchmark) and ``machine_info`` (per run), so a
comparison across devices or drivers shows up in the saved JSON. The plugin loads through the
``pytest11`` entry point and imports nothing heavy until a fixture is used.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["DeviceClock", "HalbenchBenchmark"]

_DEFAULT_DEVICE = "local-sync://"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("halbench")
    group.addoption("--halbench-device", default=None, metavar="URI",
                    help=f"device the halbench_benchmark fixture runs on (default {_DEFAULT_DEVICE})")


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    from halbench import __version__

    machine_info["halbench"] = {"version": __version__,
                                "device": config.getoption("--halbench-device") or _DEFAULT_DEVICE}


class DeviceClock:
    """A clock (seconds) that moves only when :meth:`advance` adds a device duration."""

    __name__ = "halbench.device_clock"

    def __init__(self) -> None:
        self.now_ns = 0

    def advance(self, ns: int) -> None:
        self.now_ns += int(ns)

    def __call__(self) -> float:
        return self.now_ns / 1e9

    def __repr__(self) -> str:
        return "halbench.device_clock"


class HalbenchBenchmark:
    """What the ``halbench_benchmark`` fixture returns: call it with a bundle and inputs."""

    def __init__(self, benchmark: Any, device: Any):
        self.benchmark = benchmark
        self.device = device

    def __call__(self, bundle: Any, inputs: Any, fn: str | None = None, rounds: int = 20,
                 warmup_rounds: int = 3) -> list[Any]:
        """Time ``fn`` of ``bundle`` (a path or a loaded Bundle) on the device; returns its outputs."""
        from halbench.runtime import Module

        with Module.load(bundle, self.device) as module:
            outputs = module.invoke(fn, inputs)
            clock = DeviceClock()

            def one_round() -> None:
                clock.advance(module.profile(fn, inputs, runs=1, warmup=0).total_ns[0])

            self.benchmark._timer = clock  # pedantic mode reads the timer when it starts
            info = self.device.info
            self.benchmark.extra_info.update({
                "timing": "device", "device": self.device.uri, "device_name": info.name,
                "driver": info.driver, "driver_version": info.identity.driver_version,
                "uuid": info.identity.uuid, "function": module.function(fn).name,
                "formats": sorted({module.variant(e.id).format for e in module.bundle.manifest.executables}),
            })
            self.benchmark.pedantic(one_round, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
        return outputs

    def model(self, zoo: str, batch: int = 1, seq: int | None = None, weights: str = "random",
              rounds: int = 20, warmup_rounds: int = 3) -> list[Any]:
        """Compile a zoo model for this device (cached, as run-suite does) and time it."""
        from halbench.bench.models import bundle_and_inputs

        params: dict[str, Any] = {"zoo": zoo, "batch": batch, "weights": weights}
        if seq is not None:
            params["seq"] = seq
        bundle, inputs = bundle_and_inputs(params, self.device)
        self.benchmark.extra_info["model"] = params
        return self(bundle, inputs, rounds=rounds, warmup_rounds=warmup_rounds)


@pytest.fixture
def halbench_device(request: pytest.FixtureRequest) -> Any:
    """The HAL device named by ``--halbench-device`` (skips with the reason if unavailable)."""
    import halbench

    uri = request.config.getoption("--halbench-device") or _DEFAULT_DEVICE
    try:
        dev = halbench.create_device(uri)
    except halbench.HalbenchError as e:
        pytest.skip(f"{uri}: {e}")
    yield dev
    dev.close()


@pytest.fixture
def halbench_benchmark(benchmark: Any, halbench_device: Any) -> HalbenchBenchmark:
    """pytest-benchmark's ``benchmark``, timing halbench modules by device time."""
    return HalbenchBenchmark(benchmark, halbench_device)
