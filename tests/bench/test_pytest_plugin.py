"""The pytest-benchmark plugin times halbench modules by device time, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TEST_FILE = '''
import numpy as np

def test_tiny_mlp(halbench_benchmark):
    outs = halbench_benchmark.model("tiny-mlp", batch=2, rounds=7, warmup_rounds=1)
    assert outs[0].shape[0] == 2 and np.all(np.isfinite(outs[0]))
'''


MIXED_FILE = TEST_FILE + '''
import pytest

def test_host_timed(benchmark):
    benchmark(sum, range(1000))

@pytest.mark.benchmark(group="mlp")
def test_tiny_mlp_grouped(halbench_benchmark):
    halbench_benchmark.model("tiny-mlp", batch=2, rounds=3, warmup_rounds=1)
'''


def _run(tmp_path: Path, *args: str, text: str = TEST_FILE) -> subprocess.CompletedProcess:
    (tmp_path / "test_speed.py").write_text(text)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                           str(tmp_path), "-c", "/dev/null", str(tmp_path / "test_speed.py"), *args],
                          check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_device_time_and_device_info_reach_the_benchmark_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    r = _run(tmp_path, "--halbench-device=local-sync://", "--benchmark-enable", f"--benchmark-json={out}")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["machine_info"]["halbench"]["device"] == "local-sync://"
    (b,) = doc["benchmarks"]
    assert b["extra_info"]["timing"] == "device"
    assert b["extra_info"]["device"] == "local-sync://0"
    assert b["extra_info"]["formats"] == ["local-v1"]
    assert b["stats"]["rounds"] == 7
    assert b["options"]["timer"] == "halbench.device_clock"
    assert 0 < b["stats"]["min"] <= b["stats"]["median"] < 1.0  # seconds of device time per run


def test_compare_fail_gates_on_device_time(tmp_path: Path) -> None:
    """Save a baseline, then compare against it with --benchmark-compare-fail: the workflow
    teams already use runs unchanged on device-timed benchmarks."""
    storage = f"file://{tmp_path / 'store'}"
    base = ["--halbench-device=local-sync://", "--benchmark-enable", f"--benchmark-storage={storage}"]
    assert _run(tmp_path, *base, "--benchmark-save=base").returncode == 0
    ok = _run(tmp_path, *base, "--benchmark-compare=0001", "--benchmark-compare-fail=min:1000%")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_unavailable_device_skips_with_the_reason(tmp_path: Path) -> None:
    r = _run(tmp_path, "--halbench-device=hip://0", "-rs")
    assert r.returncode == 0
    assert "hip" in r.stdout and "skipped" in r.stdout


def test_device_timed_results_have_their_own_group_and_the_device_dump(tmp_path: Path) -> None:
    from halbench.drivers import select_device
    from halbench.uri import parse_uri

    out = tmp_path / "bench.json"
    r = _run(tmp_path, "--halbench-device=local-sync://", "--benchmark-enable", f"--benchmark-json={out}",
             text=MIXED_FILE)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    groups = {b["name"]: b["group"] for b in doc["benchmarks"]}
    assert groups["test_host_timed"] is None  # host time: pytest-benchmark's default group
    assert groups["test_tiny_mlp"] == "halbench device time (local-sync://)"
    assert groups["test_tiny_mlp_grouped"] == "mlp · halbench device time (local-sync://)"
    assert "halbench device time (local-sync://)" in r.stdout  # its own table in the terminal
    # machine_info holds the device's dump entry, as dump-devices --format json writes it.
    info = doc["machine_info"]["halbench"]["device_info"]
    assert info == json.loads(json.dumps(select_device(parse_uri("local-sync://")).to_dict()))
    assert info["driver"] == "local-sync" and info["identity"]["name"]


def test_compare_across_devices_is_refused_unless_asked(tmp_path: Path) -> None:
    storage = f"file://{tmp_path / 'store'}"
    common = ["--benchmark-enable", f"--benchmark-storage={storage}"]
    assert _run(tmp_path, "--halbench-device=local-sync://", *common, "--benchmark-save=sync").returncode == 0
    other = ["--halbench-device=local-task://", *common, "--benchmark-compare=0001"]
    refused = _run(tmp_path, *other, "--benchmark-compare-fail=min:1000%")
    assert refused.returncode == 4, refused.stdout + refused.stderr  # pytest's usage error
    assert "another device" in refused.stderr and "--halbench-compare-across-devices" in refused.stderr
    assert "Traceback" not in refused.stderr
    asked = _run(tmp_path, *other, "--halbench-compare-across-devices")
    assert asked.returncode == 0, asked.stdout + asked.stderr


def test_plugin_uses_public_pytest_benchmark_api() -> None:
    import inspect

    from halbench.bench import pytest_plugin

    source = inspect.getsource(pytest_plugin)
    assert "._timer" not in source and "benchmark._" not in source
