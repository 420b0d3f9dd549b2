"""Turn results dicts into the plain data the HTML report shows (no HTML, no charts here).

A *column* is one device in one results file: several files side by side give several columns,
and ratios are taken against the first column that has the benchmark. Columns hold halbench's own
entries; peers' (``runtime`` other than halbench) go to :mod:`halbench.reports.report_runtimes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from halbench.bench.run_warnings import NOISY_MARK, entry_warnings
from halbench.bench.schema import HALBENCH
from halbench.bench.stats import NOISE_THRESHOLD, Stats
from halbench.reports.compare import timing_samples
from halbench.reports.fleet import fleet_section
from halbench.reports.report_compare import comparison_section
from halbench.reports.report_runtimes import correctness_note, peer_columns, runtimes_section
from halbench.reports.units import dispatch_label, fmt_bytes, fmt_num, fmt_rate, rate_prefix

__all__ = ["TOP_DISPATCHES", "TOP_MODELS", "build_context", "measured_peaks", "measured_roof",
           "published_peaks"]

TOP_MODELS = 2  # slowest models per device shown with a per-dispatch breakdown
TOP_DISPATCHES = 8
_KEY_FEATURES = [("shaderFloat16", "fp16"), ("bf16", "bf16"), ("shaderInt8", "int8"),
                 ("shaderIntegerDotProduct", "int dot"), ("bufferDeviceAddress", "BDA"),
                 ("cooperativeMatrix", "coop matrix"), ("timelineSemaphore", "timeline sem"),
                 ("synchronization2", "sync2")]


def _labels(paths: list[Path]) -> list[str]:
    """Short names for files: their stems, made unique."""
    stems = [p.stem for p in paths]
    return [s if stems.count(s) == 1 else f"{s}#{i + 1}" for i, s in enumerate(stems)]


def measured_peaks(doc: dict[str, Any], uri: str) -> dict[str, Any]:
    """The device's ceilings from its peak/* micro-benchmarks (bytes or flops per median run)."""
    bw: dict[str, float] = {}
    compute: dict[str, float] = {}
    latency_us = None
    for b in doc["benchmarks"]:
        if b["device"] != uri or b["status"] != "ok" or not b["name"].startswith("peak/") \
                or b["runtime"] != HALBENCH:
            continue
        _, samples = timing_samples(b)
        median_ms = Stats(samples).median
        metrics = b.get("metrics") or {}
        family = b["name"].split("/")[1]
        if median_ms <= 0 and family != "latency":  # a zero time (a clock too coarse) is no rate
            continue
        if family == "bandwidth" and metrics.get("bytes"):
            bw[b["name"].split("/", 2)[2]] = metrics["bytes"] / (median_ms * 1e6)
        elif family in ("fma", "matrix", "dot") and metrics.get("flops"):
            compute[b["name"].split("/", 1)[1]] = metrics["flops"] / (median_ms * 1e6)
        elif b["name"] == "peak/latency/dispatch":
            latency_us = median_ms * 1e3
    return {"bandwidth_gb_s": bw, "compute_gflop_s": compute, "dispatch_latency_us": latency_us}


def published_peaks(info: dict[str, Any]) -> dict[str, Any]:
    """The device's published peaks: as stored with it by the runner, else from the compiler's
    target table (a lookup by the stored identity, not a live device), else none."""
    if info.get("published_peaks"):
        return info["published_peaks"]
    try:
        from halbench.compiler.targets import published_peaks as lookup
    except ImportError:
        return {}
    return lookup(info)


def _device_rows(devcols: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    # One FLOP-rate prefix for the whole table: measured and published compute side by side.
    flops = [v for c in devcols for v in c["peaks"]["compute_gflop_s"].values()]
    flops += [v * 1e3 for c in devcols
              for v in (published_peaks(c["info"]).get("compute_tflop_s") or {}).values()]
    prefix = rate_prefix(flops)

    def row(title, fn):
        return (title, [fn(c["info"], c["peaks"]) for c in devcols])

    def ident(key):
        return lambda i, _: str(i["identity"].get(key) or "–")

    def tier(info, _):
        tiers = info.get("tiers") or []
        if not tiers:
            return "–"
        return "; ".join(f"{t['name']} ✓" if t["supported"] else f"{t['name']} ✗ missing "
                         + ", ".join(t.get("missing") or []) for t in tiers)

    def features(info, _):
        flags = (info.get("features") or {}).get("flags") or {}
        return ", ".join(label for key, label in _KEY_FEATURES if flags.get(key)) or "–"

    def matrix(info, _):
        shapes = (info.get("features") or {}).get("cooperative_matrix") or []
        return ", ".join(sorted({f"{s['m']}x{s['n']}x{s['k']} {s['a_type']}" for s in shapes})) or "–"

    def memory(info, _):
        total = (info.get("memory") or {}).get("total_bytes")
        return fmt_bytes(total) if total else "–"

    def limit(key):
        return lambda i, _: str((i.get("limits") or {}).get(key) or "–")

    def limit_bytes(key):
        return lambda i, _: fmt_bytes((i.get("limits") or {}).get(key)) \
            if (i.get("limits") or {}).get(key) else "–"

    def peak_bw(_, p):
        bw = p["bandwidth_gb_s"]
        return ", ".join(f"{k} {fmt_num(v)} GB/s" for k, v in bw.items()) or "not measured"

    def peak_compute(_, p):
        c = p["compute_gflop_s"]
        return ", ".join(f"{k} {fmt_rate(v, prefix)}" for k, v in c.items()) or "not measured"

    def latency(_, p):
        return f"{p['dispatch_latency_us']:.1f} µs" if p["dispatch_latency_us"] else "not measured"

    def published(info, _):
        pp = published_peaks(info)
        if not pp:
            return "–"
        parts = [f"{fmt_num(pp['bandwidth_gb_s'])} GB/s"] if pp.get("bandwidth_gb_s") else []
        parts += [f"{k} {fmt_rate(v * 1e3, prefix)}" for k, v in (pp.get("compute_tflop_s") or {}).items()]
        return ", ".join(parts)

    return [
        row("name", ident("name")), row("URI", lambda i, _: i.get("uri") or "–"),
        row("API", lambda i, _: f"{i['identity'].get('api', '')} {i['identity'].get('api_version', '')}"),
        row("driver", lambda i, _: f"{i['identity'].get('driver_name') or i['driver']} "
                                   f"{i['identity'].get('driver_version', '')}"),
        row("vendor", ident("vendor")), row("type", ident("device_type")),
        row("arch", lambda i, _: i["identity"].get("arch") or i["identity"].get("compute_capability")
            or "–"),
        row("UUID", ident("uuid")), row("compute units", limit("compute_units")),
        row("memory", memory), row("subgroup size", limit("subgroup_size")),
        row("shared memory / workgroup", limit_bytes("max_shared_memory_bytes")),
        row("tier", tier), row("key features", features), row("matrix shapes", matrix),
        row("measured bandwidth", peak_bw), row("measured compute", peak_compute),
        row("dispatch latency", latency), row("published peaks", published),
    ]


def _cell(bench: dict[str, Any] | None) -> dict[str, Any]:
    if bench is None:
        return {"status": "absent", "median": None}
    if bench["status"] != "ok":
        return {"status": bench["status"], "median": None, "error": bench.get("error") or "",
                "why": correctness_note(bench) if bench["status"] == "wrong" else ""}
    key, samples = timing_samples(bench)
    s = Stats(samples)
    items = (bench.get("metrics") or {}).get("items_per_run") or 1
    corr = bench.get("correctness") or {}
    return {"status": "ok", "median": s.median, "p10": s.p10, "p90": s.p90, "n": s.count,
            "source": key, "throughput": items / (s.median / 1e3) if s.median > 0 else None, "noisy": s.noisy(),
            "noisy_badge": False,
            "correct": corr.get("passed") if corr.get("checked") else None, "ratio": None}


def _micro_value(bench: dict[str, Any], cell: dict[str, Any]) -> tuple[str, float] | None:
    """(unit, value) of a micro-benchmark's achieved rate: GB/s, GFLOP/s or µs."""
    if cell["median"] is None:
        return None
    m = bench.get("metrics") or {}
    # Bandwidth and transfer micros are judged by bytes even when they also do some FLOPs (triad).
    by_bytes = any(k in bench["name"] for k in ("bandwidth", "transfer"))
    if cell["median"] <= 0:  # a zero time (a clock too coarse) is no rate
        return "µs", cell["median"] * 1e3
    if m.get("bytes") and (by_bytes or not m.get("flops")):
        return "GB/s", m["bytes"] / (cell["median"] * 1e6)
    if m.get("flops"):
        return "GFLOP/s", m["flops"] / (cell["median"] * 1e6)
    return "µs", cell["median"] * 1e3


def _micro_rate(value: tuple[str, float] | None, status: str, prefix: tuple[str, float]) -> str:
    if value is None:
        return status
    unit, v = value
    if unit == "GFLOP/s":
        return fmt_rate(v, prefix)
    return f"{fmt_num(v)} {unit}"


def _env_row(col: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    clocks, temps, reasons, devs = [], [], set(), []
    uncalibrated = 0
    for b in doc["benchmarks"]:
        if b["device"] != col["uri"]:
            continue
        for phase in ((b.get("environment") or {}).get(k) or {} for k in ("before", "after")):
            if phase.get("sm_clock_mhz"):
                clocks.append(phase["sm_clock_mhz"])
            if phase.get("temperature_c") is not None:
                temps.append(phase["temperature_c"])
            reasons.update(phase.get("throttle_reasons") or [])
        timing = b.get("timing") or {}
        # Host-timed entries (transfers) have no device timestamps to calibrate.
        if b["status"] == "ok" and timing.get("calibrated") is False \
                and timing.get("total_source", "timestamps") != "host":
            uncalibrated += 1
        if timing.get("calibration_deviation_ns") is not None:
            devs.append(timing["calibration_deviation_ns"])
    return {"label": col["label"],
            "clocks": f"{min(clocks)}–{max(clocks)} MHz" if clocks else "not read",
            "temperature": f"{min(temps):g}–{max(temps):g} °C" if temps else "not read",
            "throttle": ", ".join(sorted(reasons)) or "none seen",
            "calibration": (f"max deviation {max(devs):,.0f} ns" if devs else "–")
            + (f"; {uncalibrated} uncalibrated" if uncalibrated else "")}


def _warnings(label: str, doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(warnings, noisy entries) of a file, by the runner's own rules (the list the CLI printed,
    recomputed from the stored entries so old files and new agree). Noisy entries are listed
    apart: the tables mark them where the noise changes a conclusion."""
    prefix = f"{label}: " if label else ""
    warnings, noisy = [], []
    for w in entry_warnings(doc["benchmarks"]):
        if NOISY_MARK in w:
            noisy.append(prefix + w)
        else:
            warnings.append(prefix + w)
    return warnings, noisy


def _breakdown(label: str, uri: str, doc: dict[str, Any], peaks: dict[str, Any]
               ) -> list[dict[str, Any]]:
    best_bw = max(peaks["bandwidth_gb_s"].values(), default=None)
    models = [b for b in doc["benchmarks"] if b["device"] == uri and b["kind"] == "model"
              and b["status"] == "ok" and b.get("dispatches") and b["runtime"] == HALBENCH]
    models.sort(key=lambda b: -Stats(timing_samples(b)[1]).median)
    out = []
    for b in models[:TOP_MODELS]:
        disp = sorted(b["dispatches"], key=lambda d: -d["device_ms"]["median"])
        summed = sum(d["device_ms"]["median"] for d in b["dispatches"])
        total = summed or 1.0
        source, samples = timing_samples(b)
        model_ms = Stats(samples).median
        rows = []
        for d in disp[:TOP_DISPATCHES]:
            ms = d["device_ms"]["median"]
            gb_s = d["bytes"] / (ms * 1e6) if d.get("bytes") and ms else None
            gflop_s = d["flops"] / (ms * 1e6) if d.get("flops") and ms else None
            roof = measured_roof(peaks, d["flops"] / d["bytes"]) if gflop_s and d.get("bytes") else None
            above = bool((roof and gflop_s > roof) or (best_bw and gb_s and gb_s > best_bw))
            rows.append({"name": dispatch_label(d["name"], d.get("nodes")), "kind": d["name"],
                         "nodes": list(d.get("nodes") or []), "ms": ms, "share": ms / total,
                         "gb_s": gb_s, "gflop_s": gflop_s, "above_ceiling": above})
        gap = model_ms - summed
        out.append({"benchmark": b["name"], "column": f"{label} · {uri}" if label else uri,
                    "total_ms": summed, "dispatches": len(b["dispatches"]), "rows": rows,
                    "reconcile": {"model_ms": model_ms, "dispatch_ms": summed, "gap_ms": gap,
                                  "share": summed / model_ms if model_ms else None,
                                  "source": "device time" if source == "device_ms" else "host wall time",
                                  # the model timed whole, its dispatches in runs of their own
                                  "whole": (b.get("timing") or {}).get("total_source") == "total"}})
    return out


def _roofline(title: str, uri: str, doc: dict[str, Any], peaks: dict[str, Any]) -> dict[str, Any]:
    ceilings = []
    bw = peaks["bandwidth_gb_s"]
    if bw:  # the roof slope is the best bandwidth any peak/bandwidth/* benchmark reached
        best = max(bw, key=bw.get)
        ceilings.append({"label": f"measured {best}", "gb_s": bw[best]})
    ceilings += [{"label": k, "gflop_s": v} for k, v in peaks["compute_gflop_s"].items()]
    published = published_peaks(doc["devices"][uri])
    # Published peaks are drawn dashed next to measured ones, and stand in when none were measured.
    if published.get("bandwidth_gb_s"):
        ceilings.append({"label": "published", "gb_s": published["bandwidth_gb_s"], "measured": False})
    same: dict[float, list[str]] = {}
    for dtype, tflops in (published.get("compute_tflop_s") or {}).items():
        if dtype not in ("f32", "f16", "bf16"):
            continue  # the dtypes peak/* measure; f64, tf32 and f8 roofs would only clutter
        same.setdefault(tflops, []).append(dtype)
    for tflops, dtypes in same.items():  # f16 and bf16 share one roof on most devices
        ceilings.append({"label": f"published {'/'.join(dtypes)}", "gflop_s": tflops * 1e3,
                         "measured": False})
    points: dict[str, list[tuple[float, float]]] = {}
    above: list[dict[str, Any]] = []
    skipped = 0
    for b in doc["benchmarks"]:
        if b["device"] != uri or b["kind"] != "model" or b["status"] != "ok" or b["runtime"] != HALBENCH:
            continue
        for d in b.get("dispatches") or []:
            ms = d["device_ms"]["median"]
            if d.get("flops") and d.get("bytes") and ms > 0:
                x, y = d["flops"] / d["bytes"], d["flops"] / (ms * 1e6)
                points.setdefault(b["name"], []).append((x, y))
                roof = measured_roof(peaks, x)
                if roof is not None and y > roof:
                    above.append({"benchmark": b["name"], "dispatch": dispatch_label(d["name"], d.get("nodes")),
                                  "x": x, "y": y, "roof": roof, "gb_s": d["bytes"] / (ms * 1e6)})
            else:
                skipped += 1  # copies and fills have no FLOPs: they have no place on a log axis
    bw, comp = peaks["bandwidth_gb_s"], peaks["compute_gflop_s"]
    return {"title": title, "points": points, "ceilings": ceilings, "skipped": skipped,
            "has_measured": bool(peaks["bandwidth_gb_s"] or peaks["compute_gflop_s"]),
            "count": sum(len(p) for p in points.values()), "above": above,
            "ceiling_name": " and ".join(
                ([f"measured {max(bw, key=bw.get)} bandwidth"] if bw else [])
                + ([f"measured {max(comp, key=comp.get)} compute"] if comp else [])) or None}


def measured_roof(peaks: dict[str, Any], intensity: float) -> float | None:
    """The measured roof (GFLOP/s) at an arithmetic intensity: the best measured bandwidth's slope,
    capped by the best measured compute rate; None when nothing was measured. A dispatch above it
    ran faster than the device's own copy benchmark allows (cache-resident data, or a ceiling
    measured too low): its point is flagged, not trusted."""
    bw = max(peaks["bandwidth_gb_s"].values(), default=None)
    flops = max(peaks["compute_gflop_s"].values(), default=None)
    if bw is None and flops is None:
        return None
    slope = bw * intensity if bw is not None else float("inf")
    return min(slope, flops if flops is not None else float("inf"))


def _public(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: c[k] for k in ("label", "run", "uri", "name")} for c in columns]


def _noisy_badges(model_rows: list[dict[str, Any]], model_cols: list[dict[str, Any]],
                  comparison: dict[str, Any] | None, several_files: bool) -> None:
    """Mark a cell noisy only where its noise changes a conclusion. A pair two files share: the
    gate's decision on it is inconclusive. Otherwise, against the cell's ratio reference (the first
    column; with several files, the same device in an earlier file): either is noisy and their
    p10-p90 ranges overlap, so whether it is faster or slower is not settled."""
    verdicts = comparison["verdicts"] if comparison else {}
    for row in model_rows:
        seen: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for cell, col in zip(row["cells"], model_cols):
            if cell["median"] is None:
                continue
            key = (row["name"], col["uri"], col["run"])
            ref = next((c for c, k in seen if not several_files or k["uri"] == col["uri"]), None)
            seen.append((cell, col))
            if key in verdicts:  # a pair the files share: the decision says whether noise matters
                cell["noisy_badge"] = verdicts[key] == "inconclusive"
            elif ref is not None:
                overlap = cell["p10"] <= ref["p90"] and ref["p10"] <= cell["p90"]
                cell["noisy_badge"] = bool((cell["noisy"] or ref["noisy"]) and overlap)


def build_context(docs: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """Everything the template needs, as plain data."""
    labels = _labels([p for p, _ in docs])
    runs, columns, warnings, noisy, envs = [], [], [], [], []
    for label, (path, doc) in zip(labels, docs):
        run = doc["run"]
        runs.append({"label": label, "path": str(path), "id": run["id"],
                     "version": run["halbench_version"], "commit": run.get("git_commit") or "–",
                     "host": (run.get("host") or {}).get("hostname", "–"), "started": run["started_at"],
                     "suite": (run.get("suite") or {}).get("name", "–"),
                     "benchmarks": len(doc["benchmarks"])})
        for uri, info in doc["devices"].items():
            col = {"label": f"{label} · {uri}" if len(docs) > 1 else uri, "run": label, "uri": uri,
                   "name": info["identity"]["name"], "doc": doc, "info": info,
                   "peaks": measured_peaks(doc, uri)}
            columns.append(col)
            envs.append(_env_row(col, doc))
        w, n = _warnings(label if len(docs) > 1 else "", doc)
        warnings += w
        noisy += n

    # A device measured by several files (peaks in one run, models in another) keeps its
    # ceilings in every column: rooflines need them wherever its dispatches are.
    by_device: dict[tuple, list[dict[str, Any]]] = {}
    for col in columns:
        ident = col["info"]["identity"]
        key = (ident.get("uuid") or ident["name"], col["info"].get("driver"), ident.get("driver_version"))
        by_device.setdefault(key, []).append(col)
    for cols in by_device.values():
        for field in ("bandwidth_gb_s", "compute_gflop_s", "dispatch_latency_us"):
            found = next((c["peaks"][field] for c in cols if c["peaks"][field]), None)
            for c in cols:
                if not c["peaks"][field] and found:
                    c["peaks"][field] = found

    # Devices: one column per distinct device; the last file that has it supplies the details.
    distinct: dict[tuple, dict[str, Any]] = {}
    for col in columns:
        ident = col["info"]["identity"]
        distinct[(col["uri"], ident["name"], ident.get("driver_version"))] = col
    devcols = list(distinct.values())

    # Models and micro-benchmarks: one row per name, one cell per column.
    model_names: list[str] = []
    micro_names: list[str] = []
    index = {}
    for col in columns:
        for b in col["doc"]["benchmarks"]:
            if b["device"] != col["uri"]:
                continue
            names = model_names if b["kind"] == "model" else micro_names
            if b["name"] not in names:
                names.append(b["name"])
            if b["runtime"] == HALBENCH:  # peers' entries have their own columns
                index[(b["name"], col["label"])] = b
    # Each table shows only the columns that ran something of its kind.
    model_cols = [c for c in columns if any((n, c["label"]) in index for n in model_names)]
    micro_cols = [c for c in columns if any((n, c["label"]) in index for n in micro_names)]
    if len(docs) > 1:  # the same device's columns side by side, file after file: the pairs compared
        uri_order = list(dict.fromkeys(c["uri"] for c in columns))
        model_cols.sort(key=lambda c: uri_order.index(c["uri"]))
        micro_cols.sort(key=lambda c: uri_order.index(c["uri"]))
    peer_cols, peers = peer_columns([(label, doc) for label, (_, doc) in zip(labels, docs)],
                                    model_names)
    model_rows = []
    for name in model_names:
        cells = [_cell(index.get((name, c["label"]))) for c in model_cols]
        first = next((c["median"] for c in cells if c["median"] is not None), None)
        for cell, col in zip(cells, model_cols):
            # One file: devices against each other. Several: each device against itself in the
            # first file that has it, which is what "did this run get slower" asks.
            ref = first
            if len(docs) > 1:
                ref = next((c["median"] for c, k in zip(cells, model_cols)
                            if k["uri"] == col["uri"] and c["median"] is not None), None)
            if cell["median"] is not None and ref:
                cell["ratio"] = cell["median"] / ref
        model_rows.append({"name": name, "cells": cells, "peers": peers[name]})
    comparison = comparison_section(labels, [doc for _, doc in docs]) if len(docs) == 2 else None
    _noisy_badges(model_rows, model_cols, comparison, len(docs) > 1)

    micro_rows = []
    values: dict[tuple[str, str], tuple[str, float] | None] = {}
    for name in micro_names:
        for c in micro_cols:
            b = index.get((name, c["label"]))
            values[(name, c["label"])] = _micro_value(b, _cell(b)) if b else None
    # One FLOP-rate prefix for the whole micro-benchmark table.
    prefix = rate_prefix(v[1] for v in values.values() if v and v[0] == "GFLOP/s")
    for name in micro_names:
        cells = []
        for c in micro_cols:
            b = index.get((name, c["label"]))
            cell = _cell(b)
            cell["rate"] = _micro_rate(values[(name, c["label"])], cell["status"], prefix) if b else "–"
            cells.append(cell)
        micro_rows.append({"name": name, "cells": cells})

    breakdowns, rooflines = [], []
    for col in devcols:
        if not any(b["device"] == col["uri"] and b["runtime"] == HALBENCH for b in col["doc"]["benchmarks"]):
            continue  # a device only peers ran on (a host CPU): no dispatches, no roofline
        breakdowns += _breakdown(col["run"] if len(docs) > 1 else "", col["uri"], col["doc"], col["peaks"])
        title = f"{col['uri']} · {col['name']}" + (f" ({col['run']})" if len(docs) > 1 else "")
        rooflines.append(_roofline(title, col["uri"], col["doc"], col["peaks"]))

    return {
        "title": "halbench report: " + ", ".join(labels),
        "runs": runs,
        "columns": _public(columns),
        "devices": {"columns": [{"uri": c["uri"], "name": c["name"]} for c in devcols],
                    "rows": _device_rows(devcols)},
        "models": {"rows": model_rows, "columns": _public(model_cols), "peer_columns": peer_cols},
        "runtimes": runtimes_section([(label, doc) for label, (_, doc) in zip(labels, docs)]),
        "fleet": fleet_section([(label, doc) for label, (_, doc) in zip(labels, docs)]),
        "ratio_reference": "the same device's median in the first file" if len(docs) > 1
        else "the first column's median",
        "micros": {"rows": micro_rows, "columns": _public(micro_cols)},
        "breakdowns": breakdowns,
        "rooflines": rooflines,
        "environment": envs,
        "warnings": warnings,
        "noisy": noisy,
        "noise_threshold": NOISE_THRESHOLD,
        "comparison": comparison,
    }
