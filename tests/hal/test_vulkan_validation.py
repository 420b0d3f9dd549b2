"""The HAL conformance suite and the Vulkan tests under the Khronos validation layer: zero messages.

The suite runs in a subprocess with HALBENCH_VULKAN_VALIDATION=1, which makes the driver enable
VK_LAYER_KHRONOS_validation and print every warning or error it reports with a fixed prefix. Two
configurations cover both descriptor paths, both host-access paths and both timing paths.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "HALBENCH-VULKAN-VALIDATION"

CONFIGS = {
    "default": {},
    # Descriptor sets instead of push descriptors, staging copies, no calibrated timestamps.
    "fallbacks": {"HALBENCH_VULKAN_PUSH_DESCRIPTORS": "0", "HALBENCH_VULKAN_STAGING": "1",
                  "HALBENCH_VULKAN_CALIBRATE": "0"},
}
# With staging copies on a single-queue device (lavapipe), a buffer read while a submission is
# gated on a host signal queues behind it: these tests need a second queue or mapped memory, which
# every real device that stages has.
DESELECT = {"fallbacks": "not test_ordering_across_two_submissions"
                         " and not test_wait_on_unsignalled_semaphore_times_out_then_completes"}


def _layer_installed() -> bool:
    try:
        from halbench.drivers.vulkan._vk import VALIDATION_LAYER, vk
    except ImportError:
        return False
    return any(p.layerName == VALIDATION_LAYER for p in vk.vkEnumerateInstanceLayerProperties())


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
def test_suite_has_zero_validation_messages(config: str) -> None:
    if os.environ.get("HALBENCH_VULKAN_VALIDATION"):
        pytest.skip("already running under the validation layer (this is the subprocess)")
    if not _layer_installed():
        pytest.skip("VK_LAYER_KHRONOS_validation is not installed")
    env = {**os.environ, "HALBENCH_VULKAN_VALIDATION": "1", "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp"),
           **CONFIGS[config]}
    select = "vulkan and not test_suite_has_zero_validation_messages"
    if config in DESELECT:
        select += f" and {DESELECT[config]}"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/hal", "-k", select],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    out = r.stdout + r.stderr
    messages = [line for line in out.splitlines() if PREFIX in line]
    assert not messages, f"{len(messages)} validation messages, first ones:\n" + "\n".join(messages[:5])
    assert r.returncode == 0, out[-3000:]
    assert " passed" in out and "error" not in out.splitlines()[-1]
