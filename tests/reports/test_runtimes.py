"""compare and gate with peer runtimes: peer entries meet their own runtime between two files, and
``--baseline-runtime`` judges halbench against a peer within one file ("within 1.1x of PyTorch")."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from click.testing import CliRunner

from halbench.bench.results import read_results
from halbench.cli import main
from halbench.reports.compare import compare_results
from halbench.reports.gate import render_junit, render_markdown, run_gate
from tests.reports.make_results import HOST_CPU, MODELS, make_results

PEERS = {"torch-cudagraph": 0.6, "onnxruntime-cpu": 3.0}


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_compare_runtimes_within_one_file(results_file) -> None:
    path = str(results_file("r", seed=1, peers=PEERS))
    code, out = cli("compare", path, "--baseline-runtime", "torch-cudagraph", "--format", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["base"] == f"{path} [torch-cudagraph]" and data["new"] == f"{path} [halbench]"
    rows = data["rows"]
    assert {(r["name"], r["device"]) for r in rows} == {(m, "cuda://0") for m in MODELS}
    for r in rows:  # torch takes 0.6 of halbench's time: halbench is 1/0.6 = 1.67x the peer's
        d = r["decision"]
        assert abs(d["new_ms"] / d["base_ms"] - 1 / 0.6) < 0.05, r
        assert r["verdict"] == "slower" and r["runtime"] == "halbench"
    # The CPU peer runs where halbench runs nothing: every one of its entries is unmatched.
    code, out = cli("compare", path, "--baseline-runtime", "onnxruntime-cpu")
    assert code == 0, out
    lines = [x for x in out.splitlines() if x.split()[:2] and x.split()[1] == HOST_CPU]
    assert len(lines) == len(MODELS) and all(x.split()[-1] == "unmatched" for x in lines)


def test_mixed_file_compares_cleanly_with_itself_and_a_rerun(results_file) -> None:
    gpus = ("h100-vulkan", "h100-cuda")  # quiet devices: an A/A pair passes
    a = results_file("a", seed=1, peers=PEERS, devices=gpus)
    b = results_file("b", seed=2, peers=PEERS, devices=gpus)
    rows = compare_results(read_results(a), read_results(a))
    assert not [r for r in rows if r.verdict in ("added", "removed", "slower", "faster")]
    assert all(r.verdict == "same" for r in rows if r.runtime != "halbench")
    assert {r.runtime for r in rows} == {"halbench", "torch-cudagraph", "onnxruntime-cpu"}
    rows = compare_results(read_results(a), read_results(b))
    assert not [r for r in rows if r.verdict in ("added", "removed")]
    peer = {(r.name, r.device): r for r in rows if r.runtime == "torch-cudagraph"}
    mine = {(r.name, r.device): r for r in rows if r.runtime == "halbench"}
    for key, r in peer.items():  # peer entries met peer entries, not halbench's
        assert abs(r.decision.base_ms / mine[key].decision.base_ms - 0.6) < 0.05
    assert all(r.device == HOST_CPU for r in rows if r.runtime == "onnxruntime-cpu")
    code, out = cli("compare", str(a), str(b))
    assert code == 0 and "runtime" in out.splitlines()[1]  # the header gains a runtime column
    code, out = cli("gate", "--baseline", str(a), "--candidate", str(a))
    assert code == 0 and "gate: PASS" in out, out


def test_gate_passes_within_the_threshold_of_a_peer(results_file) -> None:
    path = str(results_file("r", seed=3, peers={"torch-cudagraph": 0.97}))  # halbench 1.03x torch
    code, out = cli("gate", "--candidate", path, "--baseline-runtime", "torch-cudagraph",
                    "--threshold", "0.10")
    assert code == 0 and "gate: PASS: 4 benchmarks" in out, out
    assert "(torch-cudagraph) vs candidate" in out and "not judged" in out


def test_gate_fails_when_halbench_is_far_slower_than_a_peer(results_file) -> None:
    # Three repetitions each: halbench 2x the peer's time, far beyond 10% and any noise.
    doc = make_results(seed=4, peers={"torch-cudagraph": 0.5}, repetitions=3)
    report = run_gate(doc, doc, baseline_runtime="torch-cudagraph", threshold=0.10)
    assert report.answer == "REGRESSION" and len(report.regressions) == len(MODELS)
    for o in report.regressions:
        assert 0.9 < o.decision.change < 1.1, o.reason  # +100%
        assert o.decision.device_shift is None  # the runtimes' gap is not a machine move
    code, out = cli("gate", "--candidate", str(results_file("r", doc)),
                    "--baseline-runtime", "torch-cudagraph", "--threshold", "0.10")
    assert code == 1 and "gate: REGRESSION" in out, out


def test_unmatched_peer_entries_are_listed_not_problems() -> None:
    doc = make_results(seed=5, peers={"torch-cudagraph": 0.99})
    doc["benchmarks"] = [b for b in doc["benchmarks"] if not (
        b["runtime"] == "halbench" and (b["name"], b["device"]) == ("resnet50/b1", "cuda://0"))]
    report = run_gate(doc, doc, baseline_runtime="torch-cudagraph", threshold=0.10)
    assert not report.problems and report.exit_code == 0, report.problems
    unmatched = report.of("unmatched")
    assert [(o.name, o.device) for o in unmatched] == [("resnet50/b1", "cuda://0")]
    assert "| ➖ | resnet50/b1 | cuda://0 |" in render_markdown(report)
    case = next(c for c in ET.fromstring(render_junit(report)).iter("testcase")
                if c.get("name") == "resnet50/b1")
    assert case.find("skipped") is not None


def test_unknown_runtime_exits_2_with_one_line(results_file) -> None:
    path = str(results_file("r", seed=1, peers=PEERS))
    for args in (["gate", "--candidate", path, "--baseline-runtime", "torch-eager"],
                 ["compare", path, "--baseline-runtime", "torch-eager"]):
        code, out = cli(*args)
        assert code == 2, out
        assert out.strip().count("\n") == 0, out
        assert "'torch-eager'" in out and "halbench, onnxruntime-cpu, torch-cudagraph" in out
    code, out = cli("gate", "--candidate", path)  # neither a baseline file nor a runtime
    assert code == 2 and out.strip().count("\n") == 0 and "--baseline-runtime" in out
    code, out = cli("compare", path)
    assert code == 2 and out.strip().count("\n") == 0
