"""The fleet's side of a run: plan units, gather their records into one journal, write one file.

Every record a unit's worker streams goes into the output's journal (``OUT.partial``, the same
journal a one-process run keeps) as it arrives, so a unit that dies loses only what it had not
finished. When every unit has ended, one results file is written: the devices of every node,
keyed by URI (``URI@NODE`` in a cluster run), each benchmark with the other devices of its node
that were busy while it ran. Benchmarks a lost unit never finished are errors that say why, and
the journal is kept, so ``--resume`` runs only them.
"""

from __future__ import annotations

import datetime as _dt
import queue
import sys
import threading
import uuid as _uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from halbench import __version__
from halbench.bench.journal import Journal
from halbench.bench.runner import merge_repetition, result_warnings
from halbench.bench.schema import HALBENCH, BenchmarkResult, ResultsDoc, RunInfo, result_from_dict
from halbench.bench.suite import Suite
from halbench.fleet.units import Unit

__all__ = ["Fleet", "busy_devices", "plans_for"]


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plans_for(suite: Suite, only: list[str] | None, devices: list[str] | None,
              resolve: Callable[[tuple[str, ...]], tuple[list[str], list[tuple[str, str]]]]
              ) -> tuple[dict[str, list[str]], list[tuple[str, str, str]]]:
    """Benchmark name -> the URIs it runs on (``resolve`` turns patterns into a node's URIs), and
    ``(benchmark, pattern, reason)`` for patterns that named a device this node lacks."""
    import fnmatch

    plans: dict[str, list[str]] = {}
    missing: list[tuple[str, str, str]] = []
    for spec in suite.benchmarks:
        if only and not any(fnmatch.fnmatch(spec.name, o) or spec.name == o for o in only):
            continue
        uris, miss = resolve(tuple(devices) if devices else spec.devices)
        plans[spec.name] = uris
        missing += [(spec.name, p, why) for p, why in miss]
    return plans, missing


def busy_devices(entries: list[BenchmarkResult], devices: dict[str, Any]) -> list[BenchmarkResult]:
    """Each entry with ``busy``: the other devices of its node (another physical device, not the
    same GPU under another API) that ran a benchmark while any repetition of it ran."""
    def unit(key: str) -> str:
        d = devices.get(key) or {}
        return f"{d.get('node')}/{(d.get('identity') or {}).get('uuid') or key}"

    def node(key: str) -> Any:
        return (devices.get(key) or {}).get("node")

    out = []
    for b in entries:
        busy = set()
        for o in entries:
            if o.device == b.device or o.device in busy or node(o.device) != node(b.device) \
                    or unit(o.device) == unit(b.device):
                continue
            if any(s0 < e1 and s1 < e0 for s0, e0 in b.spans for s1, e1 in o.spans):
                busy.add(o.device)
        out.append(replace(b, busy=tuple(sorted(busy))))
    return out


class Fleet:
    """One fleet run's journal and results: what the units send, what lost units leave undone."""

    def __init__(self, output: str, suite: Suite, nodes: dict[str, Any], resume: bool,
                 command_line: list[str] | None) -> None:
        from halbench.bench.runner import node_info

        started = _now()
        _, here = node_info()  # run.host: where halbench ran (the driver); run.nodes: where devices are
        run = RunInfo(f"{started.replace(':', '-')}-{_uuid.uuid4().hex[:4]}", __version__,
                      here["git_commit"], here["host"], started,
                      tuple(command_line or sys.argv), suite.to_dict(), nodes=nodes)
        self.output, self.suite = Path(output), suite
        self.journal = Journal.open(self.output, suite.sha256, run, resume)
        self.run = replace(self.journal.run or run, nodes={**(self.journal.run or run).nodes, **nodes})
        self.lost: list[BenchmarkResult] = []
        self.extra: list[BenchmarkResult] = []
        self.warnings: list[str] = []

    def done_of(self, unit: Unit) -> list[dict[str, Any]]:
        keys = {d.key for d in unit.devices}
        return [{"rep": rep, "result": r.to_dict()} for (rep, _n, key, _rt), r in self.journal.done.items()
                if key in keys]

    def infos_of(self, unit: Unit) -> dict[str, Any]:
        return {d.key: self.journal.devices[d.key] for d in unit.devices if d.key in self.journal.devices}

    def add(self, rec: dict[str, Any]) -> bool:
        """Record one of a worker's journal records; True for a new result."""
        if rec.get("type") == "device":
            self.journal.device(rec["uri"], rec["info"])
        elif rec.get("type") == "result":
            r = result_from_dict(rec["result"])
            if (int(rec["rep"]), *r.key) not in self.journal.done:
                self.journal.result(int(rec["rep"]), r)
                return True
        return False

    def unit_lost(self, unit: Unit, reason: str) -> None:
        """``unit`` ended before its benchmarks did: each one it did not finish is an error."""
        done = {(rep, n, key) for (rep, n, key, rt) in self.journal.done if rt == HALBENCH}
        by_name = {s.name: s for s in self.suite.benchmarks}
        for name, patterns in unit.plan.items():
            spec = by_name[name]
            for d in unit.devices:
                if d.pattern in patterns and any((rep, name, d.key) not in done
                                                 for rep in range(spec.settings.repetitions)):
                    self.lost.append(BenchmarkResult(name, spec.kind, d.key, d.uri.partition("://")[0], "error",
                                                     f"not run: {reason}"))

    def finish(self) -> dict[str, Any]:
        """Write the results file; keep the journal when a unit was lost (``--resume`` continues)."""
        from halbench.bench.results import write_results

        entries: dict[tuple[str, str, str], BenchmarkResult] = {}
        for (_rep, *key), r in sorted(self.journal.done.items(), key=lambda kv: kv[0][0]):
            k = tuple(key)
            entries[k] = r if k not in entries else merge_repetition(entries[k], r)
        for r in self.lost:  # a benchmark missing repetitions did not finish: the error stands
            entries[r.key] = r
        for r in self.extra:
            entries.setdefault(r.key, r)
        devices = dict(self.journal.devices)
        benchmarks = tuple(busy_devices(list(entries.values()), devices))
        doc = ResultsDoc(replace(self.run, finished_at=_now()), devices, benchmarks,
                         tuple(self.warnings + result_warnings(benchmarks)))
        d = doc.to_dict()
        write_results(self.output, d)
        self.journal.close(finished=not self.lost)
        return d

    def close(self) -> None:
        self.journal.close(False)


def collect(fleet: Fleet, units: list[Unit], start: Callable[[Unit], Iterator[dict[str, Any]]],
            progress: bool) -> None:
    """Run every unit at once (a thread each, consuming ``start(unit)``), recording as records come."""
    q: queue.Queue[tuple[Unit, dict[str, Any] | None, str | None]] = queue.Queue()

    def consume(unit: Unit) -> None:
        ended = None
        try:
            for rec in start(unit):
                if rec.get("type") == "exit":
                    ended = rec
                q.put((unit, rec, None))
            if ended is None:
                q.put((unit, None, "its worker ended without a word"))
            elif ended.get("rc") not in (0, 1):
                tail = (ended.get("log") or "").strip().splitlines()[-1:] or [""]
                q.put((unit, None, f"its worker exited with {ended.get('rc')}: {tail[0][:200]}"))
            else:
                q.put((unit, None, None))
        except Exception as e:  # noqa: BLE001 - a lost node (Ray raises here) or a worker that could not start
            q.put((unit, None, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"))

    threads = [threading.Thread(target=consume, args=(u,), daemon=True, name=u.label) for u in units]
    for t in threads:
        t.start()
    running, failed = len(units), {}
    while running:
        unit, rec, why = q.get()
        if rec is None:
            running -= 1
            if why:
                failed[unit] = why
            continue
        if rec.get("type") == "failed":
            failed[unit] = rec.get("error", "failed")
        elif fleet.add(rec) and progress:
            r = rec["result"]
            print(f"{r['name']} @ {r['device']}: {r['status']}", file=sys.stderr, flush=True)
    for unit, why in failed.items():
        fleet.unit_lost(unit, f"{unit.label} was lost: {why}")
    for unit in units:  # a worker that ended normally but left benchmarks undone
        if unit not in failed:
            fleet.unit_lost(unit, f"{unit.label} ended without running it")
