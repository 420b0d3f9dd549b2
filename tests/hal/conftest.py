"""Fixtures of the HAL conformance suite: one device per backend, kernels built per format."""

from __future__ import annotations

import importlib

import pytest

import halbench
from halbench.errors import DriverUnavailable, UserError
from tests.hal.backends import BACKENDS, UNSUPPORTED, Backend

_devices: dict[str, object] = {}


def _open(uri: str):
    if uri not in _devices:
        try:
            _devices[uri] = halbench.create_device(uri)
        except DriverUnavailable as e:
            _devices[uri] = e
        except UserError as e:  # e.g. a driver with no devices
            _devices[uri] = e
    return _devices[uri]


@pytest.fixture(params=BACKENDS, ids=lambda b: b.id)
def backend(request: pytest.FixtureRequest) -> Backend:
    b: Backend = request.param
    reason = UNSUPPORTED.get((b.id, request.node.originalname))
    if reason:
        pytest.skip(f"known unsupported on {b.id}: {reason}")
    return b


@pytest.fixture
def device(backend: Backend):
    dev = _open(backend.uri)
    if isinstance(dev, Exception):
        pytest.skip(f"{backend.uri} unavailable: {dev}")
    if dev.closed or dev.lost:  # a test closed it; open a fresh one
        _devices.pop(backend.uri)
        dev = _open(backend.uri)
    if not dev.supports(backend.format):
        pytest.skip(f"{backend.uri} does not support {backend.format}")
    return dev


@pytest.fixture
def build(backend: Backend, device):
    """``build(kernel)`` -> an Executable of the test kernel loaded on ``device``."""
    name = f"tests.hal.{backend.kernels}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:  # the module exists but something it imports is missing: a failure
            raise
        pytest.skip(f"{name} is not written yet")
    cache: dict[str, object] = {}

    def _build(kernel: str):
        if kernel not in cache:
            cache[kernel] = device.load_executable(module.build(kernel, backend.format))
        return cache[kernel]

    return _build


def pytest_sessionfinish(session, exitstatus) -> None:
    for dev in _devices.values():
        if not isinstance(dev, Exception):
            dev.close()
    _devices.clear()
