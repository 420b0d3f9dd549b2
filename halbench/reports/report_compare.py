"""The comparison section of a two-file report: each pair side by side with the gate's verdict.

The verdicts are :func:`halbench.reports.compare.compare_results`'s, the rows ``halbench compare``
prints and the gate judges by (one decision function), with the limits compare would use.
"""

from __future__ import annotations

from typing import Any

from halbench.errors import HalbenchError
from halbench.reports.compare import compare_results, device_differences, fmt_bounds
from halbench.reports.thresholds import resolve_settings

__all__ = ["comparison_section"]

_WORDS = {"slower": "slower (REGRESSION)", "same": "same (PASS)", "faster": "faster",
          "inconclusive": "inconclusive"}


def comparison_section(labels: list[str], docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Rows of (benchmark, device, runtime): both medians, the ratio and its significance; None
    when the files share no timed benchmark (a peaks run beside a models run compares nothing)."""
    base, new = docs
    try:
        settings, warnings = resolve_settings(base, new)
    except HalbenchError as e:  # an invalid gate section: compare with the defaults, and say so
        settings, warnings = resolve_settings({"run": {}}), [str(e)]
    common = {x["device"] for x in base["benchmarks"]} & {x["device"] for x in new["benchmarks"]}
    warnings += [f"{d}: the comparison may mean little" for d in device_differences(base, new, common)]
    rows, verdicts, counts = [], {}, {}
    for r in compare_results(base, new, settings):
        d = r.decision
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
        if d is not None:
            for label in labels:
                verdicts[(r.name, r.device, label)] = d.verdict
        rows.append({
            "name": r.name, "device": r.device, "runtime": r.runtime, "verdict": r.verdict,
            "word": _WORDS.get(r.verdict, r.verdict),
            "base_ms": d.base_ms if d else None, "new_ms": d.new_ms if d else None,
            "ratio": (d.new_ms / d.base_ms) if d and d.base_ms else None,
            "bounds": fmt_bounds(d) if d else "–",
            "p": (f"p={d.p_value:.2g}" if d.p_value is not None else "intervals") if d else "–",
            "allowance": d.allowance if d else None,
            "reason": d.reason if d else "", "reps": d.repetitions if d else None})
    if not verdicts:
        return None
    return {"base": labels[0], "new": labels[1], "rows": rows, "verdicts": verdicts,
            "warnings": warnings, "runtimes": any(r["runtime"] != "halbench" for r in rows),
            "summary": ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))}
