"""Results are never lost: the journal, --resume, the lock, checks before work, exit codes.
Real runs of the CLI on local-sync:// in subprocesses, killed for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SUITE = """name: j
devices: ['local-sync://']
settings: {warmup: 0, min_time_s: 0.6, min_samples: 2, max_samples: 100000}
micro:
"""


def _suite(tmp: Path, n: int = 4, extra: str = "") -> Path:
    p = tmp / "s.yaml"
    p.write_text(SUITE + "".join(f"  - {{name: lat{i}, kind: latency-dispatch}}\n" for i in range(n)) + extra)
    return p


def _default_sigint() -> None:
    # A shell without job control starts background jobs with SIGINT ignored, and children
    # inherit that: give the CLI the handler a terminal would.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([sys.executable, "-m", "halbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_default_sigint, **kw)


def _run(*args: str) -> subprocess.CompletedProcess:
    p = _cli(*args)
    out, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _results_in_journal(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for ln in path.read_text().splitlines() if '"type": "result"' in ln)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_run_keeps_the_old_results_and_resume_finishes_it(tmp_path: Path, sig: int) -> None:
    suite, out = _suite(tmp_path), tmp_path / "out.json"
    out.write_text('{"old": "results"}')
    p = _cli("run-suite", str(suite), "-o", str(out), "--no-progress")
    journal = Path(f"{out}.partial")
    deadline = time.monotonic() + 120
    while _results_in_journal(journal) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    p.send_signal(sig)
    try:
        p.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # a hang: show where (faulthandler prints on SIGABRT)
        p.send_signal(signal.SIGABRT)
        _, err = p.communicate(timeout=30)
        pytest.fail(f"run-suite did not stop after {signal.Signals(sig).name}:\n{err[-3000:]}")
    assert out.read_text() == '{"old": "results"}'  # untouched
    done = _results_in_journal(journal)
    assert 1 <= done < 4
    assert not list(tmp_path.glob(".out.json.*.tmp"))  # no temp file left behind
    r = _run("run-suite", str(suite), "-o", str(out), "--no-progress")
    assert r.returncode == 1 and "--resume" in r.stderr  # a journal is never silently dropped
    r = _run("run-suite", str(suite), "-o", str(out), "--no-progress", "--resume")
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [b["name"] for b in doc["benchmarks"]] == [f"lat{i}" for i in range(4)]
    assert all(b["status"] == "ok" for b in doc["benchmarks"])
    assert not journal.exists()


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, 3), tmp_path / "out.json"
    first = _cli("run-suite", str(suite), "-o", str(out), "--no-progress")
    deadline = time.monotonic() + 60
    while not Path(f"{out}.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    second = _run("run-suite", str(suite), "-o", str(out), "--no-progress")
    first.communicate(timeout=120)
    assert second.returncode == 1 and "another halbench is writing" in second.stderr
    assert first.returncode == 0 and json.loads(out.read_text())["benchmarks"]


def test_outputs_are_checked_before_any_work(tmp_path: Path) -> None:
    suite = _suite(tmp_path, 1)
    t0 = time.monotonic()
    r = _run("run-suite", str(suite), "-o", str(tmp_path))
    assert r.returncode == 1 and "is a directory" in r.stderr
    r = _run("run-suite", str(suite), "-o", str(tmp_path / "no" / "such" / "r.json"))
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = _run("run-suite", str(suite), "-o", str(suite))
    assert r.returncode == 1 and "is also an input" in r.stderr
    assert time.monotonic() - t0 < 60  # (refused at once; the suite itself takes ~1 s per benchmark)
    r = _run("run-suite", str(suite), "-o", str(tmp_path / "r.json"), "--only", "typo*")
    assert r.returncode == 2 and not (tmp_path / "r.json").exists()


def test_exit_code_is_1_when_a_benchmark_errors_and_the_rest_are_kept(tmp_path: Path) -> None:
    suite = _suite(tmp_path, 1, "models:\n  - {name: broken, path: missing.onnx}\n")
    out = tmp_path / "r.json"
    r = _run("run-suite", str(suite), "-o", str(out), "--no-progress")
    assert r.returncode == 1, r.stderr
    statuses = {b["name"]: b["status"] for b in json.loads(out.read_text())["benchmarks"]}
    assert statuses == {"lat0": "ok", "broken": "error"}


def test_report_and_trace_refuse_to_overwrite_their_input(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, 1), tmp_path / "r.json"
    assert _run("run-suite", str(suite), "-o", str(out), "--no-progress").returncode == 0
    before = out.read_bytes()
    for cmd in (["report", str(out), "-o", str(out)], ["trace", str(out), "-o", str(out)]):
        r = _run(*cmd)
        assert r.returncode == 1 and "is also an input" in r.stderr
    assert out.read_bytes() == before
