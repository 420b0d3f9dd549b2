"""The suite runner: per (benchmark, device) prepare, check, warm up, sample, record.

A failure of one benchmark (compile error, wrong result, lost device, timeout) is recorded
with its error and the suite goes on. Each finished benchmark goes to the run's journal
(``journal.py``); the results file is written once, atomically, when the run ends, so an
interrupted run keeps what it measured and never leaves a half-replaced results file.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import subprocess
import sys
import time
import uuid as _uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from halbench import __version__
from halbench.bench.environment import device_entry, read_environment
from halbench.bench.journal import Journal
from halbench.bench.peer_runs import peer_pairs, run_peer
from halbench.bench.schema import (
    HALBENCH,
    BenchmarkResult,
    Correctness,
    DispatchStat,
    Metrics,
    ResultsDoc,
    RunInfo,
    Samples,
    Timing,
)
from halbench.bench.suite import BenchmarkSpec, Settings, Suite
from halbench.errors import DeviceLost, HalbenchError, NothingToDo

__all__ = ["dispatch_stats", "merge_repetition", "named_devices_missing", "node_info", "result_warnings",
           "run_suite", "sample_loop"]


def sample_loop(run: Callable[[], Any], s: Settings) -> list[Any]:
    """Warm up (``warmup`` runs, and for at least ``warmup_s``), then take samples until both the
    minimum time and count are met (bounded by ``max_samples`` and ``max_time_s``).

    The time floor is there because GPUs change clocks under load: NVIDIA's H100 through Vulkan
    copies at 1.68 TB/s for its first ~0.2 s of work and at 2.98 TB/s after, so a warmup of a
    few runs measured a mix of both states (a bimodal sample set, IQR 77% of the median)."""
    w0 = time.monotonic()
    done = 0
    while done < s.warmup or (time.monotonic() - w0 < s.warmup_s and time.monotonic() - w0 < s.max_time_s):
        run()
        done += 1
    samples: list[Any] = []
    t0 = time.monotonic()
    while len(samples) < s.max_samples:
        elapsed = time.monotonic() - t0
        if len(samples) >= s.min_samples and elapsed >= s.min_time_s:
            break
        if elapsed >= s.max_time_s and len(samples) >= 1:
            break
        samples.append(run())
    return samples


#: Runs with per-dispatch timestamps after a model's samples, for its dispatch breakdown.
DISPATCH_RUNS = 20


def dispatch_stats(profiles: list[Any], infos: list[dict[str, Any]]) -> tuple[DispatchStat, ...]:
    """Per-dispatch device-time statistics over the samples' profiles (ms), with flops/bytes."""
    if not profiles or profiles[0] is None:
        return ()
    n = len(profiles[0].dispatches)
    out = []
    for i in range(n):
        ms = np.array([p.dispatches[i].duration_ns / 1e6 for p in profiles if len(p.dispatches) > i])
        last = profiles[-1].dispatches[i]
        info = infos[i] if i < len(infos) else {}
        out.append(DispatchStat(
            i, info.get("name", last.entry), info.get("flops"), info.get("bytes"),
            {"median": float(np.median(ms)), "p10": float(np.percentile(ms, 10)),
             "p90": float(np.percentile(ms, 90)), "mean": float(ms.mean()), "count": int(ms.size)},
            {"start_ns": int(last.start_ns), "end_ns": int(last.end_ns)},
            tuple(info.get("nodes") or ())))
    return tuple(out)


def _git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_info() -> tuple[str, dict[str, Any]]:
    """This machine as a node of a run: its name (the host name) and what the results record of it
    (``run.nodes[name]``: host, halbench version and commit)."""
    host = {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "cpu": platform.processor() or platform.machine()}
    return host["hostname"], {"host": host, "halbench_version": __version__, "git_commit": _git_commit()}


def _write(path: Path, doc: ResultsDoc) -> dict[str, Any]:
    from halbench.bench.results import write_results

    d = doc.to_dict()
    write_results(path, d)
    return d


def run_suite(suite: Suite, output: str | os.PathLike, *, devices: list[str] | None = None,
              only: list[str] | None = None, progress: bool = True,
              command_line: list[str] | None = None, resume: bool = False,
              peers: list[Any] | None = None, tee: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every benchmark of ``suite`` on every matching device and write ``output``.

    ``output`` is checked before any work and written once, atomically, at the end; finished
    benchmarks go to its journal as they finish (``journal.py``), so an interrupted run loses
    nothing and ``resume=True`` continues it. A run that selects nothing raises NothingToDo.
    ``peers``: PeerSpecs to run beside the suite's own ``peers:`` on every model benchmark.
    ``tee``: called with every journal record as it is written (``halbench.fleet``'s workers)."""
    from halbench.files import check_output, exclusive

    check_output(output, suite.path, what="results file")
    with exclusive(output, "results file"):
        if peers:
            suite = replace(suite, peers=tuple(dict.fromkeys(tuple(suite.peers) + tuple(peers))))
        return _run_suite(suite, output, devices, only, progress, command_line, resume, tee)


def named_devices_missing(results: dict[str, Any]) -> list[tuple[str, str]]:
    """``(uri, why)`` of each device a pattern named explicitly (``cuda://3``, ``vulkan://``) that
    this machine lacks: halbench's own entries skipped on a device that was never opened (a
    wildcard never names a missing device; a missing feature skips on an opened device)."""
    opened = results["devices"]
    return list(dict.fromkeys((b["device"], b.get("error") or "unavailable") for b in results["benchmarks"]
                              if b["status"] == "skipped" and b.get("runtime", HALBENCH) == HALBENCH
                              and b["device"] not in opened))


def _run_suite(suite: Suite, output: str | os.PathLike, devices: list[str] | None, only: list[str] | None,
               progress: bool, command_line: list[str] | None, resume: bool,
               tee: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    from halbench.bench.micro import Unsupported, prepare_micro
    from halbench.bench.models import prepare_model

    out_path = Path(output)
    started = _now()
    node, this_node = node_info()
    run = RunInfo(id=f"{started.replace(':', '-')}-{_uuid.uuid4().hex[:4]}", halbench_version=__version__,
                  git_commit=this_node["git_commit"], host=this_node["host"],
                  started_at=started, command_line=tuple(command_line or sys.argv), suite=suite.to_dict(),
                  nodes={node: this_node})
    device_entries: dict[str, dict[str, Any]] = {}
    specs = [s for s in suite.benchmarks if not only or any(_match(s.name, o) for o in only)]
    if not specs:
        raise NothingToDo(f"no benchmark of suite {suite.name} matches --only {' '.join(only or [])}; "
                          f"its benchmarks: {', '.join(b.name for b in suite.benchmarks)}")
    from halbench.drivers import resolve_devices

    # (spec, the probed device or the pattern that named no device, why no device, the peer or
    # None for halbench). Patterns are resolved once per distinct list; devices travel as
    # DeviceInfo, not as URI strings.
    pairs: list[tuple[BenchmarkSpec, Any, str | None, Any]] = []
    cache: dict[tuple[str, ...], tuple[list[Any], list[tuple[str, str]]]] = {}
    for spec in specs:
        pats = tuple(devices) if devices else spec.devices
        if pats not in cache:
            cache[pats] = resolve_devices(pats)
        infos, missing = cache[pats]
        for info in infos:
            pairs.append((spec, info, None, None))
        for pat, reason in missing:
            pairs.append((spec, pat, reason, None))
        if spec.kind == "model":
            pairs.extend(peer_pairs(spec, infos, suite.peers, resolve_devices))
    # Repetitions run round-robin over the whole suite, so a slow drift of the machine (load,
    # clocks, temperature) spreads over every benchmark instead of biasing one; each keeps its
    # samples per repetition (``samples.blocks``), which the gate uses as between-run noise.
    rounds = max((s.settings.repetitions for s, _, _, _ in pairs), default=1)
    work = [(rep, p) for rep in range(rounds) for p in pairs if rep < p[0].settings.repetitions]
    if not work:
        raise NothingToDo(f"suite {suite.name}: nothing to run (no repetitions, or no device pattern)")
    journal = Journal.open(out_path, suite.sha256, run, resume, tee)
    run = journal.run or run
    device_entries = dict(journal.devices)
    bar = _progress(len(work), progress)
    open_devices: dict[str, Any] = {}
    entries: dict[tuple[str, str, str], BenchmarkResult] = {}
    finished = False
    try:
        for rep, (spec, where, missing_reason, peer) in work:
            uri = where if isinstance(where, str) else where.uri
            key = (spec.name, uri, peer.runtime if peer else HALBENCH)
            result = journal.done.get((rep, *key))
            if result is None:
                who = f" [{peer.runtime}]" if peer else ""
                bar.set_description(f"{spec.name} @ {uri}{who}" + (f" (repetition {rep + 1})" if rounds > 1 else ""))
                t0 = time.time()
                if peer is not None:
                    result = run_peer(spec, where, missing_reason, peer, device_entries)
                else:
                    result = _run_pair(spec, where, missing_reason, open_devices, device_entries, prepare_micro,
                                       Unsupported, prepare_model)
                result = replace(result, spans=((round(t0, 3), round(time.time(), 3)),))
                for u, info in device_entries.items():
                    journal.device(u, {**info, "node": info.get("node", node)})
                journal.result(rep, result)
            entries[key] = result if key not in entries else merge_repetition(entries[key], result)
            bar.update(1)
        benchmarks = tuple(entries.values())
        device_entries = {u: {**info, "node": info.get("node", node)} for u, info in device_entries.items()}
        doc = ResultsDoc(replace(run, finished_at=_now()), device_entries, benchmarks,
                         tuple(result_warnings(benchmarks)))
        written = _write(out_path, doc)
        finished = True
        return written
    except KeyboardInterrupt:
        # Interrupted: the journal holds what finished. Leave the devices to the process's exit:
        # an interrupt may have landed inside a driver call, and closing could wait on it.
        open_devices.clear()
        raise
    finally:
        bar.close()
        journal.close(finished)
        for d in open_devices.values():
            if not isinstance(d, Exception):
                try:
                    d.close()
                except HalbenchError:
                    pass


def _run_pair(spec: BenchmarkSpec, where: Any, missing_reason: str | None, open_devices: dict[str, Any],
              device_entries: dict[str, Any], prepare_micro: Callable, unsupported: type,
              prepare_model: Callable) -> BenchmarkResult:
    """One repetition of one benchmark on one device, as a results entry (never raises for
    the benchmark's own failure)."""
    from halbench.drivers import create_device

    if missing_reason is not None:
        return _entry(spec, where, "skipped", missing_reason)
    uri = where.uri
    dev = open_devices.get(uri)
    if dev is None or isinstance(dev, Exception) or dev.lost:
        try:
            dev = create_device(where)
            device_entries[uri] = device_entry(dev.info)
        except HalbenchError as e:
            dev = e
        open_devices[uri] = dev
    if isinstance(dev, Exception):
        return _entry(spec, uri, "error", f"cannot open {uri}: {dev}")
    try:
        if spec.kind == "micro":
            entry = _run_micro(spec, dev, prepare_micro, unsupported)
        else:
            entry = _run_model(spec, dev, prepare_model)
    except DeviceLost as e:
        entry = _entry(spec, uri, "error", f"device lost: {e}")
    except HalbenchError as e:
        entry = _entry(spec, uri, "error", str(e))
    except Exception as e:  # noqa: BLE001 - a bug in one benchmark must not lose the others
        entry = _entry(spec, uri, "error", f"internal error: {type(e).__name__}: {e}")
    if entry.status == "ok":
        entry = replace(entry, samples=replace(entry.samples, blocks=(len(entry.samples.device_ms),)))
    return entry


def merge_repetition(first: BenchmarkResult, more: BenchmarkResult) -> BenchmarkResult:
    """The benchmark's result with a later repetition folded in: samples append, one block each.
    A repetition that failed makes the whole benchmark failed (a failed benchmark keeps no
    samples); per-dispatch statistics stay those of the first repetition."""
    spans = first.spans + more.spans
    if first.status != "ok":
        return replace(first, spans=spans)
    if more.status != "ok":
        rep = len(first.samples.blocks or ()) + 1
        return first.failed(more.status, f"repetition {rep}: {more.error}", correctness=more.correctness,
                            spans=spans)
    env = dict(first.environment)
    if more.environment.get("after"):
        env["after"] = more.environment["after"]
    return replace(first, samples=first.samples.appended(more.samples), environment=env, spans=spans)


def _match(name: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatch(name, pattern) or name == pattern


def _entry(spec: BenchmarkSpec, uri: str, status: str, error: str | None = None) -> BenchmarkResult:
    return BenchmarkResult(spec.name, spec.kind, uri, uri.partition("://")[0], status, error,
                           params=_jsonable(spec.params))


def _timing(spec: BenchmarkSpec, profiles: list[Any], source: str = "timestamps") -> Timing:
    s = spec.settings
    cal = [p for p in profiles if p is not None]
    devs = [p.deviation_ns for p in cal if p.deviation_ns is not None]
    return Timing(s.warmup, s.min_time_s, s.min_samples, all(p.calibrated for p in cal) if cal else False,
                  float(max(devs)) if devs else None, cal[0].total_source if cal else source, s.warmup_s)


def _samples(samples: list[Any]) -> Samples:
    return Samples(tuple(float(s.device_ms) for s in samples), tuple(float(s.host_ms) for s in samples))


def _run_micro(spec: BenchmarkSpec, dev: Any, prepare: Callable, unsupported: type) -> BenchmarkResult:
    entry = _entry(spec, dev.uri, "ok")
    try:
        mb = prepare(spec.params["kind"], dev, spec.params.get("params"))
    except unsupported as e:
        return entry.failed("skipped", str(e))
    try:
        entry = replace(entry, format=mb.format, params=_jsonable({"kind": mb.kind, **mb.params}))
        before = read_environment(dev.info)
        samples = sample_loop(mb.run, spec.settings)
        env = {"before": before, "after": read_environment(dev.info)}
        corr = mb.check()
        corr.setdefault("reference", "expected values computed on the host")
        entry = replace(entry, correctness=Correctness.from_check(corr), environment=env)
        if corr.get("checked") and not corr.get("passed"):
            return entry.failed("wrong", "the microbenchmark's output is wrong")
        profiles = [s.profile for s in samples]
        dispatches: tuple[DispatchStat, ...] = ()
        if profiles and profiles[0] is not None:
            name = spec.params["kind"]
            per = {k: v / max(1, len(profiles[0].dispatches)) for k, v in mb.metrics.items()
                   if k in ("flops", "bytes")}
            dispatches = dispatch_stats(profiles, [{"name": name, **per}] * len(profiles[0].dispatches))
        return replace(entry, samples=_samples(samples), metrics=Metrics(**mb.metrics, items_per_run=1),
                       timing=_timing(spec, profiles, "host"), dispatches=dispatches)
    finally:
        mb.close()


def _run_model(spec: BenchmarkSpec, dev: Any, prepare: Callable) -> BenchmarkResult:
    entry = _entry(spec, dev.uri, "ok")
    with prepare(spec, dev) as pm:
        corr = pm.check(spec.settings.tolerance)
        entry = replace(entry, format=pm.format, compile=_jsonable(pm.compile_stats), params=_jsonable(pm.params),
                        correctness=Correctness.from_check(corr))
        if not corr.get("passed"):
            return entry.failed("wrong", f"output differs from the {corr.get('reference')} reference: relative "
                                         f"error {corr.get('rel_error'):.3g} > tolerance {corr.get('tolerance'):g}"
                                         + (f" (precision {corr['precision']})"
                                            if corr.get("precision", "fp32") != "fp32" else ""))
        before = read_environment(dev.info)
        samples = sample_loop(pm.run, spec.settings)
        env = {"before": before, "after": read_environment(dev.info)}
        profiles = [s.profile for s in samples]
        # The samples time each run whole; the per-dispatch breakdown comes from runs of its own
        # (per-dispatch timestamps serialize the dispatches and cost time: hal.CommandBuffer).
        per_dispatch = profiles if profiles and profiles[0].dispatches else pm.dispatch_profiles(
            min(len(samples), DISPATCH_RUNS))
        return replace(entry, environment=env, samples=_samples(samples),
                       metrics=Metrics(flops=pm.flops, bytes=pm.bytes, items_per_run=pm.items_per_run),
                       timing=_timing(spec, profiles), dispatches=dispatch_stats(per_dispatch, pm.dispatch_infos))


def result_warnings(benchmarks: tuple[BenchmarkResult, ...]) -> list[str]:
    """The run's warnings (bench/run_warnings.py: one rule set for the runner, CLI and report)."""
    from halbench.bench.run_warnings import entry_warnings

    return entry_warnings(b.to_dict() for b in benchmarks)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


class _NoBar:
    def set_description(self, *_: Any) -> None: ...
    def update(self, *_: Any) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    # disable=None: no bar when stderr is not a terminal (CI logs stay readable)
    return tqdm(total=total, unit="bench", file=sys.stderr, dynamic_ncols=True, leave=True, disable=None)
