"""The runner end to end on the local drivers (and lavapipe where it is available)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from halbench.bench.results import read_results, validate
from halbench.bench.runner import run_suite
from halbench.bench.suite import load_suite
from halbench.kernels.format import register_kernel

FAST = "settings: {warmup: 1, min_time_s: 0.0, min_samples: 3, max_samples: 3}\n"


def _suite(tmp_path: Path, body: str) -> str:
    p = tmp_path / "suite.yaml"
    p.write_text("name: t\ndevices: ['local-sync://', 'local-task://']\n" + FAST + body)
    return str(p)


def test_models_and_micros_run_and_validate(tmp_path: Path) -> None:
    s = load_suite(_suite(tmp_path, "models: [{name: mlp, zoo: tiny-mlp, batch: 2}]\n"
                                    "micro: [{name: peak/bandwidth/copy, kind: bandwidth-copy, params: {bytes: 65536}},\n"
                                    "        {name: peak/latency/replay, kind: latency-replay, params: {dispatches: 5}}]\n"))
    out = tmp_path / "r.json"
    res = run_suite(s, out, progress=False)
    doc = json.loads(out.read_text())
    validate(doc)
    read_results(out)
    assert {b["status"] for b in doc["benchmarks"]} == {"ok"}
    assert len(doc["benchmarks"]) == 6
    assert set(doc["devices"]) == {"local-sync://0", "local-task://0"}
    for b in doc["benchmarks"]:
        assert len(b["samples"]["device_ms"]) == 3 and len(b["samples"]["host_ms"]) == 3
        assert all(v > 0 for v in b["samples"]["device_ms"])
    mlp = next(b for b in doc["benchmarks"] if b["name"] == "mlp")
    assert mlp["correctness"]["passed"] and mlp["correctness"]["checked"]
    assert mlp["dispatches"] and all(d["device_ms"]["count"] == 3 for d in mlp["dispatches"])
    assert mlp["metrics"]["items_per_run"] == 2 and mlp["metrics"]["flops"] > 0
    assert res["run"]["finished_at"]


def test_a_failing_benchmark_does_not_stop_the_suite(tmp_path: Path) -> None:
    s = load_suite(_suite(tmp_path, "models: [{name: broken, path: missing.onnx},\n"
                                    "         {name: mlp, zoo: tiny-mlp}]\n"))
    doc = run_suite(s, tmp_path / "r.json", progress=False)
    by = {(b["name"], b["device"]): b for b in doc["benchmarks"]}
    assert by[("broken", "local-sync://0")]["status"] == "error"
    assert "does not exist" in by[("broken", "local-sync://0")]["error"]
    assert by[("mlp", "local-sync://0")]["status"] == "ok"
    assert any("broken" in w for w in doc["warnings"])


def test_unavailable_explicit_device_is_recorded_as_skipped(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ndevices: ['hip://0']\n" + FAST + "micro: [{name: l, kind: latency-dispatch}]\n")
    doc = run_suite(load_suite(str(p)), tmp_path / "r.json", progress=False)
    assert [b["status"] for b in doc["benchmarks"]] == ["skipped"]
    assert "hip" in doc["benchmarks"][0]["error"]


def _wrong_copy(bindings, constants, attrs, workgroups, wg_range) -> None:
    n = int(constants[0]) * 4
    out = bindings[1].view(np.float32)[:n]
    np.copyto(out, bindings[0].view(np.float32)[:n])
    out[n // 2] += 1.0  # one wrong element


def test_a_wrong_kernel_is_caught_and_not_timed(tmp_path: Path, monkeypatch) -> None:
    import halbench.kernels.micro  # noqa: F401  (registers micro.copy)

    register_kernel("micro.copy", _wrong_copy, parallel=False, replace=True)
    try:
        s = load_suite(_suite(tmp_path, "micro: [{name: copy, kind: bandwidth-copy, params: {bytes: 65536}}]\n"))
        doc = run_suite(s, tmp_path / "r.json", progress=False)
    finally:
        from halbench.kernels import micro as kernels_local

        register_kernel("micro.copy", kernels_local._copy, parallel=False, replace=True)
    assert {b["status"] for b in doc["benchmarks"]} == {"wrong"}
    assert all(b["samples"]["device_ms"] == [] for b in doc["benchmarks"])
    assert all(b["correctness"]["passed"] is False for b in doc["benchmarks"])


def test_smoke_suite_on_lavapipe_micro(tmp_path: Path) -> None:
    """The smoke suite's microbenchmarks on the real Vulkan driver (lavapipe in CI)."""
    from halbench.drivers import resolve_devices

    infos, _ = resolve_devices(["vulkan://*"])
    if not infos:
        pytest.skip("no Vulkan device")
    s = load_suite("smoke")
    doc = run_suite(s, tmp_path / "r.json", devices=["vulkan://*"], only=["peak/*"], progress=False)
    statuses = {b["name"]: b["status"] for b in doc["benchmarks"]}
    assert statuses["peak/bandwidth/copy"] == "ok", doc["benchmarks"]
    assert statuses["peak/latency/replay"] == "ok"
    copy = next(b for b in doc["benchmarks"] if b["name"] == "peak/bandwidth/copy")
    assert copy["timing"]["calibrated"] is True  # lavapipe has calibrated timestamps
    assert copy["format"].startswith("vulkan-spirv")


def test_repetitions_run_round_robin_and_keep_blocks(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ndevices: ['local-sync://']\n"
                 "settings: {warmup: 0, min_time_s: 0.0, min_samples: 2, max_samples: 2, repetitions: 3}\n"
                 "micro: [{name: a, kind: latency-dispatch}, {name: b, kind: latency-replay,"
                 " params: {dispatches: 3}, settings: {repetitions: 2}}]\n")
    doc = run_suite(load_suite(str(p)), tmp_path / "r.json", progress=False)
    validate(doc)
    by = {b["name"]: b for b in doc["benchmarks"]}
    assert by["a"]["samples"]["blocks"] == [2, 2, 2] and len(by["a"]["samples"]["device_ms"]) == 6
    assert by["b"]["samples"]["blocks"] == [2, 2]
    assert len(doc["benchmarks"]) == 2


def test_sample_loop_warms_up_for_warmup_s_before_sampling():
    """GPUs raise clocks only after some time under load: warmup is a count AND a time floor."""
    import time as _time

    from halbench.bench.runner import sample_loop
    from halbench.bench.suite import Settings

    calls: list[float] = []

    def run() -> float:
        calls.append(_time.monotonic())
        _time.sleep(0.005)
        return len(calls)

    s = Settings(warmup=1, warmup_s=0.1, min_time_s=0.0, min_samples=3, max_samples=3)
    samples = sample_loop(run, s)
    assert samples == [len(calls) - 2, len(calls) - 1, len(calls)]
    warm = calls[:-3]
    assert len(warm) > 1 and calls[-3] - calls[0] >= 0.1
    # warmup_s 0 keeps the count alone
    calls.clear()
    assert len(sample_loop(run, Settings(warmup=2, warmup_s=0.0, min_time_s=0.0, min_samples=1, max_samples=1))) == 1
    assert len(calls) == 3
