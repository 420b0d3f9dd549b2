"""The results schema as types: what the runner builds and the writer stores.

Frozen dataclasses, one :data:`SCHEMA_VERSION`; ``to_dict()`` gives the JSON document that
docs/results-format.md describes and ``halbench.bench.results`` validates and migrates on read.
The runner never writes a results dict by hand: it builds these and replaces fields
(``dataclasses.replace``) as a benchmark goes through its repetitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "HALBENCH",
    "KIND",
    "SCHEMA_VERSION",
    "STATUSES",
    "BenchmarkResult",
    "Correctness",
    "DispatchStat",
    "Metrics",
    "ResultsDoc",
    "RunInfo",
    "Samples",
    "Timing",
]

#: The version this halbench writes. Bump it together with a migration in results.MIGRATIONS.
SCHEMA_VERSION = 3
KIND = "halbench-results"
#: The ``runtime`` of halbench's own entries; a peer's is its name and mode (``torch-cudagraph``).
HALBENCH = "halbench"
STATUSES = ("ok", "wrong", "error", "skipped")


def _plain(v: Any) -> Any:
    """JSON-ready values: tuples as lists, NumPy scalars as Python numbers, mappings copied."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item) and not isinstance(v, (str, bytes)):
        return v.item()
    return v


@dataclass(frozen=True)
class Samples:
    """Raw samples in ms; ``blocks``: how many samples each repetition took, in order."""

    device_ms: tuple[float, ...] = ()
    host_ms: tuple[float, ...] = ()
    blocks: tuple[int, ...] | None = None

    def appended(self, more: Samples) -> Samples:
        return Samples(self.device_ms + more.device_ms, self.host_ms + more.host_ms,
                       (self.blocks or (len(self.device_ms),)) + (len(more.device_ms),))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"device_ms": [float(x) for x in self.device_ms],
                             "host_ms": [float(x) for x in self.host_ms]}
        if self.blocks is not None:
            d["blocks"] = list(self.blocks)
        return d


@dataclass(frozen=True)
class Correctness:
    """Whether the output was checked and passed; ``details``: errors, tolerance, reference."""

    checked: bool = False
    passed: bool | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_check(cls, d: Mapping[str, Any]) -> Correctness:
        rest = {k: v for k, v in d.items() if k not in ("checked", "passed")}
        return cls(bool(d.get("checked", False)), d.get("passed"), rest)

    def to_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "passed": self.passed, **_plain(self.details)}


@dataclass(frozen=True)
class Timing:
    warmup: int
    min_time_s: float
    min_samples: int
    calibrated: bool
    calibration_deviation_ns: float | None
    total_source: str
    warmup_s: float = 0.0  # absent in files written before it existed

    def to_dict(self) -> dict[str, Any]:
        return _plain(self.__dict__)


@dataclass(frozen=True)
class Metrics:
    """What one run does (flops, bytes, dispatches) and how much it is (items per run)."""

    flops: float | None = None
    bytes: float | None = None
    dispatches: float | None = None
    items_per_run: int = 1
    unit: str = "ms"

    def to_dict(self) -> dict[str, Any]:
        return {k: _plain(v) for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class DispatchStat:
    index: int
    name: str
    flops: float | None
    bytes: float | None
    device_ms: Mapping[str, float]  # median, p10, p90, mean, count
    trace: Mapping[str, int]  # start_ns, end_ns of the last sample
    nodes: tuple[str, ...] = ()  # the ONNX nodes the dispatch computes (bundle manifest)

    def to_dict(self) -> dict[str, Any]:
        d = _plain(self.__dict__)
        if not self.nodes:
            d.pop("nodes")
        return d


@dataclass(frozen=True)
class BenchmarkResult:
    """One benchmark on one device, all its repetitions."""

    name: str
    kind: str  # model | micro
    device: str  # the URI
    driver: str
    status: str = "ok"  # one of STATUSES
    error: str | None = None
    format: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    compile: Mapping[str, Any] = field(default_factory=dict)
    correctness: Correctness = field(default_factory=Correctness)
    timing: Timing | None = None
    samples: Samples = field(default_factory=Samples)
    metrics: Metrics | None = None
    dispatches: tuple[DispatchStat, ...] = ()
    environment: Mapping[str, Any] = field(default_factory=dict)
    #: Who ran it: ``halbench``, or a peer (``torch-cudagraph``, ``onnxruntime-cpu``, ``iree-cuda``).
    runtime: str = HALBENCH
    #: A peer's version, settings and notes (``{"version": "2.11.0", "settings": {...}}``).
    runtime_info: Mapping[str, Any] = field(default_factory=dict)
    #: Wall-clock spans (Unix seconds) of each repetition: ``((start, end), ...)``.
    spans: tuple[tuple[float, float], ...] = ()
    #: Other devices (keys of ``devices``) of the same node that were running a benchmark
    #: while this one ran (a ``--parallel`` or ``--cluster`` run); None: not recorded.
    busy: tuple[str, ...] | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies an entry within a results file: (name, device, runtime)."""
        return (self.name, self.device, self.runtime)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")

    def failed(self, status: str, error: str, **changes: Any) -> BenchmarkResult:
        """This result marked wrong / error / skipped: a failed benchmark keeps no samples."""
        return replace(self, status=status, error=error, samples=Samples(), **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "device": self.device, "driver": self.driver,
                "runtime": self.runtime, "runtime_info": _plain(self.runtime_info),
                "format": self.format, "status": self.status, "error": self.error,
                "params": _plain(self.params), "compile": _plain(self.compile),
                "correctness": self.correctness.to_dict(),
                "timing": self.timing.to_dict() if self.timing else {},
                "samples": self.samples.to_dict(),
                "metrics": self.metrics.to_dict() if self.metrics else {},
                "dispatches": [d.to_dict() for d in self.dispatches],
                "environment": _plain(self.environment), "spans": [list(x) for x in self.spans],
                **({"busy": list(self.busy)} if self.busy is not None else {})}


@dataclass(frozen=True)
class RunInfo:
    id: str
    halbench_version: str
    git_commit: str | None
    host: Mapping[str, str]
    started_at: str
    command_line: tuple[str, ...]
    suite: Mapping[str, Any]
    finished_at: str | None = None
    #: node name -> {"host": {...}, "environment": {...}}: where the devices are (schema 3).
    nodes: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self.__dict__)


@dataclass(frozen=True)
class ResultsDoc:
    run: RunInfo
    devices: Mapping[str, Mapping[str, Any]]  # URI -> DeviceInfo.to_dict() (+ published_peaks)
    benchmarks: tuple[BenchmarkResult, ...]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "kind": KIND, "run": self.run.to_dict(),
                "devices": _plain(self.devices), "benchmarks": [b.to_dict() for b in self.benchmarks],
                "warnings": list(self.warnings)}


def result_from_dict(d: Mapping[str, Any]) -> BenchmarkResult:
    """A BenchmarkResult from its ``to_dict()`` (the run journal's lines; a file already validated)."""
    s = d.get("samples") or {}
    c = dict(d.get("correctness") or {})
    t = d.get("timing") or None
    m = d.get("metrics") or None
    return BenchmarkResult(
        d["name"], d["kind"], d["device"], d["driver"], d["status"], d.get("error"), d.get("format"),
        dict(d.get("params") or {}), dict(d.get("compile") or {}),
        Correctness(bool(c.pop("checked", False)), c.pop("passed", None), c),
        Timing(**t) if t else None,
        Samples(tuple(s.get("device_ms") or ()), tuple(s.get("host_ms") or ()),
                tuple(s["blocks"]) if s.get("blocks") is not None else None),
        Metrics(**m) if m else None,
        tuple(DispatchStat(**{**x, "nodes": tuple(x.get("nodes") or ())}) for x in d.get("dispatches") or ()),
        dict(d.get("environment") or {}), d.get("runtime") or HALBENCH, dict(d.get("runtime_info") or {}),
        tuple((float(a), float(b)) for a, b in d.get("spans") or ()),
        tuple(d["busy"]) if d.get("busy") is not None else None)
