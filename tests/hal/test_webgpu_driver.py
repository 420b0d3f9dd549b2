"""What is particular to the webgpu driver (the conformance suite covers the rest): its ABI
(constants in a uniform, buffers of any size), uncalibrated timestamps, same-buffer copies,
the probe and the unavailable path."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import halbench
from halbench.errors import UserError
from halbench.hal import EntryPoint, ExecutableBinary
from tests.hal.util import TIMEOUT_S

pytest.importorskip("wgpu")


@pytest.fixture(scope="module")
def dev():
    try:
        d = halbench.create_device("webgpu://")
    except Exception as e:  # noqa: BLE001 - no adapter: skip with the reason
        pytest.skip(f"no WebGPU device: {e}")
    with d:
        yield d


_ODD = """
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<uniform> hb_c: array<vec4<u32>, 2>;
@compute @workgroup_size(4)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < hb_c[1][0]) { x[gid.x] = hb_c[0][gid.x % 4u] + hb_c[1][1]; }
}
"""


def test_constants_travel_in_a_uniform_and_odd_sizes_round_up(dev):
    exe = dev.load_executable(ExecutableBinary("webgpu-wgsl-v1", _ODD.encode(),
                                               (EntryPoint("main", 1, 6, (4, 1, 1)),), "wgsl"))
    buf = dev.allocate(10)  # not a multiple of 4: allocated as 12, bound as 12
    buf.write(np.zeros(10, np.uint8))
    cb = dev.command_buffer()
    cb.dispatch(exe, "main", (1,), [buf], [10, 20, 30, 40, 2, 7])
    cb.end()
    dev.submit(cb).wait(TIMEOUT_S)
    got = buf.read(np.uint8)
    assert list(got[:4]) == [17, 0, 0, 0] and list(got[4:8]) == [27, 0, 0, 0]
    assert buf.read(np.uint8, 2, offset=8).tolist() == [0, 0]


def test_profiles_are_exact_durations_but_uncalibrated(dev):
    from tests.hal import kernels_webgpu

    exe = dev.load_executable(kernels_webgpu.build("add_one", "webgpu-wgsl-v1"))
    n = 1 << 16
    buf = dev.allocate(4 * n)
    buf.write(np.zeros(n, np.uint32))
    cb = dev.command_buffer(profile=True)
    for _ in range(3):
        cb.dispatch(exe, "main", (n // 64,), [buf], [n])
    cb.end()
    sub = dev.submit(cb)
    sub.wait(TIMEOUT_S)
    p = sub.profile()
    assert p.calibrated is False and len(p.dispatches) == 3
    assert all(t.duration_ns > 0 for t in p.dispatches)
    assert all(a.end_ns <= b.start_ns for a, b in zip(p.dispatches, p.dispatches[1:]))  # in order
    assert (buf.read(np.uint32) == 3).all()


def test_invalid_wgsl_is_one_line(dev):
    bad = ExecutableBinary("webgpu-wgsl-v1", b"fn main( {", (EntryPoint("main", 1),), "wgsl")
    with pytest.raises(UserError, match="does not validate on webgpu://0") as e:
        dev.load_executable(bad)
    assert "\n" not in str(e.value)


def test_dump_devices_webgpu_in_the_common_schema():
    env_py = [sys.executable, "-m", "halbench"]
    text = subprocess.run([*env_py, "dump-devices", "webgpu"], capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "webgpu://0" in text.stdout
    r = subprocess.run([*env_py, "dump-devices", "webgpu", "--format", "json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    devices = [d for drv in doc["drivers"] if drv["name"] == "webgpu" for d in drv["devices"]]
    assert devices and devices[0]["identity"]["api"] == "WebGPU"
    assert devices[0]["limits"]["max_workgroup_invocations"] >= 256
    assert devices[0]["features"]["flags"]["timestampQuery"] in (True, False)


def test_unavailable_without_wgpu_is_a_listed_reason(tmp_path):
    """With wgpu unimportable, list-drivers names the reason instead of failing."""
    (tmp_path / "wgpu").mkdir()
    (tmp_path / "wgpu" / "__init__.py").write_text("raise ImportError('wgpu is broken here')\n")
    import os

    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, "-m", "halbench", "list-drivers", "--format", "json"],
                       capture_output=True, text=True, timeout=120, env=env)
    webgpu = next(d for d in json.loads(r.stdout)["drivers"] if d["name"] == "webgpu")
    assert webgpu["available"] is False and "wgpu is not installed" in webgpu["reason"]


def test_import_halbench_loads_no_wgpu():
    r = subprocess.run([sys.executable, "-c", "import sys, halbench, halbench.drivers; "
                        "halbench.drivers.driver_names(); print('wgpu' in sys.modules)"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr


def test_profiles_of_more_dispatches_than_one_query_set_holds(dev):
    """WebGPU caps a query set at 4096 queries (2048 timed dispatches): a longer command buffer
    spreads its timestamps over several sets and still times every dispatch."""
    from tests.hal import kernels_webgpu

    exe = dev.load_executable(kernels_webgpu.build("add_one", "webgpu-wgsl-v1"))
    buf = dev.allocate(256)
    buf.write(np.zeros(64, np.uint32))
    n = 2048 + 5
    cb = dev.command_buffer(profile=True)
    for _ in range(n):
        cb.dispatch(exe, "main", (1,), [buf], [64])
    cb.end()
    sub = dev.submit(cb)
    sub.wait(TIMEOUT_S)
    p = sub.profile()
    assert len(p.dispatches) == n and all(t.duration_ns >= 0 for t in p.dispatches)
    assert p.dispatches[-1].end_ns >= p.dispatches[2048].start_ns >= p.dispatches[2047].end_ns
    assert (buf.read(np.uint32) == n).all()
