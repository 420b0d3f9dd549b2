"""The CI gate on realistic synthetic results.

What "correct" means here: the default threshold is 5%, so a 5% slowdown sits exactly on the
line and either verdict is defensible; the tests judge clear cases instead: 1.5x and 1.10x fail,
1.02x passes (below the threshold even though, with 40 samples, it is statistically visible).
"""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from halbench.cli import main
from halbench.reports.gate import run_gate
from tests.reports.make_results import MODELS, make_results

GPU = ("vulkan://0", "cuda://0")  # 40 samples each; lavapipe takes 10


def gate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["gate", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_aa_passes(results_file) -> None:
    code, out = gate("--baseline", str(results_file("a", seed=1)), "--candidate", str(results_file("b", seed=2)))
    assert code == 0, out
    assert "gate: PASSED" in out


@pytest.mark.parametrize("factor", [1.5, 1.10])
def test_clear_slowdowns_fail(results_file, factor: float) -> None:
    base = make_results(seed=1)
    cand = make_results(seed=2, slowdown=factor)
    report = run_gate(base, cand)
    assert report.exit_code == 1
    failed = {(o.name, o.device) for o in report.failures}
    for name in MODELS:
        for dev in GPU:
            assert (name, dev) in failed, next(o.reason for o in report.outcomes
                                               if (o.name, o.device) == (name, dev))
    assert not any(o.name.startswith("peak/") for o in report.failures)  # micros did not change
    if factor == 1.5:  # 10 noisy lavapipe samples still show a 50% slowdown
        assert all((name, "vulkan://1") in failed for name in MODELS)
    code, out = gate("--baseline", str(results_file("a", base)), "--candidate", str(results_file("b", cand)))
    assert code == 1 and "gate: FAILED" in out


def test_small_slowdown_passes() -> None:
    report = run_gate(make_results(seed=1), make_results(seed=2, slowdown=1.02))
    assert report.exit_code == 0, [o.reason for o in report.failures]
    assert any("within the threshold" in o.reason for o in report.outcomes)


def test_aa_false_positives_over_20_pairs() -> None:
    failures = []
    for pair in range(20):
        report = run_gate(make_results(seed=100 + 2 * pair), make_results(seed=101 + 2 * pair))
        failures += [f"pair {pair}: {o.name} {o.device}: {o.reason}" for o in report.failures]
        assert not report.problems
    assert failures == []


def test_per_benchmark_override_and_noise_floor() -> None:
    base = make_results(seed=1)
    cand = make_results(seed=2, slowdown={"mobilenetv2/b1": 1.065, "mobilenetv2/b8": 1.065})
    report = run_gate(base, cand)  # the suite gives mobilenetv2/b8 a threshold of 8%
    failed = {(o.name, o.device) for o in report.failures}
    assert ("mobilenetv2/b1", "cuda://0") in failed
    assert not any(name == "mobilenetv2/b8" for name, _ in failed)
    b8 = next(o for o in report.outcomes if o.name == "mobilenetv2/b8")
    assert b8.threshold == 0.08
    # A 1 ms noise floor forgives the H100's +0.02 ms but not lavapipe's +9 ms.
    slow = run_gate(base, make_results(seed=2, slowdown=1.5), noise_floor_ms=1.0)
    devices = {o.device for o in slow.failures}
    assert devices == {"vulkan://1"}
    assert any("below the noise floor" in o.reason for o in slow.outcomes)


def test_few_samples_judged_by_confidence_intervals() -> None:
    def trim(doc):
        for b in doc["benchmarks"]:
            if b["status"] == "ok":
                b["samples"] = {k: v[:3] for k, v in b["samples"].items()}
        return doc

    base = trim(make_results(seed=1))
    slow = run_gate(base, trim(make_results(seed=2, slowdown=1.5)))
    assert slow.exit_code == 1
    assert all("CI overlap" in o.statistic for o in slow.failures)
    assert run_gate(base, trim(make_results(seed=2))).exit_code == 0


def test_missing_benchmark_exits_2(results_file) -> None:
    full = results_file("full", seed=1)
    part = results_file("part", seed=2, models=("mobilenetv2/b1", "resnet50/b1"))
    code, out = gate("--baseline", str(full), "--candidate", str(part))
    assert code == 2, out
    assert "mobilenetv2/b8 on vulkan://0: in the baseline but missing from the candidate" in out
    code, out = gate("--baseline", str(part), "--candidate", str(full))
    assert code == 2 and "missing from the baseline" in out


def test_device_mismatch_exits_2_unless_allowed(results_file) -> None:
    base = results_file("a", seed=1)
    other = results_file("b", seed=2, driver_version="590.10.01")
    code, out = gate("--baseline", str(base), "--candidate", str(other))
    assert code == 2
    assert "vulkan://0: device driver_version differs: baseline '580.95.05', candidate '590.10.01'" in out
    code, out = gate("--baseline", str(base), "--candidate", str(other), "--allow-device-mismatch")
    assert code == 0, out
    assert "allowed by --allow-device-mismatch" in out


def test_malformed_file_exits_2(results_file, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "kind": "halbench-results", "run": {}}')
    summary = tmp_path / "summary.md"
    code, out = gate("--baseline", str(results_file("a", seed=1)), "--candidate", str(bad),
                     "--summary", str(summary))
    assert code == 2 and "run.id: missing" in out
    assert "UNUSABLE INPUT" in summary.read_text()
    code, _ = gate("--baseline", str(tmp_path / "nope.json"), "--candidate", str(bad))
    assert code == 2


def test_wrong_candidate_fails_and_errored_candidate_is_unusable() -> None:
    base = make_results(seed=1)
    wrong = make_results(seed=2, wrong="resnet50/b1")
    report = run_gate(base, wrong)
    assert report.exit_code == 1
    assert [(o.name, o.statistic) for o in report.failures] == [("resnet50/b1", "correctness")]
    errored = copy.deepcopy(base)
    b = errored["benchmarks"][0]
    b.update(status="error", error="VK_ERROR_DEVICE_LOST: device lost", samples={}, dispatches=[])
    report = run_gate(base, errored)
    assert report.exit_code == 2
    assert "cannot judge" in report.problems[0] and "VK_ERROR_DEVICE_LOST" in report.problems[0]
    # A baseline that was wrong has nothing to regress from: said so, not failed.
    assert run_gate(wrong, base).exit_code == 0


def test_summary_and_junit(results_file, tmp_path: Path) -> None:
    summary, junit = tmp_path / "summary.md", tmp_path / "gate.xml"
    code, _ = gate("--baseline", str(results_file("a", seed=1)),
                   "--candidate", str(results_file("b", seed=2, slowdown={"resnet50/b1": 1.5})),
                   "--summary", str(summary), "--junit", str(junit), "--threshold", "0.05")
    assert code == 1
    md = summary.read_text()
    assert md.startswith("## ❌ halbench gate: FAILED")
    assert "| ❌ | resnet50/b1 | cuda://0 |" in md
    assert "| ✅ | mobilenetv2/b1 |" in md and "Mann-Whitney U one-sided" in md
    assert md.index("❌ | resnet50") < md.index("✅ | mobilenetv2")  # failures first
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "3" and suite.get("errors") == "0"
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) == 27
    failed = [c for c in cases if c.find("failure") is not None]
    assert {c.get("name") for c in failed} == {"resnet50/b1"}
    assert "slower" in failed[0].find("failure").get("message")


def _with_blocks(doc: dict, name: str, device: str, medians: list[float], n: int = 20, jitter: float = 0.01):
    """Give one benchmark `len(medians)` repetitions of n tight samples around each median."""
    import numpy as np

    rng = np.random.default_rng(int(sum(medians) * 1000))
    b = next(x for x in doc["benchmarks"] if x["name"] == name and x["device"] == device)
    samples = [float(m * (1 + jitter * rng.standard_normal())) for m in medians for _ in range(n)]
    b["samples"] = {"device_ms": samples, "host_ms": [v * 1.1 for v in samples], "blocks": [n] * len(medians)}
    return doc


def test_overlapping_repetitions_are_run_to_run_noise_not_a_regression() -> None:
    """Each run's samples are tight, but the machine's state differs between repetitions: the
    candidate's pooled median is 10% slower, yet its repetitions overlap the baseline's."""
    name, dev = next(iter(MODELS)), "vulkan://0"
    base = _with_blocks(make_results(seed=1), name, dev, [1.00, 1.20, 1.05])
    cand = _with_blocks(make_results(seed=2), name, dev, [1.15, 1.22, 1.10])
    o = next(o for o in run_gate(base, cand).outcomes if (o.name, o.device) == (name, dev))
    assert o.result == "pass", o.reason
    assert "run-to-run noise" in o.reason and "repetition medians" in o.statistic


def test_a_gap_within_the_run_to_run_spread_is_not_a_regression() -> None:
    """Every candidate repetition is slower, but the candidate's own repetitions differ by more
    than the gap: the machine was unsteady during that run (seen in A/A runs on lavapipe)."""
    name, dev = next(iter(MODELS)), "vulkan://0"
    base = _with_blocks(make_results(seed=1), name, dev, [1.00, 1.01, 1.03])
    cand = _with_blocks(make_results(seed=2), name, dev, [1.10, 1.80, 1.60])
    o = next(o for o in run_gate(base, cand).outcomes if (o.name, o.device) == (name, dev))
    assert o.result == "pass", o.reason


def test_separated_repetitions_fail() -> None:
    name, dev = next(iter(MODELS)), "vulkan://0"
    base = _with_blocks(make_results(seed=1), name, dev, [1.00, 1.04, 1.02])
    cand = _with_blocks(make_results(seed=2), name, dev, [1.30, 1.35, 1.28])
    o = next(o for o in run_gate(base, cand).outcomes if (o.name, o.device) == (name, dev))
    assert o.result == "fail", o.reason
