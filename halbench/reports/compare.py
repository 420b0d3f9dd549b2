"""``halbench compare BASE NEW``: what changed between two results files, with significance.

Informational: benchmarks present on one side only are listed, not fatal (the gate is strict).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from halbench.bench.stats import Comparison, compare_samples

__all__ = ["Row", "compare_results", "fmt_ms", "render", "timing_samples"]


def timing_samples(bench: dict[str, Any]) -> tuple[str, list[float]]:
    """The samples to judge a benchmark by: device time when stored, else host wall time."""
    samples = bench.get("samples") or {}
    if samples.get("device_ms"):
        return "device_ms", list(samples["device_ms"])
    return "host_ms", list(samples.get("host_ms") or [])


@dataclass(frozen=True)
class Row:
    name: str
    device: str
    kind: str
    base_status: str | None  # None: the benchmark is absent on that side
    new_status: str | None
    samples_key: str | None
    comparison: Comparison | None

    @property
    def verdict(self) -> str:
        if self.comparison is not None:
            return self.comparison.verdict
        if self.base_status is None:
            return "added"
        if self.new_status is None:
            return "removed"
        return f"{self.base_status}->{self.new_status}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "device": self.device, "kind": self.kind,
                "base_status": self.base_status, "new_status": self.new_status,
                "samples": self.samples_key, "verdict": self.verdict,
                "comparison": self.comparison.to_dict() if self.comparison else None}


def _index(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(b["name"], b["device"]): b for b in doc["benchmarks"]}


def compare_results(base: dict[str, Any], new: dict[str, Any], *, alpha: float = 0.01,
                    min_change: float = 0.01) -> list[Row]:
    """One Row per (benchmark, device) on either side, in the order base lists them."""
    b_idx, n_idx = _index(base), _index(new)
    keys = list(b_idx) + [k for k in n_idx if k not in b_idx]
    rows = []
    for key in keys:
        b, n = b_idx.get(key), n_idx.get(key)
        comparison, skey = None, None
        if b and n and b["status"] == "ok" and n["status"] == "ok":
            bkey, bs = timing_samples(b)
            nkey, ns = timing_samples(n)
            if bkey != nkey:  # never compare device time against host time
                bkey, bs = "host_ms", list(b["samples"].get("host_ms") or [])
                nkey, ns = "host_ms", list(n["samples"].get("host_ms") or [])
            if bs and ns:
                skey = bkey
                comparison = compare_samples(bs, ns, alpha=alpha, min_change=min_change)
        kind = (b or n)["kind"]
        rows.append(Row(key[0], key[1], kind, b["status"] if b else None,
                        n["status"] if n else None, skey, comparison))
    return rows


def fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.3f}"
    return f"{ms:.4f}"


def _cells(row: Row) -> list[str]:
    c = row.comparison
    if c is None:
        return [row.name, row.device, "-", "-", "-", "-", row.verdict]
    p = f"p={c.p_value:.2g}" if c.p_value is not None else "CI"
    sig = ("*" if c.significant else "") + p
    return [row.name, row.device, fmt_ms(c.base.median), fmt_ms(c.new.median), f"{c.change:+.1%}",
            sig, c.verdict]


HEADER = ["benchmark", "device", "base ms", "new ms", "change", "significance", "verdict"]


def render(rows: list[Row], fmt: str = "text", *, base_label: str = "base",
           new_label: str = "new") -> str:
    """Render rows as an aligned terminal table, a Markdown table, or JSON."""
    if fmt == "json":
        return json.dumps({"base": base_label, "new": new_label,
                           "rows": [r.to_dict() for r in rows]}, indent=2)
    table = [HEADER] + [_cells(r) for r in rows]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    if fmt == "markdown":
        lines = [f"**{base_label}** → **{new_label}**: {summary}", "",
                 "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in table[1:]]
        lines += ["", ("`*`: significant (Mann-Whitney U, two-sided, alpha 0.01; confidence "
                  "intervals below 5 samples).")]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    right = {2, 3, 4}
    out = [f"{base_label} -> {new_label}"]
    for cells in table:
        out.append("  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    out.append(f"{summary}  (* significant at alpha 0.01)")
    return "\n".join(out)
