"""The run journal: results are never lost, and an existing results file is never half-replaced.

While a suite runs, each finished (benchmark, device, repetition) is appended to
``OUT.partial`` as one JSON line and fsynced; ``OUT`` itself is written once, atomically, when
the run ends. An interrupted run (Ctrl-C, a kill, a crash) leaves ``OUT`` as it was and its
journal behind; ``run-suite --resume`` reads the journal, skips what it holds and runs the rest.
An advisory lock on ``OUT.lock`` refuses a second writer of the same output.

Lines: ``{"type": "header", "suite_sha256", "run"}``, ``{"type": "device", "uri", "info"}``,
``{"type": "result", "rep", "result"}``. A torn last line (a kill mid-write) is ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halbench.bench.schema import BenchmarkResult, RunInfo, result_from_dict
from halbench.errors import UserError

__all__ = ["Journal", "journal_path"]

_MAX_JOURNAL_BYTES = 1 << 30


def journal_path(output: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(output)}.partial")


@dataclass
class Journal:
    path: Path
    run: RunInfo | None = None
    devices: dict[str, Any] = field(default_factory=dict)
    done: dict[tuple[int, str, str, str], BenchmarkResult] = field(default_factory=dict)  # (rep, name, uri, runtime)
    #: Called with every record appended (a fleet worker streams them to its parent).
    tee: Callable[[dict[str, Any]], None] | None = None
    _f: Any = None

    @classmethod
    def open(cls, output: str | os.PathLike, suite_sha256: str, run: RunInfo, resume: bool,
             tee: Callable[[dict[str, Any]], None] | None = None) -> Journal:
        path = journal_path(output)
        j = cls(path, tee=tee)
        if path.exists() and not resume:
            raise UserError(f"{path} holds an interrupted run of this output; continue it with --resume, "
                            f"or delete it to start over")
        if resume:
            if not path.exists():
                raise UserError(f"nothing to resume: {path} does not exist (the run finished, or never started)")
            j._load(suite_sha256)
        j._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        if j.run is None:
            j.run = run
            j._append({"type": "header", "suite_sha256": suite_sha256, "run": run.to_dict()})
        return j

    def _load(self, suite_sha256: str) -> None:
        if self.path.stat().st_size > _MAX_JOURNAL_BYTES:
            raise UserError(f"{self.path} is larger than {_MAX_JOURNAL_BYTES} B; it is not a halbench journal")
        for n, line in enumerate(self._lines()):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by the interruption: that result is run again
            kind = rec.get("type") if isinstance(rec, dict) else None
            try:
                if n == 0 and kind != "header":
                    raise UserError(f"{self.path} is not a halbench run journal (no header line)")
                if kind == "header":
                    if rec["suite_sha256"] != suite_sha256:
                        raise UserError(f"{self.path} is the journal of another suite (or the suite file "
                                        f"changed since); delete it to start over")
                    r = rec["run"]
                    self.run = RunInfo(r["id"], r["halbench_version"], r.get("git_commit"), r.get("host") or {},
                                       r["started_at"], tuple(r.get("command_line") or ()), r.get("suite") or {},
                                       nodes=r.get("nodes") or {})
                elif kind == "device":
                    self.devices[rec["uri"]] = rec["info"]
                elif kind == "result":
                    b = result_from_dict(rec["result"])
                    self.done[(int(rec["rep"]), *b.key)] = b
            except (KeyError, TypeError, ValueError) as e:
                if isinstance(e, UserError):
                    raise
                raise UserError(f"{self.path}: line {n + 1} is not a journal record ({e}); delete the "
                                f"journal to start over") from None

    def _lines(self) -> Iterator[str]:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    yield line

    def _append(self, rec: dict[str, Any]) -> None:
        self._f.write(json.dumps(rec, allow_nan=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        if self.tee is not None:
            self.tee(rec)

    def device(self, uri: str, info: dict[str, Any]) -> None:
        if uri not in self.devices:
            self.devices[uri] = info
            self._append({"type": "device", "uri": uri, "info": info})

    def result(self, rep: int, result: BenchmarkResult) -> None:
        self.done[(rep, *result.key)] = result
        self._append({"type": "result", "rep": rep, "result": result.to_dict()})

    def close(self, finished: bool) -> None:
        """Close; a finished run's journal is removed (its results are in the output now)."""
        if self._f is not None:
            self._f.close()
            self._f = None
        if finished:
            self.path.unlink(missing_ok=True)
