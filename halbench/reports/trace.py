"""``halbench trace``: stored dispatch slices as Chrome trace-event JSON (chrome://tracing, Perfetto).

One process per device, one thread (track) per device queue; each benchmark run is an enclosing
slice and each dispatch a nested slice at its calibrated host time (CLOCK_MONOTONIC, so tracks of
different devices line up), with flops, bytes, achieved rates and the ONNX nodes it computes in ``args``; a dispatch's
slice is named by its kind and those nodes (``conv+elementwise · conv_Conv, relu_Relu``).
"""

from __future__ import annotations

from typing import Any

from halbench.bench.results import ResultsError
from halbench.reports.units import dispatch_label

__all__ = ["to_trace_events"]


def _device_label(doc: dict[str, Any], uri: str) -> str:
    ident = doc["devices"][uri]["identity"]
    return f"{uri} {ident['name']} ({ident.get('api', '')} {ident.get('driver_version', '')})".strip()


def to_trace_events(doc: dict[str, Any], benchmark: str | None = None) -> dict[str, Any]:
    """Build the trace for one results dict; ``benchmark`` keeps only benchmarks of that name."""
    benches = [b for b in doc["benchmarks"] if benchmark is None or b["name"] == benchmark]
    if benchmark is not None and not benches:
        names = sorted({b["name"] for b in doc["benchmarks"]})
        raise ResultsError(f"no benchmark named {benchmark!r}; there are: {', '.join(names)}")
    pids = {uri: i + 1 for i, uri in enumerate(doc["devices"])}
    events: list[dict[str, Any]] = []
    tracks: set[tuple[int, int]] = set()
    for b in benches:
        slices = [d for d in b.get("dispatches") or [] if d.get("trace")]
        if not slices:
            continue
        pid = pids[b["device"]]
        by_queue: dict[int, list[dict[str, Any]]] = {}
        for d in slices:
            by_queue.setdefault(int(d["trace"].get("queue", 0)), []).append(d)
        for queue, ds in by_queue.items():
            tracks.add((pid, queue))
            start = min(d["trace"]["start_ns"] for d in ds)
            end = max(d["trace"]["end_ns"] for d in ds)
            events.append({"name": b["name"], "cat": "benchmark", "ph": "X", "pid": pid,
                           "tid": queue, "ts": start / 1e3, "dur": (end - start) / 1e3,
                           "args": {"status": b["status"], "format": b.get("format"),
                                    "dispatches": len(ds)}})
            for d in ds:
                t = d["trace"]
                dur_ns = t["end_ns"] - t["start_ns"]
                args: dict[str, Any] = {"benchmark": b["name"], "index": d["index"],
                                        "flops": d.get("flops"), "bytes": d.get("bytes"),
                                        "median_ms": d["device_ms"]["median"]}
                if d.get("nodes"):
                    args["onnx_nodes"] = list(d["nodes"])
                if dur_ns > 0 and d.get("bytes"):
                    args["achieved_gb_s"] = round(d["bytes"] / dur_ns, 3)
                if dur_ns > 0 and d.get("flops"):
                    args["achieved_gflop_s"] = round(d["flops"] / dur_ns, 3)
                events.append({"name": dispatch_label(d["name"], d.get("nodes")), "cat": "dispatch", "ph": "X", "pid": pid,
                               "tid": queue, "ts": t["start_ns"] / 1e3, "dur": dur_ns / 1e3,
                               "args": args})
    if not events:
        raise ResultsError("no dispatch timings with trace slices are stored"
                           + (f" for {benchmark!r}" if benchmark else "")
                           + " (the run had profiling off, or every benchmark failed)")
    meta: list[dict[str, Any]] = []
    for uri, pid in pids.items():
        if any(p == pid for p, _ in tracks):
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                         "args": {"name": _device_label(doc, uri)}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                         "args": {"sort_index": pid}})
    for pid, queue in sorted(tracks):
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": queue,
                     "args": {"name": f"queue {queue}"}})
    events.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    run = doc["run"]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"run": run["id"], "halbench_version": run["halbench_version"],
                          "git_commit": run.get("git_commit"), "clock": "CLOCK_MONOTONIC"}}
