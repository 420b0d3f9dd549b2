"""Fixtures shared by the compiler tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def vk():
    """The Vulkan device (lavapipe in CI), open for the module; skips with the reason where none opens."""
    import halbench

    try:
        dev = halbench.create_device("vulkan://")
    except Exception as e:  # noqa: BLE001 - no Vulkan here: skip with the reason
        pytest.skip(f"no Vulkan device: {e}")
    with dev:
        yield dev
