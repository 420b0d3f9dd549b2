"""``halbench trace``: Chrome trace-event JSON with a track per device queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from halbench.bench.results import ResultsError
from halbench.cli import main
from halbench.reports.trace import to_trace_events
from tests.reports.make_results import make_results


def test_trace_events() -> None:
    doc = make_results(seed=1)
    trace = to_trace_events(doc)
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(names) == 3 and any("cuda://0 NVIDIA H100" in n for n in names)
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert {t["args"]["name"] for t in threads} == {"queue 0"} and len(threads) == 3
    slices = [e for e in events if e.get("cat") == "dispatch"]
    stored = sum(len(b.get("dispatches") or []) for b in doc["benchmarks"])
    assert len(slices) == stored
    s = next(e for e in slices if e["args"]["benchmark"] == "resnet50/b1")
    assert s["ph"] == "X" and s["dur"] > 0 and s["args"]["flops"] > 0 and s["args"]["bytes"] > 0
    assert "achieved_gflop_s" in s["args"]
    # Each benchmark slice encloses its dispatches on the same track.
    bench = next(e for e in events if e.get("cat") == "benchmark" and e["name"] == "resnet50/b1"
                 and e["pid"] == s["pid"])
    assert bench["ts"] <= s["ts"] and s["ts"] + s["dur"] <= bench["ts"] + bench["dur"] + 1e-6


def test_trace_one_benchmark_and_errors(tmp_path: Path) -> None:
    doc = make_results(seed=1)
    trace = to_trace_events(doc, "mobilenetv2/b1")
    assert {e["args"]["benchmark"] for e in trace["traceEvents"] if e.get("cat") == "dispatch"} == \
        {"mobilenetv2/b1"}
    with pytest.raises(ResultsError, match="no benchmark named 'nope'; there are: minilm"):
        to_trace_events(doc, "nope")
    for b in doc["benchmarks"]:
        b["dispatches"] = []
    with pytest.raises(ResultsError, match="no dispatch timings"):
        to_trace_events(doc)


def test_trace_cli(results_file, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    r = CliRunner().invoke(main, ["trace", str(results_file("r", seed=1)), "--benchmark", "resnet50/b1",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["displayTimeUnit"] == "ms" and data["otherData"]["clock"] == "CLOCK_MONOTONIC"
    assert "dispatch slices" in r.output
