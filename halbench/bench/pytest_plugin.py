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

How: pytest-benchmark's public API only. Each test that uses ``halbench_benchmark`` gets a
``@pytest.mark.benchmark(timer=..., group=...)`` marker at collection: the timer is a clock that
advances only by the device time of each submission, so pytest-benchmark's ``end - start`` around
a round (``pedantic``, one iteration) is that round's device time; the group is
``halbench device time (URI)`` (the test's own group, if it names one, comes first), so device-timed
results never share a table with host-timed ones.

The device's ``DeviceInfo`` (the ``dump-devices --format json`` entry) goes into ``machine_info``
(``machine_info["halbench"]["device_info"]``, per run) and its identity into each benchmark's
``extra_info``. ``--benchmark-compare`` against a run saved on another device (driver, name or
UUID differ) is refused with a usage error unless ``--halbench-compare-across-devices`` is given:
a Vulkan run against a local-task run is no regression test. The plugin loads through the
``pytest11`` entry point and imports nothing heavy until a fixture is used.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["DeviceClock", "HalbenchBenchmark", "device_group"]

_DEFAULT_DEVICE = "local-sync://"
_CLOCK: pytest.StashKey[Any] = pytest.StashKey()  # an item's DeviceClock, set at collection


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("halbench")
    group.addoption("--halbench-device", default=None, metavar="URI",
                    help=f"device the halbench_benchmark fixture runs on (default {_DEFAULT_DEVICE})")
    group.addoption("--halbench-compare-across-devices", action="store_true", default=False,
                    help="let --benchmark-compare compare with a run saved on another device")


def _device_uri(config: pytest.Config) -> str:
    return config.getoption("--halbench-device") or _DEFAULT_DEVICE


def device_group(uri: str, group: str | None = None) -> str:
    """The pytest-benchmark group of a device-timed test: its own group, tagged with the device."""
    tag = f"halbench device time ({uri})"
    return f"{group} · {tag}" if group else tag


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test that times with halbench_benchmark the device clock and its own group,
    through pytest-benchmark's public ``benchmark`` marker (the user's other keys are kept)."""
    uri = _device_uri(config)
    for item in items:
        if "halbench_benchmark" not in getattr(item, "fixturenames", ()):
            continue
        clock = DeviceClock()
        marker = item.get_closest_marker("benchmark")
        kwargs = dict(marker.kwargs) if marker else {}
        kwargs.update(timer=clock.timer, group=device_group(uri, kwargs.get("group")))
        item.add_marker(pytest.mark.benchmark(**kwargs), append=False)  # the closest: ours
        item.stash[_CLOCK] = clock


_INFO_CACHE: dict[str, dict[str, Any]] = {}


def _device_entry(uri: str) -> dict[str, Any]:
    """The device's dump entry (``DeviceInfo.to_dict()``), probed once per URI; or the reason."""
    if uri not in _INFO_CACHE:
        from halbench.errors import HalbenchError

        try:
            from halbench.drivers import select_device
            from halbench.uri import parse_uri

            _INFO_CACHE[uri] = {"device_info": select_device(parse_uri(uri)).to_dict()}
        except HalbenchError as e:
            _INFO_CACHE[uri] = {"device_error": str(e)}
    return _INFO_CACHE[uri]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    from halbench import __version__

    uri = _device_uri(config)
    machine_info["halbench"] = {"version": __version__, "device": uri, **_device_entry(uri)}


def _identity(machine_info: dict[str, Any]) -> dict[str, Any] | None:
    h = machine_info.get("halbench") or {}
    info = h.get("device_info")
    if not info:
        return None
    ident = info.get("identity") or {}
    return {"driver": info.get("driver"), "name": ident.get("name"), "uuid": ident.get("uuid")}


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any,
                                          machine_info: dict[str, Any],
                                          compared_benchmark: dict[str, Any]) -> None:
    """Refuse a comparison with a run saved on another device (unless asked for)."""
    now, then = _identity(machine_info), _identity(compared_benchmark.get("machine_info") or {})
    if now is None or then is None or now == then:
        return
    if config.getoption("--halbench-compare-across-devices"):
        benchmarksession.logger.warning(f"halbench: comparing device time across devices: {then} -> {now}")
        return
    diff = ", ".join(f"{k} {then[k]!r} -> {now[k]!r}" for k in now if now[k] != then[k])
    raise pytest.UsageError(
        f"halbench: --benchmark-compare refuses to compare with a run saved on another device ({diff}); "
        f"run on the same device (--halbench-device), or pass --halbench-compare-across-devices "
        f"to compare anyway")


class DeviceClock:
    """A clock (seconds) that moves only when :meth:`advance` adds a device duration."""

    __name__ = "halbench.device_clock"

    def __init__(self) -> None:
        self.now_ns = 0

        def timer() -> float:
            return self.now_ns / 1e9

        # pytest-benchmark stores the timer's __name__ in its JSON ("options": {"timer": ...}).
        timer.__name__ = timer.__qualname__ = "halbench.device_clock"
        self.timer = timer

    def advance(self, ns: int) -> None:
        self.now_ns += int(ns)

    def __call__(self) -> float:
        return self.now_ns / 1e9

    def __repr__(self) -> str:
        return "halbench.device_clock"


class HalbenchBenchmark:
    """What the ``halbench_benchmark`` fixture returns: call it with a bundle and inputs."""

    def __init__(self, benchmark: Any, device: Any, clock: DeviceClock):
        self.benchmark = benchmark
        self.device = device
        self.clock = clock

    def __call__(self, bundle: Any, inputs: Any, fn: str | None = None, rounds: int = 20,
                 warmup_rounds: int = 3) -> list[Any]:
        """Time ``fn`` of ``bundle`` (a path or a loaded Bundle) on the device; returns its outputs."""
        from halbench.runtime import Module

        with Module.load(bundle, self.device) as module:
            outputs = module.invoke(fn, inputs)
            clock = self.clock  # the marker's timer: pedantic reads it around each round

            def one_round() -> None:
                clock.advance(module.profile(fn, inputs, runs=1, warmup=0).total_ns[0])

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
def halbench_benchmark(request: pytest.FixtureRequest, benchmark: Any, halbench_device: Any
                       ) -> HalbenchBenchmark:
    """pytest-benchmark's ``benchmark``, timing halbench modules by device time."""
    clock = request.node.stash.get(_CLOCK, None)
    if clock is None:  # requested indirectly (getfixturevalue): the marker could not be set
        pytest.fail("halbench_benchmark must be a test's argument (the device clock is set at "
                    "collection)", pytrace=False)
    return HalbenchBenchmark(benchmark, halbench_device, clock)
