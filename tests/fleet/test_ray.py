"""run-suite --cluster: a local Ray cluster (head + two worker nodes on 127.0.0.1) runs the smoke
suite on local-sync and local-task as two nodes; a node removed mid-run loses only its own
unfinished benchmarks. Ray is the fleet extra; without it the tests skip, saying so."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from halbench.bench.results import read_results
from halbench.bench.suite import load_suite
from halbench.fleet.units import resource_name

ROOT = Path(__file__).resolve().parents[2]
ONLY = ["tiny-mlp/b1", "peak/latency/dispatch"]
SYNC, TASK = resource_name("local-sync://0"), resource_name("local-task://0")


@pytest.fixture(scope="module")
def cluster():
    # Everything on the loopback address: Ray would otherwise advertise this host's address
    # (and a driver would dial that one). Read when ray is imported, so set before, and pinned after.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    pytest.importorskip("ray", reason="Ray is the fleet extra: pip install 'halbench[fleet]'")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    ray_constants.ENABLE_RAY_CLUSTER = False

    with socket.socket() as sock:  # a free port for the Ray Client server
        sock.bind(("127.0.0.1", 0))
        client_port = sock.getsockname()[1]
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                      "node_ip_address": "127.0.0.1",
                                                      "ray_client_server_port": client_port})
    c.client_port = client_port
    try:
        nodes = {r: c.add_node(num_cpus=1, resources={r: 1}, node_ip_address="127.0.0.1") for r in (SYNC, TASK)}
        c.wait_for_nodes(timeout=120)
        import ray

        ray.init(address=c.address, _node_ip_address="127.0.0.1", logging_level="ERROR", log_to_driver=False)
        yield c, nodes
    finally:
        import ray

        ray.shutdown()
        c.shutdown()


def _by_device(doc: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for b in doc["benchmarks"]:
        out.setdefault(b["device"], []).append(b)
    return out


def test_two_nodes_one_merged_file_and_report(cluster, tmp_path: Path) -> None:
    from halbench.fleet.ray_fleet import run_cluster
    from halbench.reports.report import write_report

    c, _ = cluster
    out = tmp_path / "fleet.json"
    doc = run_cluster(c.address, load_suite("smoke"), out, only=ONLY, progress=False)
    assert read_results(out)["benchmarks"] == doc["benchmarks"]
    devs = doc["devices"]
    assert len(devs) == 2
    sync = next(k for k in devs if k.startswith("local-sync://0@"))
    task = next(k for k in devs if k.startswith("local-task://0@"))
    # devices keyed by URI and node; each node recorded with its host and environment
    assert devs[sync]["node"] != devs[task]["node"]
    for k in (sync, task):
        node = doc["run"]["nodes"][devs[k]["node"]]
        assert k.endswith("@" + devs[k]["node"]) and node["host"]["hostname"] and node["ray_node_id"]
        assert devs[k]["uri"] == k.split("@")[0]
    benches = _by_device(doc)
    assert sorted(b["name"] for b in benches[sync]) == sorted(b["name"] for b in benches[task]) == sorted(ONLY)
    assert all(b["status"] == "ok" and b["samples"]["blocks"] and len(b["spans"]) == 3
               for b in doc["benchmarks"])
    assert all(b["busy"] == [] for b in doc["benchmarks"])  # other nodes are not "busy beside it"
    assert not Path(f"{out}.partial").exists()
    html = write_report([str(out)], tmp_path / "r.html").read_text()
    assert sync in html and task in html and "Fleet" in html


def test_ray_client_from_another_process_through_the_cli(cluster, tmp_path: Path) -> None:
    """A laptop's view: `--cluster ray://HOST:PORT` (Ray Client) from a process outside the cluster."""
    c, _ = cluster
    out = tmp_path / "client.json"
    r = subprocess.run([sys.executable, "-m", "halbench", "run-suite", "smoke", "--cluster",
                        f"ray://127.0.0.1:{c.client_port}", "--only", "tiny-mlp/b1", "-o", str(out),
                        "--no-progress", "--report", str(tmp_path / "client.html")],
                       check=False, capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    doc = read_results(out)
    assert sorted(k.split("@")[0] for k in doc["devices"]) == ["local-sync://0", "local-task://0"]
    assert all(b["status"] == "ok" for b in doc["benchmarks"]) and len(doc["benchmarks"]) == 2


def test_a_node_that_dies_loses_only_its_unfinished_benchmarks(cluster, tmp_path: Path) -> None:
    from halbench.fleet.ray_fleet import run_cluster

    c, nodes = cluster
    out = tmp_path / "fleet.json"
    journal = Path(f"{out}.partial")
    got: dict = {}

    def run() -> None:
        try:
            got["doc"] = run_cluster(c.address, load_suite("smoke"), out, only=["tiny-*", "peak/latency/*"],
                                     progress=False)
        except BaseException as e:  # noqa: BLE001 - reported by the assertions below
            got["error"] = e

    t = threading.Thread(target=run)
    t.start()
    deadline, removed = time.monotonic() + 180, False
    while time.monotonic() < deadline and not removed and t.is_alive():
        text = journal.read_text() if journal.exists() else ""
        if '"device": "local-task://0@' in text:  # local-task's node finished something: kill it
            c.remove_node(nodes[TASK], allow_graceful=False)
            removed = True
        time.sleep(0.05)
    t.join(300)
    assert removed and "doc" in got, got.get("error")
    benches = _by_device(got["doc"])
    sync = next(v for k, v in benches.items() if k.startswith("local-sync://0@"))
    task = next(v for k, v in benches.items() if k.startswith("local-task://0@"))
    assert len(sync) == len(task) == 5
    assert all(b["status"] == "ok" for b in sync), [b["error"] for b in sync]  # the other node is untouched
    lost = [b for b in task if b["status"] != "ok"]
    assert lost and all(b["status"] == "error" and "was lost" in b["error"] for b in lost)
    assert journal.exists()
    recs = [json.loads(x) for x in journal.read_text().splitlines()]
    finished = {(r["rep"], r["result"]["name"]): r["result"]["samples"]["device_ms"] for r in recs
                if r["type"] == "result" and r["result"]["device"].startswith("local-task://0@")}
    assert finished
    # the node comes back (same devices declared, so the same node name): --resume runs only what
    # is missing; what either node finished is kept as it was
    nodes[TASK] = c.add_node(num_cpus=1, resources={TASK: 1}, node_ip_address="127.0.0.1")
    c.wait_for_nodes(timeout=120)
    again = run_cluster(c.address, load_suite("smoke"), out, only=["tiny-*", "peak/latency/*"], progress=False,
                        resume=True)
    by = _by_device(again)
    assert sorted(by) == sorted(benches)  # the same device keys: the same node names
    assert all(b["status"] == "ok" for b in again["benchmarks"]) and not journal.exists()
    assert [b["samples"] for b in by[next(k for k in by if k.startswith("local-sync"))]] == \
        [b["samples"] for b in sync]
    task_again = {b["name"]: b["samples"] for k, v in by.items() if k.startswith("local-task") for b in v}
    for (rep, name), ms in finished.items():
        start = sum(task_again[name]["blocks"][:rep])
        assert task_again[name]["device_ms"][start:start + len(ms)] == ms


def test_cluster_without_ray_is_one_line(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['ray'] = None; from halbench.cli import main; "
            "main(['run-suite', 'smoke', '--cluster', 'auto', '-o', sys.argv[1]])")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.json")], check=False, capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "pip install 'halbench[fleet]'" in r.stderr
