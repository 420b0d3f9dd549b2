"""``halbench compare``: the table of changes in text, Markdown and JSON."""

from __future__ import annotations

import json

from click.testing import CliRunner

from halbench.cli import main


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
    assert "| benchmark | device | base ms | new ms | change | significance | verdict |" in md
    assert "| peak/matrix/f16 | vulkan://1 | - | - | - | - | skipped->skipped |" in md

    data = json.loads(CliRunner().invoke(main, ["compare", base, new, "--format", "json"]).output)
    row = next(r for r in data["rows"] if r["name"] == "resnet50/b1" and r["device"] == "cuda://0")
    assert row["verdict"] == "slower" and row["comparison"]["p_value"] < 1e-6
    assert row["samples"] == "device_ms"


def test_compare_lists_one_sided_benchmarks(results_file) -> None:
    base = str(results_file("base", seed=1))
    new = str(results_file("new", seed=2, models=("mobilenetv2/b1",)))
    out = CliRunner().invoke(main, ["compare", base, new]).output
    assert "removed" in out


def test_compare_unreadable_file_is_one_line(results_file, tmp_path) -> None:
    r = CliRunner().invoke(main, ["compare", str(results_file("a", seed=1)), str(tmp_path / "x.json")])
    assert r.exit_code == 1
    assert r.output.strip().count("\n") == 0 and "results file not found" in r.output
