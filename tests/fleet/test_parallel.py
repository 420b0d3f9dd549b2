"""run-suite --parallel: every device of this host at once, one pinned worker each, one file."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from halbench.bench.results import read_results
from halbench.bench.suite import load_suite
from halbench.fleet import run_parallel
from halbench.fleet.merge import busy_devices
from halbench.fleet.worker import discover

ROOT = Path(__file__).resolve().parents[2]
ONLY = ["tiny-mlp/b1", "peak/latency/dispatch"]


def _devices() -> list[str]:
    devs = ["local-sync://", "local-task://"]
    if not discover(["vulkan://"])["devices"]:
        pytest.skip("no Vulkan device (lavapipe) here")
    return [*devs, "vulkan://"]


def _overlap(a: list, b: list) -> bool:
    return any(s0 < e1 and s1 < e0 for s0, e0 in a for s1, e1 in b)


def test_parallel_three_devices_one_file_with_busy_devices(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    doc = run_parallel(load_suite("smoke"), out, devices=_devices(), only=ONLY, progress=False)
    assert read_results(out) == json.loads(out.read_text())  # valid, schema 3
    assert sorted(doc["devices"]) == ["local-sync://0", "local-task://0", "vulkan://0"]
    benches = doc["benchmarks"]
    assert sorted((b["name"], b["device"]) for b in benches) == sorted(
        (n, d) for n in ONLY for d in doc["devices"])
    assert all(b["status"] == "ok" and len(b["spans"]) == 3 and b["samples"]["blocks"] for b in benches)
    # one device's benchmarks ran one after another: its spans never overlap each other
    for dev in doc["devices"]:
        spans = sorted(s for b in benches if b["device"] == dev for s in b["spans"])
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), dev
    # busy: exactly the other devices whose benchmarks overlapped in time, and not none at all
    for b in benches:
        want = {o["device"] for o in benches if o["device"] != b["device"] and _overlap(b["spans"], o["spans"])}
        assert set(b["busy"]) == want
    assert any(b["busy"] for b in benches), "three workers started together never overlapped"
    assert not Path(f"{out}.partial").exists()
    node = doc["run"]["nodes"]
    assert list(node) == [d["node"] for d in doc["devices"].values()][:1] and "host" in next(iter(node.values()))


def test_busy_skips_the_same_gpu_under_another_api() -> None:
    from halbench.bench.schema import BenchmarkResult

    devices = {"cuda://0": {"node": "h", "identity": {"uuid": "GPU-1"}},
               "vulkan://0": {"node": "h", "identity": {"uuid": "GPU-1"}},
               "cuda://1": {"node": "h", "identity": {"uuid": "GPU-2"}},
               "cuda://0@other": {"node": "o", "identity": {"uuid": "GPU-9"}}}
    entries = [BenchmarkResult("m", "model", d, d.partition(":")[0], "error", "x", spans=((0.0, 10.0),))
               for d in devices]
    got = {b.device: b.busy for b in busy_devices(entries, devices)}
    assert got == {"cuda://0": ("cuda://1",), "vulkan://0": ("cuda://1",),
                   "cuda://1": ("cuda://0", "vulkan://0"), "cuda://0@other": ()}


def _workers_of(uri: str) -> list[int]:
    """Fleet workers (started by this test) whose unit holds ``uri``."""
    pids = []
    for p in Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 3 and cmd[2] == b"halbench.fleet.worker" and cmd[3].endswith(b"spec.json"):
            try:
                spec = json.loads(Path(cmd[3].decode()).read_text())
            except (OSError, ValueError):
                continue
            if any(d["pattern"].startswith(uri) for d in spec["devices"]):
                pids.append(int(p.name))
    return pids


def test_a_killed_worker_loses_only_its_unfinished_benchmarks_and_resume_runs_them(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    journal = Path(f"{out}.partial")
    devices = ["local-sync://", "local-task://"]
    suite = load_suite("smoke")
    done: dict = {}
    t = threading.Thread(target=lambda: done.setdefault(
        "doc", run_parallel(suite, out, devices=devices, only=["tiny-*", "peak/latency/*"], progress=False)))
    t.start()
    deadline = time.monotonic() + 120
    killed = False
    while time.monotonic() < deadline and not killed:  # after local-task's first result: kill its worker
        text = journal.read_text() if journal.exists() else ""
        if '"device": "local-task://0"' in text:
            for pid in _workers_of("local-task://"):
                os.kill(pid, signal.SIGKILL)
                killed = True
        time.sleep(0.05)
    t.join(300)
    assert killed and "doc" in done
    doc = done["doc"]
    task = [b for b in doc["benchmarks"] if b["device"] == "local-task://0"]
    sync = [b for b in doc["benchmarks"] if b["device"] == "local-sync://0"]
    assert len(sync) == len(task) == 5
    assert all(b["status"] == "ok" for b in sync)
    lost = [b for b in task if b["status"] != "ok"]
    assert lost and all(b["status"] == "error" and "was lost" in b["error"] and "local-task://0" in b["error"]
                        for b in lost)
    assert journal.exists()  # kept: --resume runs what the lost worker had not finished
    recs = [json.loads(x) for x in journal.read_text().splitlines()]
    finished = {(r["rep"], r["result"]["name"]): r["result"]["samples"]["device_ms"] for r in recs
                if r["type"] == "result" and r["result"]["device"] == "local-task://0"}
    assert finished  # what local-task finished before the kill is in the journal
    kept = {b["name"]: b["samples"] for b in sync}
    # the CLI: --resume --parallel finishes the run; nothing that finished is run again
    r = subprocess.run([sys.executable, "-m", "halbench", "run-suite", "smoke", "--parallel", "--resume",
                        "--device", devices[0], "--device", devices[1], "--only", "tiny-*",
                        "--only", "peak/latency/*", "-o", str(out), "--no-progress"],
                       check=False, capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    again = read_results(out)
    assert all(b["status"] == "ok" for b in again["benchmarks"]) and len(again["benchmarks"]) == 10
    assert {b["name"]: b["samples"] for b in again["benchmarks"] if b["device"] == "local-sync://0"} == kept
    task_again = {b["name"]: b["samples"] for b in again["benchmarks"] if b["device"] == "local-task://0"}
    for (rep, name), ms in finished.items():  # kept, not run again
        start = sum(task_again[name]["blocks"][:rep])
        assert task_again[name]["device_ms"][start:start + len(ms)] == ms
    assert not journal.exists()


def test_fleet_resources_and_exclusive_modes(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "halbench", *args], check=False, capture_output=True,
                              text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})

    r = cli("fleet-resources")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["halbench_gpu_local-sync___0"] == 1 and res["halbench_gpu_local-task___0"] == 1
    r = cli("run-suite", "smoke", "--parallel", "--cluster", "auto", "-o", str(tmp_path / "r.json"))
    assert r.returncode != 0 and "exclude each other" in r.stderr and r.stderr.count("\n") == 1
