"""Module: hand-made bundles on local-sync / local-task (and Vulkan where present), exactly."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

import halbench
import tests.hal.kernels_local  # noqa: F401  (registers the test.* kernels)
from halbench.errors import DriverUnavailable, HalbenchError, UserError
from halbench.runtime import Module, ProfileResult
from tests.runtime import bundles as B

LOCAL = ("local-sync://", "local-task://")


@pytest.fixture(scope="module")
def hbx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bundles") / "model.hbx"
    B.build(path)
    return path


@pytest.fixture(params=LOCAL)
def device(request: pytest.FixtureRequest):
    with halbench.create_device(request.param) as dev:
        yield dev


@pytest.fixture
def module(hbx: Path, device):
    with Module.load(hbx, device) as m:
        yield m


def _equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_invoke_exact(module: Module) -> None:
    for seed in (0, 1, 2):  # repeated calls see fresh inputs, not stale buffers
        x = B.x_input(seed)
        _equal(module.invoke("affine", [x]), B.expected_affine(x))
        _equal(module.invoke("rand", {"x": x}), [B.expected_rand(x)])
    a, b = B.x_input(3), B.x_input(4)
    _equal(module.invoke("add", [a, b]), [a + b])
    _equal(module.invoke("add", {"b": b, "a": a}), [a + b])


def test_functions_and_variants(module: Module) -> None:
    assert [f.name for f in module.functions] == ["affine", "add", "rand"]
    assert module.function("add").inputs[1].name == "b"
    assert module.variant(0).format == "local-v1"
    with pytest.raises(UserError, match="no function 'nope'; it has: affine, add, rand"):
        module.invoke("nope", [])
    with pytest.raises(UserError, match="3 functions .*choose one"):
        module.invoke(None, [])


def test_steady_state_allocates_and_records_nothing(module: Module, monkeypatch) -> None:
    x = B.x_input()
    module.profile("affine", [x], runs=1)  # the profiled command buffer is recorded on demand, once

    def forbidden(*a, **k):
        raise AssertionError("the steady state must not allocate, load or record")

    for name in ("allocate", "command_buffer", "load_executable"):
        monkeypatch.setattr(module.device, name, forbidden)
    for _ in range(3):
        _equal(module.invoke("affine", [x]), B.expected_affine(x))
        module.profile("affine", [x], runs=2)


def test_profile(module: Module) -> None:
    x = B.x_input()
    p = module.profile("affine", [x], runs=4, warmup=2)
    assert isinstance(p, ProfileResult)
    assert p.runs == 4 and len(p.dispatch_ns) == 4 and all(len(r) == 3 for r in p.dispatch_ns)
    assert [d.name for d in p.dispatches] == ["t=2x+w", "y=0.5t+w", "s=sum(y)"]
    assert p.dispatches[0].flops == 2 * B.N and p.dispatches[2].bytes == B.N * 4 + B.GROUPS * 4
    assert p.flops == 5 * B.N
    assert all(t > 0 for t in p.total_ns) and all(h > 0 for h in p.host_ns)
    for total, per in zip(p.total_ns, p.dispatch_ns):
        assert sum(per) <= total
    assert len(p.dispatch_median_ns()) == 3 and p.median_ns() > 0
    json.dumps(p.to_dict())
    # Profiling runs the same work: the results are still right afterwards.
    _equal(module.invoke("affine", [x]), B.expected_affine(x))
    with pytest.raises(UserError, match="runs >= 1"):
        module.profile("affine", [x], runs=0)


def test_profile_repeat(module: Module) -> None:
    """repeat records the function that many times per submission: one row of dispatch times
    per repetition, totals per repetition, and the results are still exact."""
    x = B.x_input()
    p = module.profile("affine", [x], runs=3, warmup=1, repeat=5)
    assert p.runs == 3 and len(p.dispatch_ns) == 15 and all(len(r) == 3 for r in p.dispatch_ns)
    assert all(len(raw.dispatches) == 15 for raw in p.profiles)  # one submission holds all five
    assert all(t > 0 for t in p.total_ns) and len(p.dispatch_median_ns()) == 3
    assert all(t == raw.total_ns // 5 for t, raw in zip(p.total_ns, p.profiles))
    _equal(module.invoke("affine", [x]), B.expected_affine(x))
    whole = module.profile("affine", [x], runs=2, repeat=4, dispatch_times=False)
    assert whole.runs == 2 and all(t > 0 for t in whole.total_ns)
    for bad in (0, 1025):
        with pytest.raises(UserError, match=r"repeat in 1\.\.1024"):
            module.profile("affine", [x], runs=1, repeat=bad)


@pytest.mark.parametrize("fn, inputs, expect", [
    ("add", [np.zeros(B.N, np.float32)], "function 'add' takes 2 inputs (a: 1000xf32, b: 1000xf32), got 1"),
    ("add", [np.zeros(B.N, np.float32)] * 3, "takes 2 inputs"),
    ("affine", [np.zeros(999, np.float32)], "input 'x' of 'affine' must have shape 1000xf32, got shape 999xf32"),
    ("affine", [np.zeros((1, B.N), np.float32)], "got shape 1x1000xf32"),
    ("affine", [np.zeros(B.N, np.float64)], "input 'x' of 'affine' must be 1000xf32, got 1000xf64"),
    ("affine", [np.zeros(B.N, np.int32)], "got 1000xi32"),
    ("affine", [["a"] * B.N], "cannot convert list"),
    ("add", {"a": 0, "c": 1}, "function 'add' has no input 'c'"),
    ("add", {"a": np.zeros(B.N, np.float32)}, "function 'add' is missing input 'b'"),
])
def test_bad_inputs(module: Module, fn: str, inputs, expect: str) -> None:
    with pytest.raises(UserError) as e:
        module.invoke(fn, inputs)
    assert expect in str(e.value) and "\n" not in str(e.value)


def test_python_values_are_converted(module: Module) -> None:
    a = list(range(B.N))
    _equal(module.invoke("add", [a, [1.0] * B.N]), [np.arange(B.N, dtype=np.float32) + 1])


def test_close(hbx: Path, device) -> None:
    m = Module.load(hbx, device)
    m.close()
    m.close()
    with pytest.raises(UserError, match="closed"):
        m.invoke("affine", [B.x_input()])
    assert not [b for b in device._buffers if not b._released]


def test_unrunnable_bundle_allocates_nothing(tmp_path: Path, device) -> None:
    pytest.importorskip("tests.hal.kernels_vulkan")
    path = tmp_path / "vk.hbx"
    try:
        B.build(path, ("vulkan-spirv-descriptors-v1",))
    except (OSError, RuntimeError, HalbenchError) as e:  # no glslang here
        pytest.skip(f"cannot build SPIR-V test kernels: {e}")
    with pytest.raises(UserError) as e:
        Module.load(path, device)
    assert "has no variant that local-" in str(e.value) and "it loads local-v1" in str(e.value)
    assert not device._buffers


def test_load_accepts_a_bundle_object(hbx: Path, device) -> None:
    from halbench.bundle import read_bundle

    with Module.load(read_bundle(hbx), device) as m:
        x = B.x_input()
        _equal(m.invoke("affine", x), B.expected_affine(x))  # one array for a one-input function


# -- Vulkan (lavapipe in CI) -------------------------------------------------------------------
@pytest.fixture(scope="module")
def vulkan():
    try:
        importlib.import_module("tests.hal.kernels_vulkan")
    except ModuleNotFoundError as e:
        pytest.skip(f"tests/hal/kernels_vulkan.py is not there: {e}")
    try:
        dev = halbench.create_device("vulkan://")
    except (DriverUnavailable, UserError) as e:
        pytest.skip(f"no Vulkan device: {e}")
    with dev:
        yield dev


@pytest.mark.parametrize("formats, chosen", [
    (("vulkan-spirv-descriptors-v1", "vulkan-spirv-bda-v1", "local-v1"), None),
    (("vulkan-spirv-descriptors-v1", "local-v1"), "vulkan-spirv-descriptors-v1"),
])
def test_vulkan(tmp_path: Path, vulkan, formats, chosen) -> None:
    path = tmp_path / "vk.hbx"
    B.build(path, formats)
    if chosen is None:
        bda = vulkan.supports("vulkan-spirv-bda-v1")
        chosen = "vulkan-spirv-bda-v1" if bda else "vulkan-spirv-descriptors-v1"
    with Module.load(path, vulkan) as m:
        assert {m.variant(e.id).format for e in m.bundle.manifest.executables} == {chosen}
        x = B.x_input()
        _equal(m.invoke("affine", [x]), B.expected_affine(x))
        _equal(m.invoke("rand", [x]), [B.expected_rand(x)])
        p = m.profile("affine", [x], runs=2)
        assert p.runs == 2 and all(len(r) == 3 for r in p.dispatch_ns)


def test_profile_repeat_on_vulkan(tmp_path: Path, vulkan) -> None:
    """On lavapipe: the repetitions run back to back in one submission, a barrier between,
    each dispatch timed, and the results stay exact."""
    path = tmp_path / "vk.hbx"
    B.build(path, ("vulkan-spirv-descriptors-v1", "vulkan-spirv-bda-v1", "local-v1"))
    with Module.load(path, vulkan) as m:
        x = B.x_input()
        p = m.profile("affine", [x], runs=2, warmup=0, repeat=3)
        assert len(p.dispatch_ns) == 6 and all(len(row) == 3 and all(t > 0 for t in row) for row in p.dispatch_ns)
        assert all(len(raw.dispatches) == 9 for raw in p.profiles)
        _equal(m.invoke("affine", [x]), B.expected_affine(x))
