"""Probe fixtures: the real lavapipe device (skipped, with the reason, where Vulkan is missing)."""

from __future__ import annotations

import os

import pytest

from halbench.errors import DriverUnavailable
from halbench.probe.info import DeviceInfo

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # the Vulkan loader warns without it


@pytest.fixture(scope="session")
def vulkan_devices() -> list[DeviceInfo]:
    from halbench.probe.vulkan import query_devices

    try:
        devices = query_devices()
    except DriverUnavailable as e:
        pytest.skip(f"no Vulkan here: {e.reason}")
    if not devices:
        pytest.skip("the Vulkan loader found no devices")
    return devices


@pytest.fixture(scope="session")
def lavapipe(vulkan_devices: list[DeviceInfo]) -> DeviceInfo:
    for d in vulkan_devices:
        if d.identity.driver_id == "MESA_LLVMPIPE":
            return d
    pytest.skip("lavapipe (mesa-vulkan-drivers) is not installed")
