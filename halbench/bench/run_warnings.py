"""The one rule set for a run's warnings: the runner stores them, the CLI prints them, the report
lists them. All three call :func:`entry_warnings` on the stored entries, so they cannot differ."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from halbench.bench.schema import HALBENCH
from halbench.bench.stats import Stats, noisy_warning

__all__ = ["NOISY_MARK", "entry_warnings"]

#: What every noisy warning contains after the entry's name (the report groups them by it).
NOISY_MARK = ": noisy ("


def _where(b: dict[str, Any]) -> str:
    runtime = b.get("runtime") or HALBENCH
    return f"{b['name']} @ {b['device']}" + ("" if runtime == HALBENCH else f" ({runtime})")


def entry_warnings(entries: Iterable[dict[str, Any]]) -> list[str]:
    """Warnings for results entries (plain dicts, as stored), each once, in entry order."""
    out: list[str] = []
    for b in entries:
        at = _where(b)
        dm = (b.get("samples") or {}).get("device_ms") or []
        if b.get("status") == "ok" and len(dm) >= 3 and noisy_warning(Stats(list(dm))):
            out.append(f"{at}: {noisy_warning(Stats(list(dm)))}")
        t = b.get("timing") or {}
        # Host-timed entries (transfers, peers) have no device timestamps to calibrate.
        if t.get("total_source") == "timestamps" and t.get("calibrated") is False:
            out.append(f"{at}: device timestamps uncalibrated (durations exact, absolute times not)")
        env = b.get("environment") or {}
        reasons = set(((env.get("before") or {}).get("throttle_reasons") or [])
                      + ((env.get("after") or {}).get("throttle_reasons") or [])) - {"gpu_idle"}
        if reasons:
            out.append(f"{at}: clocks throttled ({', '.join(sorted(reasons))})")
        if b.get("status") in ("error", "wrong"):
            out.append(f"{at}: {b['status']}: {b.get('error') or ''}")
    return list(dict.fromkeys(out))
