"""Where the gate's limits come from: the baseline, a gate file, the command line; never the
candidate alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from halbench.cli import main
from halbench.errors import UserError
from halbench.reports.gate import run_gate
from halbench.reports.thresholds import GateSettings, load_gate_file, resolve_settings
from tests.reports.make_results import make_results

WAIVER = {"threshold": 10.0, "noise_floor_ms": 1000.0, "overrides": {"resnet50/b1": {"threshold": 10.0}}}


def gate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["gate", *args])
    return result.exit_code, result.output


def test_an_edited_candidate_cannot_waive_its_own_slowdown(results_file) -> None:
    base = make_results(seed=1, devices=("h100-cuda",))
    cand = make_results(seed=2, devices=("h100-cuda",), slowdown={"resnet50/b1": 3.0}, gate=WAIVER)
    report = run_gate(base, cand)
    assert [o.name for o in report.regressions] == ["resnet50/b1"]
    assert report.settings.threshold == 0.05
    assert any("candidate's suite gate settings differ" in w for w in report.warnings)
    code, out = gate("--baseline", str(results_file("a", base)), "--candidate", str(results_file("b", cand)))
    assert code == 1
    assert "warning: the candidate's suite gate settings differ from the baseline's and are ignored" in out


def test_baseline_then_gate_file_then_command_line(results_file, tmp_path: Path) -> None:
    base = results_file("a", seed=1, devices=("h100-cuda",),
                        gate={"threshold": 0.6, "overrides": {"mobilenetv2/b8": {"threshold": 0.7}}})
    cand = results_file("b", seed=2, devices=("h100-cuda",), slowdown=1.5,
                        gate={"threshold": 0.6, "overrides": {"mobilenetv2/b8": {"threshold": 0.7}}})
    assert gate("--baseline", str(base), "--candidate", str(cand))[0] == 0  # 50% < the baseline's 60%
    gate_file = tmp_path / "halbench-gate.yaml"
    gate_file.write_text("threshold: 0.05\noverrides:\n  'mobilenet*': {threshold: 0.9}\n")
    code, out = gate("--baseline", str(base), "--candidate", str(cand), "--gate-file", str(gate_file))
    assert code == 1, out  # the gate file's 5% beats the baseline's 60%
    assert f"limits from defaults, baseline suite, gate file {gate_file}" in out
    lines = [x for x in out.splitlines() if x.startswith("mobilenetv2/b")]
    assert lines and all("PASS" in x for x in lines)  # exact b8 override of the baseline: 70%; b1: glob 90%
    code, out = gate("--baseline", str(base), "--candidate", str(cand), "--gate-file", str(gate_file),
                     "--threshold", "0.55")
    assert code == 0, out  # the command line beats the gate file
    assert "threshold +55%" in out


def test_override_precedence() -> None:
    s = GateSettings(overrides={"peak/latency/*": {"threshold": 0.25}, "peak/*": {"threshold": 0.5},
                                "peak/latency/dispatch": {"threshold": 0.3},
                                "peak/latency/dispatch@cuda://0": {"noise_floor_ms": 0.01},
                                "*@vulkan://1": {"threshold": 0.9}})
    assert s.limits_for("peak/latency/dispatch", "cuda://0").noise_floor_ms == 0.01
    assert s.limits_for("peak/latency/dispatch", "cuda://0").threshold == 0.05  # exact name@device wins
    assert s.limits_for("peak/latency/dispatch", "vulkan://0").threshold == 0.3  # exact name
    assert s.limits_for("peak/latency/replay", "vulkan://0").threshold == 0.25  # first glob listed
    assert s.limits_for("peak/fma/f32", "vulkan://0").threshold == 0.5
    assert s.limits_for("resnet50/b1", "vulkan://1").threshold == 0.9
    assert s.limits_for("resnet50/b1", "vulkan://0").threshold == 0.05


def test_the_suites_glob_overrides_apply() -> None:
    base = make_results(seed=1, gate={"threshold": 0.05, "overrides": {"peak/latency/*": {"threshold": 0.25}}})
    o = next(o for o in run_gate(base, make_results(seed=2)).outcomes if o.name == "peak/latency/dispatch")
    assert o.limits.threshold == 0.25


@pytest.mark.parametrize("text, error", [
    ("threshold: -1\n", "threshold: Input should be greater than or equal to 0"),
    ("treshold: 0.1\n", "unknown key 'treshold'"),
    ("overrides: {resnet50/b1: {threshhold: 2}}\n", "unknown key 'threshhold'"),
    ("overrides: [1, 2]\n", "overrides: Input should be a valid dictionary"),
    ("alpha: 0.9\n", "alpha: Input should be less than or equal to 0.5"),
    ("threshold: .nan\n", "threshold: must be a finite number"),
    ("- 1\n", "Input should be a valid dictionary"),
    ("threshold: [\n", "not valid YAML"),
])
def test_invalid_gate_file_is_unusable_input(results_file, tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "halbench-gate.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=error.replace("[", r"\[")):
        load_gate_file(path)
    code, out = gate("--baseline", str(results_file("a", seed=1)), "--candidate",
                     str(results_file("b", seed=2)), "--gate-file", str(path))
    assert code == 2 and error in out and "UNUSABLE INPUT" in out


def test_a_suite_style_gate_file_works(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("gate:\n  threshold: 0.1\n  noise_floor_ms: 0.5\n")
    assert load_gate_file(path) == {"threshold": 0.1, "noise_floor_ms": 0.5, "overrides": {}}
    settings, warnings = resolve_settings(make_results(seed=1), make_results(seed=2), gate_file=path)
    assert (settings.threshold, settings.noise_floor_ms) == (0.1, 0.5) and warnings == []
