"""The schema of a results file (docs/results-format.md) as pydantic models: types, ranges,
finite numbers and sizes of the untrusted JSON, one line naming the key path of the first
problem (``benchmarks[3](resnet50/b1).samples.device_ms[2]: expected a finite number``).

``results.validate`` runs it on every read and write; ``bench/schema.py`` holds the frozen
dataclasses the runner builds. Unknown keys are allowed here (and only here among the formats):
readers use the keys below and nothing else, so an added key cannot change what a report or
gate says, and the runner may add information without a schema bump.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from halbench.bench.schema import KIND, SCHEMA_VERSION, STATUSES
from halbench.bench.suite_schema import GateSection

__all__ = ["ResultsModel"]

#: Caps on sizes: far beyond a real run, small enough that a hostile file cannot make a report
#: build millions of rows from one entry.
_MAX_SAMPLES = 10_000_000
_MAX_ITEMS = 1_000_000

Number = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Text = Annotated[str, Field(max_length=1_000_000)]
Name = Annotated[str, Field(max_length=1000)]
Samples = Annotated[list[Number], Field(max_length=_MAX_SAMPLES)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)


class SuiteInRun(_Open):
    """The suite as the run saw it; its gate settings are validated as the gate reads them."""

    gate: GateSection | None = None


class NodeModel(_Open):
    host: dict[str, Any] = {}


class RunModel(_Open):
    id: Name
    halbench_version: Name
    started_at: Name
    git_commit: Name | None = None
    finished_at: Name | None = None
    host: dict[str, Any] = {}
    command_line: Annotated[list[Text], Field(max_length=10_000)] = []
    suite: SuiteInRun | None = None
    #: schema 3: the machines of the run (one for a single-host run), each with its own host
    nodes: Annotated[dict[Annotated[str, Field(min_length=1, max_length=1000)], NodeModel],
                     Field(min_length=1, max_length=10_000)]


class Identity(_Open):
    name: Name


class Peaks(_Open):
    bandwidth_gb_s: Number | None = None
    compute_tflop_s: dict[Name, Number] = {}


class DeviceModel(_Open):
    driver: Name
    identity: Identity
    node: Annotated[str, Field(min_length=1, max_length=1000)]  # schema 3: a key of run.nodes
    published_peaks: Peaks | None = None


class SamplesModel(_Open):
    device_ms: Samples = []
    host_ms: Samples = []
    blocks: Annotated[list[Annotated[int, Field(gt=0)]], Field(max_length=_MAX_SAMPLES)] | None = None

    @model_validator(mode="after")
    def _blocks_add_up(self) -> SamplesModel:
        n = len(self.device_ms or self.host_ms)
        if self.blocks is not None and sum(self.blocks) != n:
            raise ValueError(f".blocks: expected positive sample counts per repetition adding up to the {n} "
                             f"samples, got {self.blocks!r:.60}")
        return self


class Metrics(_Open):
    flops: Number | None = None
    bytes: Number | None = None
    items_per_run: Number | None = None


class DispatchTimes(_Open):
    median: Number
    p10: Number | None = None
    p90: Number | None = None
    mean: Number | None = None
    count: Number | None = None


class Trace(_Open):
    start_ns: Number
    end_ns: Number
    queue: int | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Trace:
        if self.end_ns < self.start_ns:
            raise ValueError(f".end_ns: ends ({self.end_ns:g}) before it starts ({self.start_ns:g})")
        return self


class DispatchModel(_Open):
    index: Annotated[int, Field(ge=0)]
    name: Name
    flops: Number | None = None
    bytes: Number | None = None
    device_ms: DispatchTimes
    #: the ONNX nodes the dispatch computes, when the bundle names them
    nodes: Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=4096)] | None = None
    trace: Trace | None = None


class BenchmarkModel(_Open):
    name: Annotated[str, Field(min_length=1, max_length=1000)]
    kind: Literal["model", "micro"]
    device: Name
    driver: Name
    runtime: Annotated[str, Field(min_length=1, max_length=100)]
    runtime_info: dict[str, Any] | None = None
    format: Name | None = None
    status: Literal[STATUSES]  # type: ignore[valid-type]
    error: Text | None = None
    params: dict[str, Any] | None = None
    compile: dict[str, Any] | None = None
    correctness: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    samples: SamplesModel | None = None
    metrics: Metrics | None = None
    dispatches: Annotated[list[DispatchModel], Field(max_length=100_000)] = []
    #: schema 3: wall-clock [start, end] per repetition, and the other devices of its node busy then
    spans: Annotated[list[Annotated[list[Number], Field(min_length=2, max_length=2)]], Field(max_length=100_000)] = []
    busy: Annotated[list[Name], Field(max_length=10_000)] | None = None

    @model_validator(mode="after")
    def _spans_in_order(self) -> BenchmarkModel:
        for i, (a, b) in enumerate(self.spans):
            if b < a:
                raise ValueError(f".spans[{i}]: ends before it starts")
        return self

    @model_validator(mode="after")
    def _samples_match_status(self) -> BenchmarkModel:
        s = self.samples
        total = len(s.device_ms) + len(s.host_ms) if s else 0
        if self.status == "ok" and s is None:
            raise ValueError(".samples: missing (status is 'ok')")
        if self.status == "ok" and total == 0:
            raise ValueError(".samples: status is 'ok' but no device_ms or host_ms samples are stored")
        if self.status != "ok" and total:
            # A wrong or failed benchmark is never timed as if fine (docs/results-format.md).
            raise ValueError(f".samples: status is {self.status!r} but samples are stored")
        return self


class ResultsModel(_Open):
    schema_version: int
    kind: Literal[KIND]  # type: ignore[valid-type]
    run: RunModel
    devices: Annotated[dict[Name, DeviceModel], Field(max_length=10_000)]
    benchmarks: Annotated[list[BenchmarkModel], Field(max_length=_MAX_ITEMS)]
    warnings: Annotated[list[Text], Field(max_length=_MAX_ITEMS)] = []

    @model_validator(mode="before")
    @classmethod
    def _current_version(cls, d: Any) -> Any:
        v = d.get("schema_version") if isinstance(d, dict) else None
        if isinstance(v, int) and not isinstance(v, bool) and v != SCHEMA_VERSION:
            raise ValueError(f".schema_version: expected {SCHEMA_VERSION}, got {v} (migrate it first)")
        return d

