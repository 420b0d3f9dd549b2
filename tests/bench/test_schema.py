"""The results schema as types: frozen, one version, and what the runner writes validates."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from halbench.bench.results import read_results, validate
from halbench.bench.runner import run_suite
from halbench.bench.schema import SCHEMA_VERSION, BenchmarkResult, Correctness, Samples
from halbench.bench.suite import load_suite


def test_results_types_are_frozen_and_failures_keep_no_samples() -> None:
    r = BenchmarkResult("m", "model", "local-sync://0", "local-sync",
                        samples=Samples((1.0, 2.0), (1.5, 2.5), (2,)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.status = "wrong"  # type: ignore[misc]
    bad = r.failed("wrong", "differs", correctness=Correctness(True, False, {"rel_error": 0.5}))
    assert bad.samples == Samples() and r.samples.device_ms == (1.0, 2.0)
    assert bad.to_dict()["correctness"] == {"checked": True, "passed": False, "rel_error": 0.5}
    with pytest.raises(ValueError, match="status must be one of"):
        BenchmarkResult("m", "model", "x://0", "x", status="fine")


def test_repetitions_append_in_blocks() -> None:
    a = Samples((1.0, 2.0), (1.0, 2.0), (2,))
    b = Samples((3.0,), (3.0,))
    assert a.appended(b) == Samples((1.0, 2.0, 3.0), (1.0, 2.0, 3.0), (2, 1))


def test_what_the_runner_writes_is_the_current_schema(tmp_path: Path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\ndevices: ['local-sync://']\nsettings: {warmup: 0, min_time_s: 0, min_samples: 2, "
                     "repetitions: 2}\nmicro:\n  - {name: copy, kind: bandwidth-copy, params: {bytes: 4096}}\n"
                     "  - {name: nope, kind: dot-int8}\n")
    doc = run_suite(load_suite(str(suite)), tmp_path / "r.json", progress=False)
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk == doc and doc["schema_version"] == SCHEMA_VERSION
    validate(doc)
    copy, nope = doc["benchmarks"]
    assert copy["status"] == "ok" and copy["samples"]["blocks"] == [2, 2]
    assert nope["status"] == "skipped" and nope["samples"]["device_ms"] == []
    assert read_results(tmp_path / "r.json")["run"]["finished_at"]
