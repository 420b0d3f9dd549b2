"""The report's runtime comparisons as plain data: halbench against the peers that ran the same
models (PyTorch, ONNX Runtime, IREE), from the entries of each results file.

Times are the median device time per run, host wall time where an entry has no device time.
A peer on a device where halbench ran the model meets halbench there; one on another device of
the host (ONNX Runtime's CPU on ``local-task://``) is set against halbench's fastest device for
that model.
"""

from __future__ import annotations

from typing import Any

from halbench.bench.schema import HALBENCH
from halbench.bench.stats import Stats
from halbench.reports.compare import timing_samples
from halbench.reports.runtimes import runtimes_in

__all__ = ["correctness_note", "peer_columns", "runtimes_section"]


def correctness_note(bench: dict[str, Any]) -> str:
    """For a wrong entry: the reference it was checked against and, for halbench's own entries
    checked against onnxruntime, whether the local-sync NumPy reference shares the error."""
    corr = bench.get("correctness") or {}
    parts = [f"reference: {corr['reference']}"] if corr.get("reference") else []
    local, tol = corr.get("local_sync_rel_error"), corr.get("tolerance")
    if bench.get("runtime", HALBENCH) == HALBENCH and local is not None and tol is not None:
        # local-sync as wrong as halbench (against onnxruntime): the bug is in what both share.
        parts.append("local-sync agrees with halbench (compiler bug shared by local-sync)"
                     if local > tol else "local-sync disagrees")
    return "; ".join(parts)


def _median(bench: dict[str, Any]) -> float | None:
    if bench["status"] != "ok":
        return None
    _, samples = timing_samples(bench)
    return Stats(samples).median if samples else None


def _title(bench: dict[str, Any]) -> str:
    """The peer's runtime_info as a tooltip: note, version, settings."""
    info = bench.get("runtime_info") or {}
    parts = [str(info["note"])] if info.get("note") else []
    if info.get("version"):
        parts.append(f"version {info['version']}")
    settings = info.get("settings") or {}
    if settings:
        parts.append(", ".join(f"{k}={v}" for k, v in settings.items()))
    return " · ".join(parts)


def _models(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in doc["benchmarks"] if b["kind"] == "model"]


def _halbench_times(doc: dict[str, Any]) -> dict[tuple[str, str], float]:
    return {(b["name"], b["device"]): m for b in _models(doc)
            if b["runtime"] == HALBENCH and (m := _median(b)) is not None}


def _fastest(times: dict[tuple[str, str], float], name: str) -> tuple[str, float] | None:
    found = [(ms, dev) for (n, dev), ms in times.items() if n == name]
    return (min(found)[1], min(found)[0]) if found else None


def _peer_item(b: dict[str, Any], times: dict[tuple[str, str], float]) -> dict[str, Any]:
    """One peer entry against halbench: same device, else halbench's fastest device."""
    median = _median(b)
    item = {"device": b["device"], "median": median, "status": b["status"],
            "error": b.get("error") or "", "why": correctness_note(b) if b["status"] == "wrong" else "",
            "title": _title(b), "ratio": None, "vs": None}
    ref = times.get((b["name"], b["device"]))
    if ref is None and (fast := _fastest(times, b["name"])):
        item["vs"], ref = fast
    if median is not None and ref:
        item["ratio"] = median / ref
    return item


def peer_columns(docs: list[tuple[str, dict[str, Any]]], model_names: list[str]
                 ) -> tuple[list[dict[str, str]], dict[str, list[list[dict[str, Any]]]]]:
    """The models table's peer columns, one per (file, peer runtime), and per model one cell per
    column: a list of that peer's entries of the model (usually one), each with its ratio to
    halbench (peer time / halbench time)."""
    columns, cells = [], {name: [] for name in model_names}
    for label, doc in docs:
        times = _halbench_times(doc)
        for runtime in runtimes_in(doc):
            peer = [b for b in _models(doc) if b["runtime"] == runtime]
            if runtime == HALBENCH or not peer:
                continue
            columns.append({"label": runtime if len(docs) == 1 else f"{label} · {runtime}",
                            "runtime": runtime, "title": _title(peer[0])})
            for name in model_names:
                cells[name].append([_peer_item(b, times) for b in peer if b["name"] == name])
    return columns, cells


def _device_chart(title: str, uri: str, doc: dict[str, Any], runtimes: list[str]
                  ) -> dict[str, Any] | None:
    entries = [b for b in _models(doc) if b["device"] == uri]
    present = [r for r in runtimes if any(b["runtime"] == r for b in entries)]
    if len(present) < 2:
        return None  # nothing to compare on this device
    names = list(dict.fromkeys(b["name"] for b in entries))
    rows = []
    for name in names:
        by_runtime = {b["runtime"]: b for b in entries if b["name"] == name}
        medians = {r: _median(b) for r, b in by_runtime.items()}
        best = min((m for m in medians.values() if m is not None), default=None)
        cells = []
        for r in present:
            b, m = by_runtime.get(r), medians.get(r)
            cells.append({"runtime": r, "median": m, "ratio": m / best if m is not None and best else None,
                          "status": b["status"] if b else "absent",
                          "error": (b.get("error") or "") if b else "",
                          "why": correctness_note(b) if b and b["status"] == "wrong" else "",
                          "title": _title(b) if b and r != HALBENCH else ""})
        rows.append({"name": name, "cells": cells})
    return {"title": title, "device": uri, "runtimes": present, "rows": rows}


def runtimes_section(docs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per device where halbench ran models, every runtime's median per model and its ratio to
    the fastest runtime there; and the peers that ran on another device of the host, against
    halbench's fastest device. Empty when no peer ran."""
    runtimes = list(dict.fromkeys(r for _, doc in docs for r in runtimes_in(doc)))
    if runtimes in ([], [HALBENCH]):
        return {"runtimes": runtimes, "charts": [], "elsewhere": []}
    charts, elsewhere = [], []
    for label, doc in docs:
        times = _halbench_times(doc)
        halbench_devices = list(dict.fromkeys(
            b["device"] for b in _models(doc) if b["runtime"] == HALBENCH))
        for uri in halbench_devices:
            name = doc["devices"].get(uri, {}).get("identity", {}).get("name", uri)
            title = f"{name} · {uri}" + (f" ({label})" if len(docs) > 1 else "")
            chart = _device_chart(title, uri, doc, runtimes)
            if chart:
                charts.append(chart)
        for b in _models(doc):
            if b["runtime"] != HALBENCH and b["device"] not in halbench_devices:
                elsewhere.append({"name": b["name"], "runtime": b["runtime"], "file": label,
                                  **_peer_item(b, times)})
    return {"runtimes": runtimes, "charts": charts, "elsewhere": elsewhere}
