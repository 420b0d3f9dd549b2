"""The tuning table: per problem, the rule's configuration and time, the best, the speedup."""

from __future__ import annotations

from collections.abc import Sequence

from halbench.tune.confirm import ModelCheck
from halbench.tune.search import TuneRun

__all__ = ["confirm_table", "table"]


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.4f}"


def _short(key: str) -> str:
    """The problem key without the attributes at their defaults."""
    for default in ("transpose_a=0", "transpose_b=0", "dilations=1/1", "pad_value=0.0", "strides=1/1",
                    "pads=0/0/0/0"):
        key = key.replace("," + default, "").replace(":" + default + ",", ":").replace(":" + default, "")
    return key.replace(":f32:", " ")


def table(run: TuneRun) -> str:
    rows = [("problem", "rule", "rule ms", "best", "best ms", "speedup", "GFLOP/s", "tried")]
    total_rule = total_best = 0.0
    for r in run.results:
        best = r.best
        speed = (r.rule.time_ns / best.time_ns) if best and r.rule.ok and best.time_ns else None
        tflops = (r.flops / best.time_ns) if best and best.time_ns else None
        if best and r.rule.ok:
            total_rule += r.rule.time_ns or 0.0
            total_best += best.time_ns or 0.0
        rows.append((_short(r.key)[:90], r.rule.config.label(), _ms(r.rule.time_ns),
                     best.config.label() if best else "-", _ms(best.time_ns if best else None),
                     f"{speed:.2f}x" if speed else "-", f"{tflops:.1f}" if tflops else "-",
                     f"{len(r.tried)} ({sum(1 for m in r.tried if m.error)} discarded)"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"{run.api} target {run.target} on {run.device}" + (f" -> {run.cache}" if run.cache else "")]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if total_best:
        lines.append(f"sum of problem times (each once): rule {total_rule / 1e6:.3f} ms, tuned "
                     f"{total_best / 1e6:.3f} ms ({total_rule / total_best:.2f}x)")
    return "\n".join(lines)


def confirm_table(checks: Sequence[ModelCheck]) -> str:
    """tune --confirm: per model, its problems, how many the run changed, the whole-model times
    before and with them, and whether they were merged."""
    rows = [("model", "problems", "changed", "before ms", "tuned ms", "tuned / before", "outputs", "")]
    for c in checks:
        ratio = f"{c.new_ms / c.old_ms:.3f}" if c.old_ms and c.new_ms is not None else "-"
        diff = "-" if c.rel_diff is None else f"{c.rel_diff:.1e}"
        rows.append((c.source, str(len(c.keys)), str(len(c.changed)), _ms_whole(c.old_ms), _ms_whole(c.new_ms),
                     ratio, diff, c.verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["whole models, each compiled with the cache before and with the run's configurations:"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _ms_whole(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.3f}"
