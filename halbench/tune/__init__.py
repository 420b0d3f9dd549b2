"""``halbench tune``: GEMM configurations chosen by measurement, per target, cached for compile.

Above the compiler and the HAL (it compiles candidates and runs them), beside ``bench/``; nothing
below imports it. The cache it writes is ``compiler/tuning_cache.py``'s, which the compiler reads.
"""

from __future__ import annotations

from halbench.tune.problems import build_graph, load_problems, write_problems
from halbench.tune.search import Measured, ProblemResult, TuneRun, candidates, measure_bundle, tune

__all__ = ["Measured", "ProblemResult", "TuneRun", "build_graph", "candidates", "load_problems",
           "measure_bundle", "save_run", "tune", "write_problems"]


def save_run(run: TuneRun, where: str | None = None) -> str:
    """Merge ``run``'s best configurations into the tuning cache (``where``: a directory or a
    .json file; None: the default cache) and return the file written."""
    import time

    from halbench.compiler.tuning_cache import cache_file, update_cache

    path = cache_file(run.api, run.target, where)
    if path is None:
        raise ValueError("save_run needs a cache location, not 'off'")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entries = {}
    for r in run.results:
        best = r.best
        if best is None or not any(m.ok for m in r.tried):
            continue  # nothing was compared with the rule: no measured choice to record
        entries[r.key] = {"problem": r.problem.model_dump(exclude_none=True), "config": best.config.to_dict(),
                          "time_ns": best.time_ns, "rule": r.rule.config.to_dict(),
                          **({"rule_time_ns": r.rule.time_ns} if r.rule.ok else {}),
                          "candidates": 1 + len(r.tried), "device": run.device, "measured_at": stamp}
    update_cache(path, run.api, run.target, entries)
    run.cache = str(path)
    return str(path)
