"""On the GPU machine (../shared/gpu/README.md): its Hopper GPU (an H100 or an H200) under vulkan and
cuda. CI skips these."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from halbench.cli import main
from halbench.probe import cuda, vulkan

pytestmark = pytest.mark.gpu


HOPPER = ("H100", "H200")


def _nvidia_vulkan():
    devices = [d for d in vulkan.query_devices() if d.identity.vendor_id == 0x10DE]
    assert devices, "no NVIDIA device under Vulkan"
    return devices[0]


def test_hopper_under_cuda() -> None:
    (dev, *_) = cuda.query_devices()
    assert any(h in dev.name for h in HOPPER), dev.name
    assert dev.identity.compute_capability == "9.0" and dev.identity.arch == "sm_90"
    assert dev.identity.uuid and dev.identity.uuid.startswith("GPU-")
    assert dev.limits.compute_units >= 114 and dev.limits.subgroup_size == 32
    assert dev.attributes["max_shared_memory_per_block_optin_bytes"] > 200_000
    assert dev.errors == {}, dev.errors


def test_hopper_under_vulkan() -> None:
    dev = _nvidia_vulkan()
    assert any(h in dev.name for h in HOPPER) and dev.identity.driver_id == "NVIDIA_PROPRIETARY", dev.name
    tier = dev.tier("vulkan-1.3")
    assert tier is not None and tier.supported, tier
    assert dev.features.flags["cooperativeMatrix"]
    rows = dev.features.cooperative_matrix
    assert rows and any(r.a_type == "f16" and r.scope == "subgroup" for r in rows)
    assert dev.timing.calibrated_time_domains and dev.errors == {}, dev.errors


def test_same_uuid_and_dump_says_so() -> None:
    cu = cuda.query_devices()[0]
    vk = _nvidia_vulkan()
    assert cu.identity.uuid == vk.identity.uuid
    doc = json.loads(CliRunner().invoke(main, ["dump-devices", "--format", "json"]).stdout)
    vk_dump = next(d for drv in doc["drivers"] if drv["name"] == "vulkan" for d in drv["devices"]
                   if d["uri"] == vk.uri)
    assert cu.uri in vk_dump["same_device_as"]
    text = CliRunner().invoke(main, ["dump-devices"]).stdout
    assert f"same_device_as: {cu.uri}" in text
