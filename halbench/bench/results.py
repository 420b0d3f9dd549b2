"""The results schema (docs/results-format.md): validation, migrations, atomic storage, DataFrames.

Everything that reads results (reports, compare, gate, trace) goes through :func:`read_results`,
so older files are migrated in one place and a malformed file fails with one line naming the
field at fault, never with a KeyError deep inside a report.
"""

from __future__ import annotations

import json
import math
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

BENCHMARK_KINDS = ("model", "micro")


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
# Validation: hand-written so the error names the exact field (benchmarks[3].samples.device_ms[2]).


def _fail(path: str, msg: str) -> None:
    # Keys and values come from the file: escape line breaks so the error stays one line.
    raise ResultsError(f"{path}: {msg}".encode("unicode_escape").decode("ascii"))


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _get(d: dict, key: str, path: str, types: type | tuple, *, required: bool = True,
         nullable: bool = False) -> Any:
    where = f"{path}.{key}" if path else key
    if key not in d:
        if required:
            _fail(where, "missing")
        return None
    value = d[key]
    if value is None and nullable:
        return None
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        want = " or ".join(t.__name__ for t in _tuple(types)) + (" or null" if nullable else "")
        _fail(where, f"expected {want}, got {_type_name(value)} {value!r:.40}")
    return value


def _tuple(types: type | tuple) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _number(value: Any, where: str, *, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(where, f"expected a finite number, got {_type_name(value)} {value!r:.40}")
    if minimum is not None and value < minimum:
        _fail(where, f"expected a number >= {minimum:g}, got {value!r}")
    return float(value)


def _opt_number(d: dict, key: str, path: str) -> None:
    if d.get(key) is not None:
        _number(d[key], f"{path}.{key}")


def _validate_gate(gate: dict, path: str) -> None:
    """The suite schema's GateSection: one validation of gate settings wherever they are."""
    from pydantic import ValidationError

    from halbench.bench.suite_schema import GateSection, one_line

    try:
        GateSection.model_validate(gate)
    except ValidationError as e:
        raise ResultsError(str(one_line(e, path))) from None


def _validate_run(run: dict) -> None:
    for key in ("id", "halbench_version", "started_at"):
        _get(run, key, "run", str)
    _get(run, "git_commit", "run", str, required=False, nullable=True)
    _get(run, "finished_at", "run", str, required=False, nullable=True)
    _get(run, "host", "run", dict, required=False)
    for i, arg in enumerate(_get(run, "command_line", "run", list, required=False) or []):
        if not isinstance(arg, str):
            _fail(f"run.command_line[{i}]", f"expected str, got {_type_name(arg)}")
    for name, node in (_get(run, "nodes", "run", dict) or {}).items():
        if not name or not isinstance(node, dict):
            _fail(f"run.nodes.{name}", f"expected a node name and a dict, got {_type_name(node)}")
        _get(node, "host", f"run.nodes.{name}", dict, required=False)
    suite = _get(run, "suite", "run", dict, required=False, nullable=True)
    if suite:
        gate = _get(suite, "gate", "run.suite", dict, required=False, nullable=True)
        if gate:
            _validate_gate(gate, "run.suite.gate")


def _validate_device(uri: str, dev: Any, nodes: dict) -> None:
    path = f"devices.{uri}"
    if not isinstance(dev, dict):
        _fail(path, f"expected dict (a DeviceInfo.to_dict()), got {_type_name(dev)}")
    _get(dev, "driver", path, str)
    node = _get(dev, "node", path, str)
    if node not in nodes:
        _fail(f"{path}.node", f"{node!r} is not listed under run.nodes")
    identity = _get(dev, "identity", path, dict)
    _get(identity, "name", f"{path}.identity", str)
    peaks = _get(dev, "published_peaks", path, dict, required=False, nullable=True)
    if peaks:
        _opt_number(peaks, "bandwidth_gb_s", f"{path}.published_peaks")
        compute = _get(peaks, "compute_tflop_s", f"{path}.published_peaks", dict, required=False) or {}
        for dtype, value in compute.items():
            _number(value, f"{path}.published_peaks.compute_tflop_s.{dtype}")


def _validate_samples(bench: dict, path: str, status: str) -> None:
    samples = _get(bench, "samples", path, dict, required=status == "ok")
    total = 0
    for key in ("device_ms", "host_ms"):
        values = _get(samples or {}, key, f"{path}.samples", list, required=False) or []
        for i, v in enumerate(values):
            _number(v, f"{path}.samples.{key}[{i}]")
        total += len(values)
    if status == "ok" and total == 0:
        _fail(f"{path}.samples", "status is 'ok' but no device_ms or host_ms samples are stored")
    if status != "ok" and total:
        # A wrong or failed benchmark is never timed as if fine (docs/results-format.md).
        _fail(f"{path}.samples", f"status is {status!r} but samples are stored")
    blocks = _get(samples or {}, "blocks", f"{path}.samples", list, required=False)
    if blocks is not None:
        n = len((samples or {}).get("device_ms") or (samples or {}).get("host_ms") or [])
        if not all(isinstance(b, int) and b > 0 for b in blocks) or sum(blocks) != n:
            _fail(f"{path}.samples.blocks", f"expected positive sample counts per repetition adding up "
                                            f"to the {n} samples, got {blocks!r:.60}")


def _validate_dispatch(disp: Any, path: str) -> None:
    if not isinstance(disp, dict):
        _fail(path, f"expected dict, got {_type_name(disp)}")
    _get(disp, "index", path, int)
    _get(disp, "name", path, str)
    for key in ("flops", "bytes"):
        _opt_number(disp, key, path)
    stats = _get(disp, "device_ms", path, dict)
    _number(_get(stats, "median", f"{path}.device_ms", (int, float)), f"{path}.device_ms.median")
    for key in ("p10", "p90", "mean", "count"):
        _opt_number(stats, key, f"{path}.device_ms")
    trace = _get(disp, "trace", path, dict, required=False, nullable=True)
    if trace:
        start = _number(_get(trace, "start_ns", f"{path}.trace", (int, float)), f"{path}.trace.start_ns")
        end = _number(_get(trace, "end_ns", f"{path}.trace", (int, float)), f"{path}.trace.end_ns")
        if end < start:
            _fail(f"{path}.trace.end_ns", f"ends ({end:g}) before it starts ({start:g})")
        _get(trace, "queue", f"{path}.trace", int, required=False)


def _validate_benchmark(bench: Any, path: str, devices: dict) -> tuple[str, str, str]:
    if not isinstance(bench, dict):
        _fail(path, f"expected dict, got {_type_name(bench)}")
    name = _get(bench, "name", path, str)
    if not name:
        _fail(f"{path}.name", "empty")
    path = f"{path}({name})"
    kind = _get(bench, "kind", path, str)
    if kind not in BENCHMARK_KINDS:
        _fail(f"{path}.kind", f"expected one of {', '.join(BENCHMARK_KINDS)}, got {kind!r}")
    device = _get(bench, "device", path, str)
    _get(bench, "driver", path, str)
    runtime = _get(bench, "runtime", path, str)
    if not runtime or len(runtime) > 100:
        _fail(f"{path}.runtime", "expected a runtime name (halbench, torch-cudagraph, ...)")
    _get(bench, "runtime_info", path, dict, required=False, nullable=True)
    _get(bench, "format", path, str, required=False, nullable=True)
    status = _get(bench, "status", path, str)
    if status not in STATUSES:
        _fail(f"{path}.status", f"expected one of {', '.join(STATUSES)}, got {status!r}")
    # A device that could not be opened has no DeviceInfo: only its failed entries name it.
    if device not in devices and status not in ("skipped", "error"):
        _fail(f"{path}.device", f"{device!r} is not listed under devices")
    _get(bench, "error", path, str, required=False, nullable=True)
    for key in ("params", "compile", "correctness", "timing", "environment"):
        _get(bench, key, path, dict, required=False, nullable=True)
    _validate_samples(bench, path, status)
    metrics = _get(bench, "metrics", path, dict, required=False, nullable=True) or {}
    for key in ("flops", "bytes", "items_per_run"):
        _opt_number(metrics, key, f"{path}.metrics")
    for i, disp in enumerate(_get(bench, "dispatches", path, list, required=False) or []):
        _validate_dispatch(disp, f"{path}.dispatches[{i}]")
    for i, span in enumerate(_get(bench, "spans", path, list, required=False) or []):
        if not (isinstance(span, list) and len(span) == 2):
            _fail(f"{path}.spans[{i}]", f"expected [start, end], got {span!r:.40}")
        if _number(span[1], f"{path}.spans[{i}][1]") < _number(span[0], f"{path}.spans[{i}][0]"):
            _fail(f"{path}.spans[{i}]", "ends before it starts")
    for i, other in enumerate(_get(bench, "busy", path, list, required=False, nullable=True) or []):
        if other not in devices:
            _fail(f"{path}.busy[{i}]", f"{other!r:.60} is not listed under devices")
    return name, device, runtime


def validate(doc: Any) -> None:
    """Check a results dict of the current SCHEMA_VERSION; raise ResultsError naming the bad field.

    Only the fields readers rely on are checked strictly; extra keys are allowed so the runner can
    add information without a schema bump.
    """
    if not isinstance(doc, dict):
        _fail("results", f"expected a JSON object, got {_type_name(doc)}")
    version = _get(doc, "schema_version", "", int)
    if version != SCHEMA_VERSION:
        _fail("schema_version", f"expected {SCHEMA_VERSION}, got {version} (migrate it first)")
    if _get(doc, "kind", "", str) != KIND:
        _fail("kind", f"expected {KIND!r}, got {doc['kind']!r}")
    run = _get(doc, "run", "", dict)
    _validate_run(run)
    devices = _get(doc, "devices", "", dict)
    for uri, dev in devices.items():
        _validate_device(uri, dev, run["nodes"])
    seen: set[tuple[str, str, str]] = set()
    for i, bench in enumerate(_get(doc, "benchmarks", "", list)):
        key = _validate_benchmark(bench, f"benchmarks[{i}]", devices)
        if key in seen:
            _fail(f"benchmarks[{i}]", f"duplicate benchmark {key[0]!r} on {key[1]!r} ({key[2]})")
        seen.add(key)
    for i, warning in enumerate(_get(doc, "warnings", "", list, required=False) or []):
        if not isinstance(warning, str):
            _fail(f"warnings[{i}]", f"expected str, got {_type_name(warning)}")


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
