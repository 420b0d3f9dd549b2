"""``halbench compare``: the table of changes in text, Markdown and strict JSON, with the gate's
own verdict on every row."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from halbench.bench.results import read_results
from halbench.cli import main
from halbench.reports.compare import compare_results
from halbench.reports.gate import run_gate
from halbench.reports.thresholds import resolve_settings
from tests.reports.make_results import make_results, set_repetitions


def _strict(text: str) -> dict:
    def refuse(name: str):
        raise AssertionError(f"JSON has {name}")

    return json.loads(text, parse_constant=refuse)


def test_compare_formats(results_file) -> None:
    base = str(results_file("base", seed=1))
    new = str(results_file("new", seed=2, slowdown={"resnet50/b1": 1.5}))
    text = CliRunner().invoke(main, ["compare", base, new])
    assert text.exit_code == 0, text.output
    line = next(x for x in text.output.splitlines() if x.startswith("resnet50/b1") and "cuda://0" in x)
    assert line.split()[-1] == "slower" and "+5" in line  # +50.x%
    same = next(x for x in text.output.splitlines() if x.startswith("mobilenetv2/b1") and "cuda://0" in x)
    assert same.split()[-1] == "same"

    md = CliRunner().invoke(main, ["compare", base, new, "--format", "markdown"]).output
    assert "| benchmark | device | base ms | new ms | change | bounds | test | verdict |" in md
    assert "| peak/matrix/f16 | vulkan://1 | - | - | - | - | - | skipped->skipped |" in md

    data = _strict(CliRunner().invoke(main, ["compare", base, new, "--format", "json"]).output)
    row = next(r for r in data["rows"] if r["name"] == "resnet50/b1" and r["device"] == "cuda://0")
    assert row["verdict"] == "slower" and row["decision"]["p_value"] < 1e-6
    assert row["samples"] == "device_ms"
    assert data["settings"]["threshold"] == 0.05 and data["warnings"] == []


def test_compare_lists_one_sided_benchmarks(results_file) -> None:
    base = str(results_file("base", seed=1))
    new = str(results_file("new", seed=2, models=("mobilenetv2/b1",)))
    out = CliRunner().invoke(main, ["compare", base, new]).output
    assert "removed" in out


def test_compare_unreadable_file_is_one_line(results_file, tmp_path) -> None:
    r = CliRunner().invoke(main, ["compare", str(results_file("a", seed=1)), str(tmp_path / "x.json")])
    assert r.exit_code == 1
    assert r.output.strip().count("\n") == 0 and "results file not found" in r.output


def test_compare_json_is_strict_with_zero_medians(results_file) -> None:
    """A 0 ms median has no ratio: null in JSON, never Infinity or NaN."""
    name, dev = "peak/latency/dispatch", "cuda://0"
    base, new = make_results(seed=1), make_results(seed=2)
    for doc, value in ((base, 0.0), (new, 0.004)):
        b = next(x for x in doc["benchmarks"] if (x["name"], x["device"]) == (name, dev))
        b["samples"] = {"device_ms": [value] * 20, "host_ms": [value + 0.03] * 20}
    out = CliRunner().invoke(main, ["compare", str(results_file("a", base)), str(results_file("b", new)),
                                    "--format", "json"]).output
    row = next(r for r in _strict(out)["rows"] if (r["name"], r["device"]) == (name, dev))
    assert row["decision"]["change"] is None and row["decision"]["allowance"] is None
    assert row["verdict"] in ("slower", "inconclusive", "same")


def test_compare_warns_across_devices(results_file) -> None:
    base = str(results_file("a", seed=1))
    other = str(results_file("b", seed=2, driver_version="590.10.01"))
    r = CliRunner().invoke(main, ["compare", base, other])
    assert r.exit_code == 0
    assert ("warning: vulkan://0: device driver_version differs: baseline '580.95.05', candidate "
            "'590.10.01': the comparison may mean little") in r.output
    r = CliRunner().invoke(main, ["compare", base, other, "--format", "json"])
    assert any("driver_version differs" in w for w in _strict(r.stdout)["warnings"])


def _pairs():
    """Baseline/candidate pairs of every kind: A/A, slowdowns, outliers, noise, zero medians."""
    name, dev = "resnet50/b1", "vulkan://0"
    yield make_results(seed=1), make_results(seed=2)
    yield make_results(seed=1), make_results(seed=2, slowdown=1.5)
    yield make_results(seed=1), make_results(seed=2, slowdown={"mobilenetv2/b1": 1.06, "resnet50/b1": 0.8})
    yield make_results(seed=1, repetitions=3), make_results(seed=2, repetitions=3, slowdown=1.1)
    yield (set_repetitions(make_results(seed=1), name, dev, [1.0, 1.02, 0.99]),
           set_repetitions(make_results(seed=2), name, dev, [3.0, 3.1, 40.0]))
    yield (set_repetitions(make_results(seed=1), name, dev, [1.0, 1.3, 0.9]),
           set_repetitions(make_results(seed=2), name, dev, [1.1, 0.8, 1.4]))
    yield make_results(seed=3, repetitions=3, repetition_noise=0.2), \
        make_results(seed=4, repetitions=3, repetition_noise=0.2, slowdown=1.3)


@pytest.mark.parametrize("pair", range(7))
def test_compare_and_gate_agree(results_file, pair: int) -> None:
    base, cand = list(_pairs())[pair]
    b, c = results_file("b", base), results_file("c", cand)
    report = run_gate(read_results(b), read_results(c))
    settings, _ = resolve_settings(read_results(b), read_results(c))
    rows = {(r.name, r.device): r for r in compare_results(read_results(b), read_results(c), settings)}
    to_gate = {"faster": "pass", "same": "pass", "slower": "regression", "inconclusive": "inconclusive"}
    seen = set()
    for o in report.outcomes:
        row = rows[(o.name, o.device)]
        if o.decision is None:
            continue
        assert to_gate[row.verdict] == o.result, (o.name, o.device, row.verdict, o.reason)
        assert row.decision == o.decision
        seen.add(o.result)
    # And on the command line: compare's verdict column says what the gate says.
    lines = CliRunner().invoke(main, ["compare", str(b), str(c)]).output.splitlines()
    for o in report.outcomes:
        if o.decision is not None:
            line = next(x for x in lines if x.split()[:2] == [o.name, o.device])
            assert to_gate[line.split()[-1]] == o.result
    assert seen
