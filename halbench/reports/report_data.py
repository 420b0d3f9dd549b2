"""Turn results dicts into the plain data the HTML report shows (no HTML, no charts here).

A *column* is one device in one results file: several files side by side give several columns,
and ratios are taken against the first column that has the benchmark. Columns hold halbench's own
entries; peers' (``runtime`` other than halbench) go to :mod:`halbench.reports.report_runtimes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from halbench.bench.schema import HALBENCH
from halbench.bench.stats import Stats, noisy_warning
from halbench.reports.compare import timing_samples
from halbench.reports.fleet import fleet_section
from halbench.reports.report_runtimes import correctness_note, peer_columns, runtimes_section
from halbench.reports.runtimes import where

__all__ = ["TOP_DISPATCHES", "TOP_MODELS", "build_context", "measured_peaks", "published_peaks"]

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
        return f"{total / 2**30:.0f} GiB" if total else "–"

    def limit(key):
        return lambda i, _: str((i.get("limits") or {}).get(key) or "–")

    def peak_bw(_, p):
        bw = p["bandwidth_gb_s"]
        return ", ".join(f"{k} {v:,.0f} GB/s" for k, v in bw.items()) or "not measured"

    def peak_compute(_, p):
        c = p["compute_gflop_s"]
        return ", ".join(f"{k} {v / 1e3:,.3g} TFLOP/s" for k, v in c.items()) or "not measured"

    def latency(_, p):
        return f"{p['dispatch_latency_us']:.1f} µs" if p["dispatch_latency_us"] else "not measured"

    def published(info, _):
        pp = published_peaks(info)
        if not pp:
            return "–"
        parts = [f"{pp['bandwidth_gb_s']:,.0f} GB/s"] if pp.get("bandwidth_gb_s") else []
        parts += [f"{k} {v:g} TFLOP/s" for k, v in (pp.get("compute_tflop_s") or {}).items()]
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
        row("shared memory / workgroup", limit("max_shared_memory_bytes")),
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
            "source": key, "throughput": items / (s.median / 1e3), "noisy": s.noisy(),
            "correct": corr.get("passed") if corr.get("checked") else None, "ratio": None}


def _rate(value: float, unit: str) -> str:
    """A rate with an SI prefix so it never needs an exponent: 49.2 TFLOP/s, 2,529 GB/s."""
    for prefix, scale in (("P", 1e6), ("T", 1e3)):
        if value >= scale * 10 and unit == "GFLOP/s":
            return f"{value / scale:,.3g} {prefix}FLOP/s"
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"


def _micro_rate(bench: dict[str, Any], cell: dict[str, Any]) -> str:
    if cell["median"] is None:
        return cell["status"]
    m = bench.get("metrics") or {}
    # Bandwidth and transfer micros are judged by bytes even when they also do some FLOPs (triad).
    by_bytes = any(k in bench["name"] for k in ("bandwidth", "transfer"))
    if m.get("bytes") and (by_bytes or not m.get("flops")):
        return _rate(m["bytes"] / (cell["median"] * 1e6), "GB/s")
    if m.get("flops"):
        return _rate(m["flops"] / (cell["median"] * 1e6), "GFLOP/s")
    return f"{cell['median'] * 1e3:.2f} µs"


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
        if b["status"] == "ok" and timing.get("calibrated") is False:
            uncalibrated += 1
        if timing.get("calibration_deviation_ns") is not None:
            devs.append(timing["calibration_deviation_ns"])
    return {"label": col["label"],
            "clocks": f"{min(clocks)}–{max(clocks)} MHz" if clocks else "not read",
            "temperature": f"{min(temps):g}–{max(temps):g} °C" if temps else "not read",
            "throttle": ", ".join(sorted(reasons)) or "none seen",
            "calibration": (f"max deviation {max(devs):,.0f} ns" if devs else "–")
            + (f"; {uncalibrated} uncalibrated" if uncalibrated else "")}


def _warnings(label: str, doc: dict[str, Any]) -> list[str]:
    """The run's own warning list (the runner writes it, with the same rules); files written
    without one get it derived here."""
    if doc.get("warnings") is not None and doc.get("run", {}).get("finished_at"):
        return list(dict.fromkeys(f"{label}: {w}" for w in doc["warnings"]))
    out = []
    for b in doc["benchmarks"]:
        at = f"{label}: {where(b['name'], b['device'], b['runtime'])}"
        if b["status"] in ("wrong", "error"):
            out.append(f"{at}: {b['status']}: {b.get('error') or ''}")
        if b["status"] == "ok":
            s = Stats(timing_samples(b)[1])
            if noisy_warning(s):
                out.append(f"{at}: {noisy_warning(s)}")
            if (b.get("timing") or {}).get("calibrated") is False:
                out.append(f"{at}: timestamps uncalibrated")
        after = (b.get("environment") or {}).get("after") or {}
        if after.get("throttle_reasons"):
            out.append(f"{at}: throttling seen ({', '.join(after['throttle_reasons'])})")
    return list(dict.fromkeys(out))


def _breakdown(label: str, uri: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    models = [b for b in doc["benchmarks"] if b["device"] == uri and b["kind"] == "model"
              and b["status"] == "ok" and b.get("dispatches") and b["runtime"] == HALBENCH]
    models.sort(key=lambda b: -Stats(timing_samples(b)[1]).median)
    out = []
    for b in models[:TOP_MODELS]:
        disp = sorted(b["dispatches"], key=lambda d: -d["device_ms"]["median"])
        total = sum(d["device_ms"]["median"] for d in b["dispatches"]) or 1.0
        rows = []
        for d in disp[:TOP_DISPATCHES]:
            ms = d["device_ms"]["median"]
            rows.append({"name": d["name"], "ms": ms, "share": ms / total,
                         "gb_s": d["bytes"] / (ms * 1e6) if d.get("bytes") and ms else None,
                         "gflop_s": d["flops"] / (ms * 1e6) if d.get("flops") and ms else None})
        out.append({"benchmark": b["name"], "column": f"{label} · {uri}", "total_ms": total,
                    "dispatches": len(b["dispatches"]), "rows": rows})
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
    skipped = 0
    for b in doc["benchmarks"]:
        if b["device"] != uri or b["kind"] != "model" or b["status"] != "ok" or b["runtime"] != HALBENCH:
            continue
        for d in b.get("dispatches") or []:
            ms = d["device_ms"]["median"]
            if d.get("flops") and d.get("bytes") and ms > 0:
                points.setdefault(b["name"], []).append((d["flops"] / d["bytes"], d["flops"] / (ms * 1e6)))
            else:
                skipped += 1  # copies and fills have no FLOPs: they have no place on a log axis
    return {"title": title, "points": points, "ceilings": ceilings, "skipped": skipped,
            "has_measured": bool(peaks["bandwidth_gb_s"] or peaks["compute_gflop_s"]),
            "count": sum(len(p) for p in points.values())}


def _public(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: c[k] for k in ("label", "run", "uri", "name")} for c in columns]


def build_context(docs: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """Everything the template needs, as plain data."""
    labels = _labels([p for p, _ in docs])
    runs, columns, warnings, envs = [], [], [], []
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
        warnings += _warnings(label, doc)

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
    micro_rows = []
    for name in micro_names:
        cells = []
        for c in micro_cols:
            b = index.get((name, c["label"]))
            cell = _cell(b)
            cell["rate"] = _micro_rate(b, cell) if b else "–"
            cells.append(cell)
        micro_rows.append({"name": name, "cells": cells})

    breakdowns, rooflines = [], []
    for col in devcols:
        if not any(b["device"] == col["uri"] and b["runtime"] == HALBENCH for b in col["doc"]["benchmarks"]):
            continue  # a device only peers ran on (a host CPU): no dispatches, no roofline
        breakdowns += _breakdown(col["run"], col["uri"], col["doc"])
        title = f"{col['name']} · {col['uri']}" + (f" ({col['run']})" if len(docs) > 1 else "")
        rooflines.append(_roofline(title, col["uri"], col["doc"], col["peaks"]))

    return {
        "title": "halbench report: " + ", ".join(labels),
        "runs": runs,
        "columns": _public(columns),
        "devices": {"columns": [f"{c['name']}" for c in devcols],
                    "uris": [c["uri"] for c in devcols], "rows": _device_rows(devcols)},
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
    }
