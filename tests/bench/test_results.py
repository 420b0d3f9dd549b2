"""The results schema: round trip, one-line validation errors, migrations, DataFrames."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from halbench.bench.results import (
    MIGRATIONS,
    SCHEMA_VERSION,
    ResultsError,
    load_results,
    read_results,
    validate,
    write_results,
)
from tests.reports.make_results import make_results


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return make_results(seed=3, wrong="resnet50/b1")


def test_round_trip(tmp_path: Path, doc: dict[str, Any]) -> None:
    path = write_results(tmp_path / "r.json", doc)
    assert read_results(path) == doc
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_invalid_write_keeps_the_old_file(tmp_path: Path, doc: dict[str, Any]) -> None:
    path = write_results(tmp_path / "r.json", doc)
    before = path.read_bytes()
    bad = copy.deepcopy(doc)
    del bad["run"]["id"]
    with pytest.raises(ResultsError, match=r"run\.id: missing"):
        write_results(path, bad)
    assert path.read_bytes() == before
    assert len(list(tmp_path.iterdir())) == 1


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[int(p)] if p.isdigit() else d[p]
        if value is _DELETE:
            del d[int(last) if last.isdigit() else last]
        else:
            d[int(last) if last.isdigit() else last] = value
    return mutate


_DELETE = object()

CASES = [
    ("schema_version", _set("schema_version", "1"), r"^schema_version: expected int"),
    ("kind", _set("kind", "other"), r"^kind: expected 'halbench-results'"),
    ("run", _set("run", _DELETE), r"^run: missing"),
    ("git_commit", _set("run.git_commit", 5), r"^run\.git_commit: expected str, got int"),
    ("gate threshold", _set("run.suite.gate.threshold", -1),
     r"^run\.suite\.gate\.threshold: expected a number >= 0"),
    ("device identity", _set("devices.vulkan://0.identity", _DELETE),
     r"^devices\.vulkan://0\.identity: missing"),
    ("sample", _set("benchmarks.0.samples.device_ms.2", "abc"),
     r"^benchmarks\[0\]\(mobilenetv2/b1\)\.samples\.device_ms\[2\]: expected a finite number, got str"),
    ("negative sample", _set("benchmarks.0.samples.host_ms.0", -0.5),
     r"samples\.host_ms\[0\]: expected a number >= 0"),
    ("boolean sample", _set("benchmarks.0.samples.host_ms.0", True), r"samples\.host_ms\[0\]"),
    ("status", _set("benchmarks.0.status", "great"), r"\.status: expected one of ok, wrong"),
    ("device", _set("benchmarks.0.device", "cuda://7"), r"\.device: 'cuda://7' is not listed"),
    ("kind of benchmark", _set("benchmarks.0.kind", "macro"), r"\.kind: expected one of model, micro"),
    ("ok without samples", _set("benchmarks.0.samples", {"device_ms": [], "host_ms": []}),
     r"status is 'ok' but no device_ms"),
    ("wrong with samples", _set("benchmarks.0.status", "wrong"), r"status is 'wrong' but samples"),
    ("dispatch median", _set("benchmarks.0.dispatches.3.device_ms.median", None),
     r"dispatches\[3\]\.device_ms\.median: expected a finite number, got null"),
    ("trace", _set("benchmarks.0.dispatches.0.trace.end_ns", 0), r"dispatches\[0\]\.trace\.end_ns: ends"),
    ("warnings", _set("warnings", [1]), r"^warnings\[0\]: expected str"),
]


@pytest.mark.parametrize(("mutate", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validation_names_the_bad_field(doc: dict[str, Any], mutate: Callable, pattern: str) -> None:
    bad = copy.deepcopy(doc)
    mutate(bad)
    with pytest.raises(ResultsError, match=pattern) as e:
        validate(bad)
    assert "\n" not in str(e.value)


def test_duplicate_benchmark(doc: dict[str, Any]) -> None:
    bad = copy.deepcopy(doc)
    bad["benchmarks"].append(copy.deepcopy(bad["benchmarks"][0]))
    with pytest.raises(ResultsError, match=r"duplicate benchmark 'mobilenetv2/b1' on 'vulkan://0'"):
        validate(bad)


def test_extra_fields_are_allowed(doc: dict[str, Any]) -> None:
    ok = copy.deepcopy(doc)
    ok["benchmarks"][0]["runner_note"] = "added later without a schema bump"
    validate(ok)


def _version0() -> dict[str, Any]:
    """The pre-release layout: samples in seconds as device_times/host_times, no kind marker."""
    return {
        "schema_version": 0,
        "run": {"id": "old", "halbench_version": "0.0.3", "started_at": "2026-01-01T00:00:00Z"},
        "devices": {"local-sync://0": {"driver": "local-sync", "identity": {"name": "host CPU"}}},
        "benchmarks": [
            {"name": "tiny-mlp/b1", "device": "local-sync://0", "driver": "local-sync",
             "status": "ok", "device_times": [0.0012, 0.0011], "host_times": [0.0013, 0.0012]},
            {"name": "peak/bandwidth/copy", "device": "local-sync://0", "driver": "local-sync",
             "status": "error", "error": "boom"},
        ],
    }


def test_migration_from_version_0(tmp_path: Path) -> None:
    assert 0 in MIGRATIONS and 1 in MIGRATIONS and 2 in MIGRATIONS and SCHEMA_VERSION == 3
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_version0()))
    doc = read_results(path)
    assert doc["schema_version"] == SCHEMA_VERSION and doc["kind"] == "halbench-results"
    tiny, peak = doc["benchmarks"]
    assert tiny["samples"]["device_ms"] == pytest.approx([1.2, 1.1])
    assert tiny["samples"]["host_ms"] == pytest.approx([1.3, 1.2])
    assert "device_times" not in tiny
    assert (tiny["kind"], peak["kind"]) == ("model", "micro")
    assert peak["samples"] == {"device_ms": [], "host_ms": []}
    assert tiny["runtime"] == peak["runtime"] == "halbench"


def test_migration_from_version_1_marks_every_entry_halbench(tmp_path: Path) -> None:
    from tests.reports.make_results import make_results

    v1 = make_results()
    v1["schema_version"] = 1
    for b in v1["benchmarks"]:
        b.pop("runtime", None)
        b.pop("runtime_info", None)
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(v1))
    doc = read_results(path)
    assert doc["schema_version"] == 3
    assert {b["runtime"] for b in doc["benchmarks"]} == {"halbench"}
    assert len(doc["benchmarks"]) == len(v1["benchmarks"])


def test_newer_version_is_refused(tmp_path: Path, doc: dict[str, Any]) -> None:
    newer = dict(doc, schema_version=SCHEMA_VERSION + 1)
    path = tmp_path / "new.json"
    path.write_text(json.dumps(newer))
    with pytest.raises(ResultsError, match=r"schema_version 4 is newer than this halbench reads \(3\); upgrade"):
        read_results(path)


@pytest.mark.parametrize(("content", "pattern"), [
    (None, r"results file not found"),
    ('{"schema_version": 1, "kind": "halb', r"not valid JSON \(line 1, column \d+"),
    ("[1, 2]", r"expected a JSON object, got list"),
    ('{"hello": 1}', r"schema_version: missing or not an integer"),
])
def test_unreadable_files(tmp_path: Path, content: str | None, pattern: str) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ResultsError, match=pattern) as e:
        read_results(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_load_results_dataframes(tmp_path: Path, doc: dict[str, Any]) -> None:
    a = write_results(tmp_path / "a.json", doc)
    b = write_results(tmp_path / "b.json", make_results(seed=4, devices=("lavapipe",)))
    frames = load_results([a, b])
    assert set(frames) == {"runs", "devices", "benchmarks", "samples", "dispatches"}
    assert len(frames["runs"]) == 2
    assert len(frames["devices"]) == 3 + 1
    bench = frames["benchmarks"]
    assert len(bench) == len(doc["benchmarks"]) + 9
    row = bench[(bench.source == str(a)) & (bench.name == "mobilenetv2/b1") & (bench.device == "cuda://0")]
    samples = next(x for x in doc["benchmarks"]
                   if (x["name"], x["device"]) == ("mobilenetv2/b1", "cuda://0"))["samples"]["device_ms"]
    assert row.median_ms.item() == pytest.approx(np.median(samples))
    s = frames["samples"]
    total = sum(len((x.get("samples") or {}).get("device_ms") or []) for x in doc["benchmarks"])
    assert len(s[s.source == str(a)]) == total
    assert {"device_ms", "host_ms", "index"} <= set(s.columns)
    wrong = bench[(bench.name == "resnet50/b1") & (bench.device == "vulkan://1") & (bench.source == str(a))]
    assert wrong.status.item() == "wrong" and wrong.samples.item() == 0
    assert len(frames["dispatches"]) > 100


@pytest.mark.parametrize("benchmarks", [None, "x", [None, 3]])
def test_migration_from_version_1_leaves_bad_benchmarks_to_validation(tmp_path: Path, benchmarks: Any) -> None:
    path = tmp_path / "v1.json"
    path.write_text(json.dumps({"schema_version": 1, "kind": "halbench-results",
                                "run": {"id": "x", "halbench_version": "0", "started_at": "t"},
                                "devices": {}, "benchmarks": benchmarks, "warnings": []}))
    with pytest.raises(ResultsError, match=r"^[^\n]*benchmarks[^\n]*$"):
        read_results(path)


def test_migration_from_version_2_records_the_one_node(tmp_path: Path) -> None:
    """Schema 3 adds run.nodes and a node per device; a version-2 file was one machine."""
    v2 = {"schema_version": 2, "kind": "halbench-results",
          "run": {"id": "r", "halbench_version": "0.1.0", "started_at": "2026-11-01T00:00:00Z",
                  "host": {"hostname": "bench-1"}},
          "devices": {"local-sync://0": {"driver": "local-sync", "identity": {"name": "host CPU"}}},
          "benchmarks": [{"name": "m", "kind": "model", "device": "local-sync://0", "driver": "local-sync",
                          "runtime": "halbench", "status": "ok", "samples": {"device_ms": [1.0]}}]}
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(v2))
    doc = read_results(path)
    assert doc["schema_version"] == 3
    assert doc["run"]["nodes"] == {"bench-1": {"host": {"hostname": "bench-1"}, "halbench_version": "0.1.0",
                                               "git_commit": None}}
    assert doc["devices"]["local-sync://0"]["node"] == "bench-1"
    bad = json.loads(json.dumps(doc))
    bad["devices"]["local-sync://0"]["node"] = "elsewhere"
    with pytest.raises(ResultsError, match=r"devices.local-sync://0.node: 'elsewhere' is not listed under run.nodes"):
        validate(bad)
    bad = json.loads(json.dumps(doc))
    bad["benchmarks"][0]["busy"] = ["cuda://9"]
    with pytest.raises(ResultsError, match=r"busy\[0\]: 'cuda://9' is not listed under devices"):
        validate(bad)
