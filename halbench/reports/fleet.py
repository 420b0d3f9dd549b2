"""Reports for fleets: many units of the same devices across nodes, read from stored results.

- ``fleet_section``: one column per (node, device), grouped by device model, with the devices
  that were busy beside each benchmark (``busy``, a ``--parallel`` / ``--cluster`` run); and a
  "same model, many units" view: per benchmark the spread of the medians of identical devices.
- ``by_model``: a results dict whose devices are keyed by model (``cuda://NVIDIA H100``), units
  of one model pooled, so that ``compare`` / ``gate --match-by model`` pair fleets by model.
"""

from __future__ import annotations

import copy
from typing import Any

from halbench.bench.schema import HALBENCH
from halbench.bench.stats import Stats
from halbench.reports.compare import timing_samples

__all__ = ["by_model", "fleet_section"]


def _model(info: dict[str, Any]) -> str:
    return f"{(info.get('identity') or {}).get('name', '?')} ({info.get('driver', '?')})"


def _median(b: dict[str, Any]) -> float | None:
    if b["status"] != "ok":
        return None
    _, samples = timing_samples(b)
    return Stats(samples).median if samples else None


def fleet_section(docs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """``{"shown", "groups": [{model, columns, rows}], "spread": [...]}`` for the template."""
    groups: dict[str, dict[str, Any]] = {}
    fleet_run = False
    for label, doc in docs:
        fleet_run |= len(doc["run"].get("nodes") or {}) > 1 or any(b.get("busy") for b in doc["benchmarks"])
        for key, info in doc["devices"].items():
            g = groups.setdefault(_model(info), {"model": _model(info), "columns": [], "cells": {}})
            col = f"{label} · {key}" if len(docs) > 1 else key
            g["columns"].append({"label": col, "node": info.get("node", "–"), "uuid":
                                 (info.get("identity") or {}).get("uuid")})
            for b in doc["benchmarks"]:
                if b["device"] == key and b.get("runtime", HALBENCH) == HALBENCH:
                    g["cells"][(b["name"], col)] = {"median": _median(b), "status": b["status"],
                                                    "busy": b.get("busy") or [], "error": b.get("error") or ""}
    out_groups, spread = [], []
    for g in groups.values():
        names = list(dict.fromkeys(n for n, _ in g["cells"]))
        cols = sorted(g["columns"], key=lambda c: (c["node"], c["label"]))
        rows = [{"name": n, "cells": [g["cells"].get((n, c["label"]), {"median": None, "status": "absent",
                                                                     "busy": [], "error": ""}) for c in cols]}
                for n in names]
        out_groups.append({"model": g["model"], "columns": cols, "rows": rows})
        units = {c["uuid"] or c["label"] for c in cols}
        if len(units) < 2:
            continue
        for row in rows:
            meds = [(c["median"], col["label"]) for c, col in zip(row["cells"], cols, strict=True)
                    if c["median"] is not None]
            if len(meds) < 2:
                continue
            values = sorted(m for m, _ in meds)
            mid = Stats(values).median
            spread.append({"model": g["model"], "name": row["name"], "units": len(meds), "min": values[0],
                           "median": mid, "max": values[-1],
                           "spread": (values[-1] - values[0]) / mid if mid else None,
                           "slowest": max(meds)[1], "fastest": min(meds)[1]})
    shown = fleet_run or bool(spread)
    return {"shown": shown, "groups": out_groups if shown else [], "spread": spread}


def by_model(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with devices keyed by model: ``DRIVER://MODEL``. Entries of several units of one
    model are pooled: their samples and repetitions (``blocks``) appended in device order, so the
    unit-to-unit spread counts as noise. Failed entries win over timed ones."""
    doc = copy.deepcopy(doc)
    rename = {k: f"{v.get('driver')}://{(v.get('identity') or {}).get('name', k)}" for k, v in doc["devices"].items()}
    devices: dict[str, Any] = {}
    for k, v in doc["devices"].items():
        if rename[k] not in devices:
            info = copy.deepcopy(v)
            info.setdefault("identity", {})["uuid"] = None  # units differ; the model is what is matched
            devices[rename[k]] = {**info, "units": []}
        devices[rename[k]]["units"].append(k)
    pooled: dict[tuple[str, str, str], dict[str, Any]] = {}
    for b in doc["benchmarks"]:
        key = (b["name"], rename.get(b["device"], b["device"]), b.get("runtime", HALBENCH))
        b = {**b, "device": key[1]}
        b.pop("busy", None)
        have = pooled.get(key)
        if have is None or b["status"] != "ok":
            if have is None or have["status"] == "ok":
                pooled[key] = b
            continue
        if have["status"] != "ok":
            continue
        s, t = have["samples"], b["samples"]
        have["samples"] = {"device_ms": s.get("device_ms", []) + t.get("device_ms", []),
                           "host_ms": s.get("host_ms", []) + t.get("host_ms", []),
                           "blocks": (s.get("blocks") or [len(s.get("device_ms") or s.get("host_ms") or [])])
                           + (t.get("blocks") or [len(t.get("device_ms") or t.get("host_ms") or [])])}
    doc["devices"] = devices
    doc["benchmarks"] = list(pooled.values())
    return doc
