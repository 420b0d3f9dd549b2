"""The results schema (docs/results-format.md): validation, migrations, atomic storage, DataFrames.

Everything that reads results (reports, compare, gate, trace) goes through :func:`read_results`,
so older files are migrated in one place and a malformed file fails with one line naming the
field at fault, never with a KeyError deep inside a report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halbench.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "KIND",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STATUSES",
    "ResultsError",
    "load_results",
    "migrate",
    "read_results",
    "validate",
    "write_results",
]

from halbench.bench.schema import HALBENCH, KIND, SCHEMA_VERSION, STATUSES


class ResultsError(UserError):
    """A results file is missing, corrupt, of a newer schema, or does not match the schema."""


# ---------------------------------------------------------------------------------------------
# Migrations: MIGRATIONS[v] turns a version-v dict into a version-(v+1) dict.


def _migrate_0_to_1(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (pre-release development builds) stored samples in seconds at the top of each
    benchmark as ``device_times`` / ``host_times`` and had no ``kind`` marker."""
    doc = dict(doc)
    doc.setdefault("kind", KIND)
    doc.setdefault("warnings", [])
    benchmarks = []
    for bench in doc.get("benchmarks", []):
        bench = dict(bench)
        device_s = bench.pop("device_times", None) or []
        host_s = bench.pop("host_times", None) or []
        bench.setdefault("samples", {"device_ms": [t * 1e3 for t in device_s],
                                     "host_ms": [t * 1e3 for t in host_s]})
        bench.setdefault("kind", "micro" if bench.get("name", "").startswith("peak/") else "model")
        bench.setdefault("error", None)
        benchmarks.append(bench)
    doc["benchmarks"] = benchmarks
    doc["schema_version"] = 1
    return doc


def _migrate_1_to_2(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had halbench's own entries only: each becomes ``runtime: "halbench"``; the
    correctness reference (``correctness.reference``) was always local-sync."""
    doc = dict(doc)
    if isinstance(doc.get("benchmarks"), list):  # anything else: validation names the problem
        benchmarks = []
        for bench in doc["benchmarks"]:
            if isinstance(bench, dict):
                bench = {**bench, "runtime": bench.get("runtime", HALBENCH),
                         "runtime_info": bench.get("runtime_info", {})}
            benchmarks.append(bench)
        doc["benchmarks"] = benchmarks
    doc["schema_version"] = 2
    return doc


def _migrate_2_to_3(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 2 ran on one machine: ``run.nodes`` gets that one node (named by the host name, its
    ``run.host``) and every device its ``node``. Spans and busy devices were not recorded."""
    doc = dict(doc)
    run = doc.get("run")
    if isinstance(run, dict) and isinstance(doc.get("devices"), dict):
        host = run.get("host") if isinstance(run.get("host"), dict) else {}
        node = str(host.get("hostname") or "local")
        run = {**run, "nodes": run.get("nodes", {node: {"host": host, "halbench_version":
                                                         run.get("halbench_version"),
                                                         "git_commit": run.get("git_commit")}})}
        doc["run"] = run
        doc["devices"] = {k: ({**v, "node": v.get("node", node)} if isinstance(v, dict) else v)
                          for k, v in doc["devices"].items()}
    doc["schema_version"] = 3
    return doc


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    0: _migrate_0_to_1, 1: _migrate_1_to_2, 2: _migrate_2_to_3}


def migrate(doc: dict[str, Any], *, source: str = "results") -> dict[str, Any]:
    """Bring a results dict of any supported older version up to SCHEMA_VERSION."""
    version = doc.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ResultsError(f"{source}: schema_version: missing or not an integer "
                           f"(is this a halbench results file?)")
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{source}: schema_version {version} is newer than this halbench reads "
                           f"({SCHEMA_VERSION}); upgrade halbench to read it")
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise ResultsError(f"{source}: schema_version {version} is too old; no migration to "
                               f"{version + 1}")
        doc = step(doc)
        version = doc["schema_version"]
    return doc


# ---------------------------------------------------------------------------------------------
# Validation: the pydantic schema in results_schema.py, then what refers to what.


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def validate(doc: Any) -> None:
    """Check a results dict of the current SCHEMA_VERSION; raise ResultsError naming the bad field
    (``benchmarks[3](resnet50/b1).samples.device_ms[2]: expected a finite number, got str``)."""
    from pydantic import ValidationError

    from halbench.bench.results_schema import ResultsModel
    from halbench.validation import one_line

    if not isinstance(doc, dict):
        raise ResultsError(f"results: expected a JSON object, got {_type_name(doc)}")

    def label(prefix: tuple[Any, ...]) -> str:  # benchmarks[3] -> benchmarks[3](resnet50/b1)
        if len(prefix) == 2 and prefix[0] == "benchmarks" and isinstance(doc.get("benchmarks"), list):
            b = doc["benchmarks"][prefix[1]] if prefix[1] < len(doc["benchmarks"]) else None
            if isinstance(b, dict) and isinstance(b.get("name"), str) and b["name"]:
                return f"({b['name']:.60})"
        return ""

    try:
        ResultsModel.model_validate(doc)
    except ValidationError as e:
        raise ResultsError(one_line(e, label=label)) from None
    devices = doc["devices"]
    for uri, dev in devices.items():
        if dev["node"] not in doc["run"]["nodes"]:
            _fail(f"devices.{uri}.node", f"{dev['node']!r} is not listed under run.nodes")
    seen: set[tuple[str, str, str]] = set()
    for i, b in enumerate(doc["benchmarks"]):
        for k, other in enumerate(b.get("busy") or ()):
            if other not in devices:
                _fail(f"benchmarks[{i}]({b['name']:.60}).busy[{k}]", f"{other!r:.60} is not listed under devices")
        # A device that could not be opened has no DeviceInfo: only its failed entries name it.
        if b["device"] not in devices and b["status"] not in ("skipped", "error"):
            _fail(f"benchmarks[{i}]({b['name']:.60}).device", f"{b['device']!r} is not listed under devices")
        key = (b["name"], b["device"], b["runtime"])
        if key in seen:
            _fail(f"benchmarks[{i}]", f"duplicate benchmark {key[0]!r} on {key[1]!r} ({key[2]})")
        seen.add(key)


def _fail(path: str, msg: str) -> None:
    # Keys and values come from the file: escape line breaks so the error stays one line.
    raise ResultsError(f"{path}: {msg}".replace("\r", "\\r").replace("\n", "\\n"))


# ---------------------------------------------------------------------------------------------
# Storage.


def write_results(path: str | os.PathLike, doc: dict[str, Any]) -> Path:
    """Validate ``doc`` and write it atomically: a reader sees the old file or the new, never half."""
    validate(doc)
    from halbench.files import atomic_write

    return atomic_write(path, json.dumps(doc, indent=1, allow_nan=False) + "\n", "results")


def read_results(path: str | os.PathLike) -> dict[str, Any]:
    """Read, migrate and validate one results file; every failure is one ResultsError line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: results file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsError(f"{path}: cannot read results file: {e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
                           f"truncated or not a results file?") from None
    except RecursionError:
        raise ResultsError(f"{path}: JSON nested too deeply to be a results file") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: expected a JSON object, got {_type_name(doc)}")
    doc = migrate(doc, source=str(path))
    try:
        validate(doc)
    except ResultsError as e:
        raise ResultsError(f"{path}: {e}") from None
    return doc


# ---------------------------------------------------------------------------------------------
# DataFrames.


def load_results(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> dict[str, pd.DataFrame]:
    """Load results files into long-form pandas DataFrames.

    Returns a dict with ``runs``, ``devices``, ``benchmarks``, ``samples`` (one row per sample)
    and ``dispatches``; every frame carries ``source`` (the file path) and ``run`` (the run id)
    so several files can be concatenated and told apart.
    """
    import pandas as pd  # pandas is slow to import; only analysis needs it

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in
                                             ("runs", "devices", "benchmarks", "samples", "dispatches")}
    for p in paths:
        doc = read_results(p)
        _rows_of(doc, str(p), rows)
    columns = {
        "runs": ["source", "run", "halbench_version", "git_commit", "hostname", "started_at",
                 "finished_at", "suite", "benchmarks", "warnings"],
        "devices": ["source", "run", "device", "driver", "name", "vendor", "device_type", "api",
                    "api_version", "driver_version", "uuid", "arch"],
        "benchmarks": ["source", "run", "name", "kind", "device", "driver", "runtime", "format", "status",
                       "error", "correct", "samples", "median_ms", "mean_ms", "p10_ms", "p90_ms",
                       "flops", "bytes", "items_per_run", "calibrated", "calibration_deviation_ns"],
        "samples": ["source", "run", "name", "device", "runtime", "index", "device_ms", "host_ms"],
        "dispatches": ["source", "run", "name", "device", "runtime", "index", "dispatch", "flops", "bytes",
                       "median_ms", "p10_ms", "p90_ms", "mean_ms", "count", "start_ns", "end_ns"],
    }
    return {k: pd.DataFrame(rows[k], columns=columns[k]) for k in columns}


def _rows_of(doc: dict[str, Any], source: str, rows: dict[str, list[dict[str, Any]]]) -> None:
    import numpy as np

    run = doc["run"]
    rid = run["id"]
    base = {"source": source, "run": rid}
    rows["runs"].append({**base, "halbench_version": run["halbench_version"],
                         "git_commit": run.get("git_commit"),
                         "hostname": (run.get("host") or {}).get("hostname"),
                         "started_at": run["started_at"], "finished_at": run.get("finished_at"),
                         "suite": (run.get("suite") or {}).get("name"),
                         "benchmarks": len(doc["benchmarks"]), "warnings": len(doc.get("warnings", []))})
    for uri, dev in doc["devices"].items():
        ident = dev["identity"]
        rows["devices"].append({**base, "device": uri, "driver": dev["driver"], "name": ident["name"],
                                "vendor": ident.get("vendor"), "device_type": ident.get("device_type"),
                                "api": ident.get("api"), "api_version": ident.get("api_version"),
                                "driver_version": ident.get("driver_version"),
                                "uuid": ident.get("uuid"), "arch": ident.get("arch")})
    for b in doc["benchmarks"]:
        key = {**base, "name": b["name"], "device": b["device"], "runtime": b["runtime"]}
        samples = b.get("samples") or {}
        dev_ms = samples.get("device_ms") or []
        host_ms = samples.get("host_ms") or []
        primary = np.asarray(dev_ms or host_ms, dtype=float)
        timing = b.get("timing") or {}
        metrics = b.get("metrics") or {}
        correctness = b.get("correctness") or {}
        have = primary.size > 0
        rows["benchmarks"].append({
            **key, "kind": b["kind"], "driver": b["driver"], "format": b.get("format"),
            "status": b["status"], "error": b.get("error"), "correct": correctness.get("passed"),
            "samples": int(primary.size),
            "median_ms": float(np.median(primary)) if have else None,
            "mean_ms": float(primary.mean()) if have else None,
            "p10_ms": float(np.percentile(primary, 10)) if have else None,
            "p90_ms": float(np.percentile(primary, 90)) if have else None,
            "flops": metrics.get("flops"), "bytes": metrics.get("bytes"),
            "items_per_run": metrics.get("items_per_run"), "calibrated": timing.get("calibrated"),
            "calibration_deviation_ns": timing.get("calibration_deviation_ns")})
        for i in range(max(len(dev_ms), len(host_ms))):
            rows["samples"].append({**key, "index": i,
                                    "device_ms": dev_ms[i] if i < len(dev_ms) else None,
                                    "host_ms": host_ms[i] if i < len(host_ms) else None})
        for d in b.get("dispatches") or []:
            stats = d["device_ms"]
            trace = d.get("trace") or {}
            rows["dispatches"].append({**key, "index": d["index"], "dispatch": d["name"],
                                       "flops": d.get("flops"), "bytes": d.get("bytes"),
                                       "median_ms": stats["median"], "p10_ms": stats.get("p10"),
                                       "p90_ms": stats.get("p90"), "mean_ms": stats.get("mean"),
                                       "count": stats.get("count"), "start_ns": trace.get("start_ns"),
                                       "end_ns": trace.get("end_ns")})
