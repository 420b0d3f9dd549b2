"""``halbench compare BASE NEW``: what changed between two results files, and the verdict on each.

Every row is judged by :func:`halbench.reports.decision.decide` with the limits the gate would use
(:mod:`halbench.reports.thresholds`), so compare's ``slower`` is exactly the gate's REGRESSION and
its ``inconclusive`` the gate's INCONCLUSIVE. Informational: benchmarks present on one side only
are listed, not fatal (the gate is strict), and devices that differ are a warning. Which entries
meet is :func:`halbench.reports.runtimes.match`'s rule: by (name, device, runtime), or one runtime
against another (``--baseline-runtime torch-cudagraph``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from halbench.bench.schema import HALBENCH
from halbench.reports.decision import Decision, Limits, Pair, decide_all
from halbench.reports.runtimes import Sides, match
from halbench.reports.thresholds import GateSettings

__all__ = ["Row", "compare_results", "decide_entries", "device_differences", "entry_pair", "fmt_ms",
           "render", "strict_json", "timing_samples"]


def timing_samples(bench: dict[str, Any]) -> tuple[str, list[float]]:
    """The samples to judge a benchmark by: device time when stored, else host wall time."""
    samples = bench.get("samples") or {}
    if samples.get("device_ms"):
        return "device_ms", list(samples["device_ms"])
    return "host_ms", list(samples.get("host_ms") or [])


def entry_pair(base: dict[str, Any], new: dict[str, Any], limits: Limits) -> tuple[str, Pair] | None:
    """(samples key, Pair) for two timed results entries; None when either has no samples.

    Device time is never judged against host time: when only one side has device time, both
    sides are judged on host time.
    """
    bkey, bs = timing_samples(base)
    nkey, ns = timing_samples(new)
    if bkey != nkey:
        bkey, bs = "host_ms", list((base.get("samples") or {}).get("host_ms") or [])
        nkey, ns = "host_ms", list((new.get("samples") or {}).get("host_ms") or [])
    if not bs or not ns:
        return None
    return bkey, Pair(bs, ns, limits, (base.get("samples") or {}).get("blocks"),
                      (new.get("samples") or {}).get("blocks"), base["device"])


def decide_entries(pairs: dict[Any, tuple[dict[str, Any], dict[str, Any], Limits]], *,
                   device_shift: bool = True) -> dict[Any, tuple[str, Decision]]:
    """Judge timed entry pairs together (run-to-run noise is read across a device's benchmarks):
    key -> (base entry, new entry, limits) in; key -> (samples key, Decision) out, for the pairs
    that have samples on both sides. ``device_shift=False`` between two runtimes of one run: there
    the device's median change is the runtimes' gap, the very thing judged, not a machine move."""
    judged = {k: entry_pair(b, n, lim) for k, (b, n, lim) in pairs.items()}
    keys = [k for k, v in judged.items() if v is not None]
    decisions = decide_all([judged[k][1] for k in keys], device_shift=device_shift)
    return {k: (judged[k][0], d) for k, d in zip(keys, decisions)}


def device_differences(base: dict[str, Any], new: dict[str, Any], uris: set[str]) -> list[str]:
    """One line per device identity field (UUID, name, driver version) that differs."""
    out = []
    for uri in sorted(uris):
        b = (base["devices"].get(uri) or {}).get("identity", {})
        n = (new["devices"].get(uri) or {}).get("identity", {})
        for key in ("uuid", "name", "driver_version"):
            if b.get(key) != n.get(key):
                out.append(f"{uri}: device {key} differs: baseline {b.get(key)!r}, "
                           f"candidate {n.get(key)!r}")
    return out


@dataclass(frozen=True)
class Row:
    name: str
    device: str
    kind: str
    base_status: str | None  # None: the benchmark is absent on that side
    new_status: str | None
    samples_key: str | None
    decision: Decision | None
    runtime: str = HALBENCH  # the candidate's (the same on both sides unless runtimes are compared)
    across_runtimes: bool = False

    @property
    def verdict(self) -> str:
        if self.decision is not None:
            return self.decision.verdict
        if self.base_status is None:
            return "added"
        if self.new_status is None:
            return "unmatched" if self.across_runtimes else "removed"
        return f"{self.base_status}->{self.new_status}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "device": self.device, "runtime": self.runtime, "kind": self.kind,
                "base_status": self.base_status, "new_status": self.new_status,
                "samples": self.samples_key, "verdict": self.verdict,
                "decision": self.decision.to_dict() if self.decision else None}


def compare_results(base: dict[str, Any], new: dict[str, Any],
                    settings: GateSettings | None = None, sides: Sides | None = None) -> list[Row]:
    """One Row per (benchmark, device, runtime) on either side, in the order base lists them.

    ``sides``: which entries meet (:func:`halbench.reports.runtimes.match`); by default each
    entry meets the one of its own name, device and runtime.
    """
    settings = settings or GateSettings()
    sides = sides or match(base, new)
    b_idx, n_idx = sides.base, sides.new
    timed = {k: (b_idx[k], n_idx[k], settings.limits_for(k[0], k[1])) for k in sides.common
             if b_idx[k]["status"] == n_idx[k]["status"] == "ok"}
    judged = decide_entries(timed, device_shift=not sides.across_runtimes)
    rows = []
    for key in sides.keys:
        b, n = b_idx.get(key), n_idx.get(key)
        skey, decision = judged.get(key, (None, None))
        rows.append(Row(key[0], key[1], (b or n)["kind"], b["status"] if b else None,
                        n["status"] if n else None, skey, decision, key[2], sides.across_runtimes))
    return rows


def fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.3f}"
    return f"{ms:.4f}"


def fmt_change(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:+.1%}"


def fmt_bounds(d: Decision) -> str:
    """The change's (1 - alpha) lower and (1 - beta) upper bound, or '-' without a ratio."""
    if d.low is None or d.high is None:
        return "-"
    return f"{d.low:+.0%}..{d.high:+.0%}"


def _cells(row: Row, runtime: bool) -> list[str]:
    d = row.decision
    where = [row.name, row.device] + ([row.runtime] if runtime else [])
    if d is None:
        return where + ["-", "-", "-", "-", "-", row.verdict]
    p = f"p={d.p_value:.2g}" if d.p_value is not None else "CI"
    return where + [fmt_ms(d.base_ms), fmt_ms(d.new_ms), fmt_change(d.change), fmt_bounds(d), p,
                    row.verdict]


HEADER = ["benchmark", "device", "base ms", "new ms", "change", "bounds", "test", "verdict"]
LEGEND = ("verdicts are the gate's: slower = REGRESSION (surely slower than the allowance), "
          "same = PASS, inconclusive = the noise could hide a slowdown beyond the allowance; "
          "bounds: the change's 99% lower / 95% upper bound; test: one-sided Mann-Whitney U on "
          "the samples (CI: confidence intervals, below 5 samples)")


def strict_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def render(rows: list[Row], fmt: str = "text", *, base_label: str = "base",
           new_label: str = "new", settings: GateSettings | None = None,
           warnings: list[str] | None = None) -> str:
    """Render rows as an aligned terminal table, a Markdown table, or strict JSON."""
    warnings = warnings or []
    if fmt == "json":
        doc = {"base": base_label, "new": new_label, "warnings": warnings,
               "settings": (settings or GateSettings()).to_dict(),
               "rows": [r.to_dict() for r in rows]}
        return json.dumps(strict_json(doc), indent=2, allow_nan=False)
    # A runtime column only where a peer's entries are listed: halbench-only tables stay as they were.
    runtime = any(r.runtime != HALBENCH for r in rows)
    header = HEADER[:2] + ["runtime"] * runtime + HEADER[2:]
    table = [header] + [_cells(r, runtime) for r in rows]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    if fmt == "markdown":
        lines = [f"**{base_label}** → **{new_label}**: {summary}", ""]
        lines += [f"> ⚠️ warning: {w}" for w in warnings] + ([""] if warnings else [])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in table[1:]]
        lines += ["", LEGEND + "."]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    right = {i + runtime for i in (2, 3, 4, 5)}
    out = [f"{base_label} -> {new_label}"]
    for cells in table:
        out.append("  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    out.append(summary)
    out.append(LEGEND)
    out += [f"warning: {w}" for w in warnings]
    return "\n".join(out)
