"""The CI gate on realistic synthetic results, written by the project's own results writer.

What "correct" means here: the default threshold is 5%, so a 5% slowdown sits exactly on the
line; the tests judge clear cases. A real slowdown (1.10x, 1.5x, 3x) must never PASS, and on a
quiet device it is a REGRESSION; an A/A pair (same code twice) must never be a REGRESSION, and
on a quiet device it PASSes. Noise too large to tell is INCONCLUSIVE, exit 3.
"""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from halbench.cli import main
from halbench.reports.gate import run_gate
from tests.reports.make_results import MODELS, make_results, set_repetitions

GPU = ("vulkan://0", "cuda://0")  # 40 samples each; lavapipe takes 10


def gate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["gate", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def outcome(report, name: str, device: str):
    return next(o for o in report.outcomes if (o.name, o.device) == (name, device))


def test_aa_passes_on_quiet_devices(results_file) -> None:
    code, out = gate("--baseline", str(results_file("a", seed=1)), "--candidate", str(results_file("b", seed=2)))
    assert code in (0, 3), out  # lavapipe's 10 noisy samples may be too few to vouch for 5%
    report = run_gate(make_results(seed=1), make_results(seed=2))
    assert all(o.result == "pass" for o in report.outcomes if o.device in GPU), \
        [o.reason for o in report.outcomes if o.device in GPU and o.result != "pass"]


@pytest.mark.parametrize("factor", [1.5, 1.10])
def test_clear_slowdowns_are_regressions(results_file, factor: float) -> None:
    base = make_results(seed=1)
    cand = make_results(seed=2, slowdown=factor)
    report = run_gate(base, cand)
    assert report.exit_code == 1 and report.answer == "REGRESSION"
    failed = {(o.name, o.device) for o in report.regressions}
    for name in MODELS:
        for dev in GPU:
            assert (name, dev) in failed, outcome(report, name, dev).reason
        assert outcome(report, name, "vulkan://1").result != "pass"  # never PASS a slowdown
    assert not any(o.name.startswith("peak/") for o in report.regressions)  # micros did not change
    if factor == 1.5:  # 10 noisy lavapipe samples still show a 50% slowdown
        assert all((name, "vulkan://1") in failed for name in MODELS)
    code, out = gate("--baseline", str(results_file("a", base)), "--candidate", str(results_file("b", cand)))
    assert code == 1 and "gate: REGRESSION" in out


def test_small_slowdown_passes() -> None:
    report = run_gate(make_results(seed=1), make_results(seed=2, slowdown=1.02))
    assert not report.regressions
    assert all(o.result == "pass" for o in report.outcomes if o.device in GPU)
    assert any("no slowdown beyond +5.0%" in o.reason for o in report.outcomes)


@pytest.mark.parametrize("repetitions", [1, 3])
def test_aa_never_a_regression_over_20_pairs(repetitions: int) -> None:
    regressions, gpu = [], []
    for pair in range(20):
        report = run_gate(make_results(seed=100 + 2 * pair, repetitions=repetitions),
                          make_results(seed=101 + 2 * pair, repetitions=repetitions))
        regressions += [f"pair {pair}: {o.name} {o.device}: {o.reason}" for o in report.regressions]
        gpu += [o for o in report.outcomes if o.device in GPU]
        assert not report.problems
    assert regressions == []
    not_passed = [o.reason for o in gpu if o.result != "pass"]
    assert len(not_passed) <= len(gpu) // 10, not_passed  # quiet H100s: mostly a plain pass


@pytest.mark.parametrize("factor", [1.5, 3.0])
@pytest.mark.parametrize("outlier", ["slow candidate", "fast candidate", "slow baseline"])
def test_slowdown_with_an_outlier_repetition_never_passes(factor: float, outlier: str) -> None:
    name, dev = "resnet50/b1", "vulkan://0"
    base_reps, cand_reps = [1.00, 1.02, 0.99], [factor, factor * 1.01, factor * 0.99]
    if outlier == "slow candidate":
        cand_reps[2] = factor * 12
    elif outlier == "fast candidate":
        cand_reps[2] = 1.0
    else:
        base_reps[1] = factor * 1.2
    base = set_repetitions(make_results(seed=1), name, dev, base_reps, seed=1)
    cand = set_repetitions(make_results(seed=2, slowdown={name: factor}), name, dev, cand_reps, seed=2)
    o = outcome(run_gate(base, cand), name, dev)
    assert o.result != "pass", o.reason
    if outlier == "slow candidate":  # a slow outlier of a slow candidate only confirms it
        assert o.result == "regression", o.reason


def test_squeezenet_like_3x_with_one_outlier_repetition_is_a_regression(results_file) -> None:
    """The issue's case: +212% on local-sync; every candidate repetition slower than every
    baseline one, but one outlier repetition spread the candidate's repetitions by 1224%."""
    name, dev = "mobilenetv2/b1", "vulkan://1"
    base = set_repetitions(make_results(seed=1), name, dev, [10.0, 10.3, 10.1], n=12, jitter=0.03)
    cand = set_repetitions(make_results(seed=2), name, dev, [30.5, 31.2, 410.0], n=12, jitter=0.03,
                           seed=5)
    o = outcome(run_gate(base, cand), name, dev)
    assert o.result == "regression", o.reason
    assert o.decision.change == pytest.approx(2.1, abs=0.15)
    b, c = results_file("base", base), results_file("cand", cand)
    code, out = gate("--baseline", str(b), "--candidate", str(c))
    assert code == 1 and f"slower {o.decision.change:+.1%}" in out
    line = next(x for x in CliRunner().invoke(main, ["compare", str(b), str(c)]).output.splitlines()
                if x.startswith(name) and dev in x)
    assert line.split()[-1] == "slower"


def test_overlapping_repetitions_are_not_a_regression() -> None:
    """The machine, not the code: a candidate repetition as fast as the baseline's."""
    name, dev = "resnet50/b1", "vulkan://0"
    base = set_repetitions(make_results(seed=1), name, dev, [1.00, 1.20, 1.05])
    cand = set_repetitions(make_results(seed=2), name, dev, [1.15, 1.22, 1.10])
    o = outcome(run_gate(base, cand), name, dev)
    assert o.result == "inconclusive", o.reason


def test_a_bimodal_machine_is_inconclusive_not_a_regression() -> None:
    """Seen in A/A runs on lavapipe: dispatch latency switches between machine states; the
    candidate's repetitions stray back towards the baseline by as much as they differ from it."""
    name, dev = "resnet50/b1", "vulkan://0"
    base = set_repetitions(make_results(seed=1), name, dev, [3.79, 3.30, 3.30])
    cand = set_repetitions(make_results(seed=2), name, dev, [7.49, 14.97, 15.53])
    o = outcome(run_gate(base, cand), name, dev)
    assert o.result == "inconclusive", o.reason
    assert "machine may have changed" in o.reason


def test_a_quiet_benchmark_on_a_noisy_device_takes_the_device_noise() -> None:
    """Seen in A/A runs: a benchmark's three repetitions agree within 1% by luck while the device's
    other benchmarks differ by 30% between repetitions; the next run is 90% slower."""
    base, cand = make_results(seed=1), make_results(seed=2)
    dev = "vulkan://1"
    for i, name in enumerate(["mobilenetv2/b8", "resnet50/b1", "minilm-l6/s128"]):
        set_repetitions(base, name, dev, [10.0, 14.0, 7.0], seed=10 + i)
        set_repetitions(cand, name, dev, [9.0, 13.0, 7.5], seed=20 + i)
    set_repetitions(base, "mobilenetv2/b1", dev, [23.7, 23.4, 23.3], seed=3)
    set_repetitions(cand, "mobilenetv2/b1", dev, [44.9, 46.0, 41.9], seed=4)
    o = outcome(run_gate(base, cand), "mobilenetv2/b1", dev)
    assert o.result == "inconclusive", o.reason
    assert o.decision.device_repetition_sd > 5 * o.decision.repetition_sd
    alone = run_gate(set_repetitions(make_results(seed=1), "mobilenetv2/b1", dev, [23.7, 23.4, 23.3]),
                     set_repetitions(make_results(seed=2), "mobilenetv2/b1", dev, [44.9, 46.0, 41.9]))
    assert outcome(alone, "mobilenetv2/b1", dev).result == "regression"  # a quiet device: it is real


def _scale_device(doc: dict, device: str, factor: float) -> dict:
    """Every benchmark of one device ``factor`` times slower: a machine that changed, or a change
    of the code that slows everything alike."""
    for b in doc["benchmarks"]:
        if b["device"] == device and b["status"] == "ok":
            b["samples"] = {k: [round(v * factor, 6) for v in vs] if k != "blocks" else vs
                            for k, vs in b["samples"].items()}
    return doc


def test_a_whole_device_moving_together_is_inconclusive_never_pass() -> None:
    """Seen in A/A runs minutes apart: every benchmark of local-sync 50-115% slower at once."""
    base = make_results(seed=1)
    report = run_gate(base, _scale_device(make_results(seed=2), "cuda://0", 1.6))
    on_cuda = [o for o in report.outcomes if o.device == "cuda://0" and o.decision
               and o.decision.allowance < 0.6]  # not the 3 us dispatch under its noise floor
    assert on_cuda and all(o.result == "inconclusive" for o in on_cuda), [o.reason for o in on_cuda]
    assert "the device's benchmarks moved +60" in on_cuda[0].reason
    assert all(o.result == "pass" for o in report.outcomes if o.device == "vulkan://0")
    # A faster machine must not hide a slowdown: resnet50/b1 unchanged while its device got 40%
    # faster is 1/0.6 slower than the rest.
    faster = run_gate(base, _scale_device(make_results(seed=2, slowdown={"resnet50/b1": 1 / 0.6}),
                                          "cuda://0", 0.6))
    o = outcome(faster, "resnet50/b1", "cuda://0")
    assert o.result == "inconclusive" and "could hide under a faster machine" in o.reason, o.reason


def test_inconclusive_says_what_could_hide_and_what_would_detect_it() -> None:
    name, dev = "resnet50/b1", "vulkan://0"
    base = set_repetitions(make_results(seed=1), name, dev, [1.00, 1.10, 0.92])
    cand = set_repetitions(make_results(seed=2), name, dev, [1.02, 0.95, 1.08])
    o = outcome(run_gate(base, cand), name, dev)
    assert o.result == "inconclusive", o.reason
    assert "the noise could hide a slowdown up to +" in o.reason
    assert "repetitions per side would detect a slowdown of the allowance's size" in o.reason
    assert o.decision.needed > 3 and o.decision.high > 0.05


def test_exit_codes_and_inconclusive_mapping(results_file) -> None:
    name, dev = "resnet50/b1", "vulkan://0"
    quiet = results_file("a", seed=1, devices=("h100-vulkan",))
    same = results_file("b", seed=2, devices=("h100-vulkan",))
    slow = results_file("c", seed=2, devices=("h100-vulkan",), slowdown=1.5)
    noisy = results_file("d", set_repetitions(make_results(seed=2, devices=("h100-vulkan",)), name,
                                              dev, [1.3, 0.7, 1.1]))
    quiet_reps = results_file("e", set_repetitions(make_results(seed=1, devices=("h100-vulkan",)),
                                                   name, dev, [1.0, 1.01, 0.99]))
    assert gate("--baseline", str(quiet), "--candidate", str(same))[0] == 0
    assert gate("--baseline", str(quiet), "--candidate", str(slow))[0] == 1
    assert gate("--baseline", str(quiet), "--candidate", str(quiet_reps.parent / "nope.json"))[0] == 2
    code, out = gate("--baseline", str(quiet_reps), "--candidate", str(noisy))
    assert code == 3 and "gate: INCONCLUSIVE: 1 benchmark could hide a slowdown" in out, out
    code, out = gate("--baseline", str(quiet_reps), "--candidate", str(noisy), "--inconclusive", "pass")
    assert code == 0 and "counted as a pass by --inconclusive=pass" in out
    junit = quiet.parent / "gate.xml"
    code, out = gate("--baseline", str(quiet_reps), "--candidate", str(noisy), "--inconclusive", "fail",
                     "--junit", str(junit))
    assert code == 1 and "counted as a failure" in out
    failures = [f for f in ET.parse(junit).getroot().iter("failure")]
    assert [f.get("type") for f in failures] == ["inconclusive"]
    # A regression outranks inconclusive; --inconclusive=pass does not hide it.
    code, _ = gate("--baseline", str(quiet), "--candidate", str(slow), "--inconclusive", "pass")
    assert code == 1


def test_help_documents_exit_codes_and_answers() -> None:
    out = CliRunner().invoke(main, ["gate", "--help"]).output
    for text in ("PASS", "REGRESSION", "INCONCLUSIVE", "0  PASS", "1  REGRESSION", "2  unusable",
                 "3  INCONCLUSIVE", "--inconclusive", "--gate-file", "--debug"):
        assert text in out, text


def test_internal_error_exits_2_with_one_line(results_file, monkeypatch, tmp_path: Path) -> None:
    from halbench.reports import gate as gate_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(gate_module, "run_gate", broken)
    a, b = str(results_file("a", seed=1)), str(results_file("b", seed=2))
    summary = tmp_path / "summary.md"
    result = CliRunner().invoke(main, ["gate", "--baseline", a, "--candidate", b, "--summary", str(summary)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().count("\n") == 0
    assert "internal error: ZeroDivisionError: float division by zero" in result.output
    assert "Traceback" not in result.output
    assert "UNUSABLE INPUT" in summary.read_text()
    debug = CliRunner().invoke(main, ["gate", "--baseline", a, "--candidate", b, "--debug"])
    assert isinstance(debug.exception, ZeroDivisionError)


def test_zero_medians(results_file) -> None:
    """A timer too coarse for a dispatch reads 0 ms: no ratio, no division by zero."""
    name, dev = "peak/latency/dispatch", "cuda://0"
    base, zero, slow = (make_results(seed=s, devices=("h100-cuda",)) for s in (1, 2, 3))
    for doc, value in ((base, 0.0), (zero, 0.0), (slow, 0.5)):
        b = next(x for x in doc["benchmarks"] if (x["name"], x["device"]) == (name, dev))
        b["samples"] = {"device_ms": [value] * 20, "host_ms": [value + 0.03] * 20}
    o = outcome(run_gate(base, zero), name, dev)
    assert o.result == "pass" and o.decision.change is None
    o = outcome(run_gate(base, slow), name, dev)  # 0 -> 0.5 ms, beyond the 0.002 ms noise floor
    assert o.result == "regression" and o.decision.change is None, o.reason
    code, out = gate("--baseline", str(results_file("a", base)), "--candidate", str(results_file("b", zero)))
    assert code == 0, out


def test_per_benchmark_override_and_noise_floor() -> None:
    base = make_results(seed=1)
    cand = make_results(seed=2, slowdown={"mobilenetv2/b1": 1.12, "mobilenetv2/b8": 1.065})
    report = run_gate(base, cand)  # the suite gives mobilenetv2/b8 a threshold of 8%
    failed = {(o.name, o.device) for o in report.regressions}
    assert ("mobilenetv2/b1", "cuda://0") in failed
    assert not any(name == "mobilenetv2/b8" for name, _ in failed)
    b8 = outcome(report, "mobilenetv2/b8", "cuda://0")
    assert b8.limits.threshold == 0.08 and b8.result == "pass", b8.reason
    # A 1 ms noise floor forgives the H100's +0.1 ms but not lavapipe's +6 ms.
    slow = run_gate(base, make_results(seed=2, slowdown=1.5), noise_floor_ms=1.0)
    assert {o.device for o in slow.regressions} == {"vulkan://1"}
    assert any("(noise floor)" in o.reason and o.result == "pass" for o in slow.outcomes)


def test_few_samples_judged_by_confidence_intervals() -> None:
    def trim(doc):
        for b in doc["benchmarks"]:
            if b["status"] == "ok":
                b["samples"] = {k: v[:3] for k, v in b["samples"].items()}
        return doc

    base = trim(make_results(seed=1))
    slow = run_gate(base, trim(make_results(seed=2, slowdown=1.5)))
    assert slow.exit_code == 1
    assert all("CI overlap" in o.statistic for o in slow.regressions)
    assert not run_gate(base, trim(make_results(seed=2))).regressions  # 3 samples: never a false alarm


def test_missing_benchmark_exits_2(results_file) -> None:
    full = results_file("full", seed=1)
    part = results_file("part", seed=2, models=("mobilenetv2/b1", "resnet50/b1"))
    code, out = gate("--baseline", str(full), "--candidate", str(part))
    assert code == 2, out
    assert "mobilenetv2/b8 on vulkan://0: in the baseline but missing from the candidate" in out
    code, out = gate("--baseline", str(part), "--candidate", str(full))
    assert code == 2 and "missing from the baseline" in out


def test_device_mismatch_exits_2_unless_allowed(results_file) -> None:
    base = results_file("a", seed=1, devices=("h100-vulkan", "h100-cuda"))
    other = results_file("b", seed=2, devices=("h100-vulkan", "h100-cuda"), driver_version="590.10.01")
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
    assert [(o.name, o.statistic) for o in report.regressions] == [("resnet50/b1", "correctness")]
    errored = copy.deepcopy(base)
    b = errored["benchmarks"][0]
    b.update(status="error", error="VK_ERROR_DEVICE_LOST: device lost", samples={}, dispatches=[])
    report = run_gate(base, errored)
    assert report.exit_code == 2
    assert "cannot judge" in report.problems[0] and "VK_ERROR_DEVICE_LOST" in report.problems[0]
    # A baseline that was wrong has nothing to regress from: said so, not failed.
    assert not run_gate(wrong, base).regressions


def test_summary_and_junit(results_file, tmp_path: Path) -> None:
    summary, junit = tmp_path / "summary.md", tmp_path / "gate.xml"
    code, _ = gate("--baseline", str(results_file("a", seed=1)),
                   "--candidate", str(results_file("b", seed=2, slowdown={"resnet50/b1": 1.5})),
                   "--summary", str(summary), "--junit", str(junit), "--threshold", "0.05")
    assert code == 1
    md = summary.read_text()
    assert md.startswith("## ❌ halbench gate: REGRESSION")
    assert "| ❌ | resnet50/b1 | cuda://0 |" in md
    assert "| ✅ | mobilenetv2/b1 |" in md and "Mann-Whitney U one-sided" in md
    assert md.index("❌ | resnet50") < md.index("✅ | mobilenetv2")  # regressions first
    assert "3 inconclusive" in md  # the exit codes are explained
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "3" and suite.get("errors") == "0"
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) == 27
    failed = [c for c in cases if c.find("failure") is not None]
    assert {c.get("name") for c in failed} == {"resnet50/b1"}
    assert "slower" in failed[0].find("failure").get("message")
