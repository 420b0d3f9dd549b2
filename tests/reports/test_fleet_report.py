"""Reports for fleets: columns per (node, device) by model, the same-model spread, --match-by model."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

from halbench.bench.results import validate, write_results
from halbench.reports.fleet import by_model, fleet_section
from tests.reports.make_results import make_results

ROOT = Path(__file__).resolve().parents[2]


def _fleet(scale: float = 1.25) -> dict:
    """make_results' devices on two nodes; node n2's units are ``scale`` times slower."""
    one = make_results(devices=("h100-cuda",), micros=False, repetitions=3)
    doc = copy.deepcopy(one)
    doc["devices"], doc["benchmarks"] = {}, []
    doc["run"]["nodes"] = {"n1": {"host": {"hostname": "n1"}}, "n2": {"host": {"hostname": "n2"}}}
    for node, f in (("n1", 1.0), ("n2", scale)):
        for key, info in one["devices"].items():
            info = copy.deepcopy(info)
            info["node"] = node
            info["identity"]["uuid"] = f"GPU-{node}"
            doc["devices"][f"{key}@{node}"] = info
        for b in one["benchmarks"]:
            b = copy.deepcopy(b)
            b["device"] = f"{b['device']}@{node}"
            b["samples"]["device_ms"] = [x * f for x in b["samples"]["device_ms"]]
            b["busy"] = []
            doc["benchmarks"].append(b)
    validate(doc)
    return doc


def test_fleet_section_groups_units_by_model_and_measures_their_spread() -> None:
    doc = _fleet(1.25)
    sec = fleet_section([("fleet.json", doc)])
    assert sec["shown"] and len(sec["groups"]) == 1
    g = sec["groups"][0]
    assert [c["node"] for c in g["columns"]] == ["n1", "n2"]
    names = {b["name"] for b in doc["benchmarks"]}
    assert {r["name"] for r in g["rows"]} == names
    spread = {s["name"]: s for s in sec["spread"]}
    assert set(spread) == {r["name"] for r in g["rows"] if all(c["median"] for c in r["cells"])}
    for s in spread.values():
        assert s["units"] == 2 and s["slowest"].endswith("@n2")
        assert abs(s["max"] / s["min"] - 1.25) < 1e-6


def test_one_machine_without_busy_marks_shows_no_fleet_section() -> None:
    assert not fleet_section([("r.json", make_results())])["shown"]


def test_by_model_pools_units_of_one_model() -> None:
    doc = _fleet(1.0)
    pooled = by_model(doc)
    validate(pooled)
    (key,) = pooled["devices"]
    assert key.startswith("cuda://") and sorted(pooled["devices"][key]["units"]) == sorted(doc["devices"])
    n = len(doc["benchmarks"]) // 2
    assert len(pooled["benchmarks"]) == n
    for b in pooled["benchmarks"]:
        ok = [x for x in doc["benchmarks"] if x["name"] == b["name"]]
        if b["status"] == "ok":
            assert b["samples"]["device_ms"] == ok[0]["samples"]["device_ms"] + ok[1]["samples"]["device_ms"]
            assert len(b["samples"]["blocks"]) == 6


def test_compare_match_by_model_pairs_a_fleet_with_one_machine(tmp_path: Path) -> None:
    single = make_results(devices=("h100-cuda",), micros=False, repetitions=3)
    write_results(tmp_path / "one.json", single)
    write_results(tmp_path / "fleet.json", _fleet(1.0))

    def compare(*extra: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "halbench", "compare", str(tmp_path / "one.json"),
                            str(tmp_path / "fleet.json"), "--format", "json", *extra],
                           check=False, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    by_key = compare()
    assert all(r["base_status"] is None or r["new_status"] is None for r in by_key["rows"])  # nothing met
    by_model_rows = compare("--match-by", "model")["rows"]
    assert len(by_model_rows) == len(single["benchmarks"])
    assert all(r["base_status"] and r["new_status"] for r in by_model_rows)
