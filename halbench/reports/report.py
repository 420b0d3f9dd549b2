"""``halbench report RESULTS... -o report.html``: one self-contained HTML file from stored results.

The page opens offline and in CI artifact viewers: CSS, the table-sorting script and the charts
(matplotlib SVG) are inline; nothing is fetched. The data preparation lives in
:mod:`halbench.reports.report_data`; this module draws the charts and fills the template.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from halbench import __version__
from halbench.bench.results import read_results
from halbench.reports import charts
from halbench.reports.report_data import build_context
from halbench.reports.units import fmt_ms, fmt_num

__all__ = ["render_report", "write_report"]


def _charts(ctx: dict[str, Any]) -> None:
    models = ctx["models"]
    series = [charts.Series(col["label"], [
        (c["median"], c["p10"], c["p90"]) if c.get("median") is not None and c["median"] > 0 else None
        for c in (row["cells"][i] for row in models["rows"])])
        for i, col in enumerate(models["columns"])]
    # A run where every model failed has no latency to draw (log scale needs positive values).
    if any(p is not None for s in series for p in s.points):
        ctx["latency_svg"] = charts.latency_chart([r["name"] for r in models["rows"]], series)
    else:
        ctx["latency_svg"] = ""
    runtimes = ctx["runtimes"]["runtimes"]
    colors = {r: charts.PALETTE[i % len(charts.PALETTE)] for i, r in enumerate(runtimes)}
    for i, chart in enumerate(ctx["runtimes"]["charts"]):
        values = [[(c["median"], c["ratio"]) if c["ratio"] is not None else None for c in row["cells"]]
                  for row in chart["rows"]]
        chart["svg"] = charts.runtime_chart(chart["title"], [r["name"] for r in chart["rows"]],
                                            chart["runtimes"], values, colors, salt=f"runtimes{i}")
    for i, roof in enumerate(ctx["rooflines"]):
        ceilings = [charts.Ceiling(**c) for c in roof["ceilings"]]
        flagged = [(a["x"], a["y"]) for a in roof["above"]]
        roof["svg"] = charts.roofline_chart(roof["title"], roof["points"], ceilings, salt=f"roof{i}",
                                            flagged=flagged)


def render_report(paths: list[str | os.PathLike]) -> str:
    """Read the results files and return the report's HTML."""
    import jinja2
    from markupsafe import Markup

    docs = [(Path(p), read_results(p)) for p in paths]
    ctx = build_context(docs)
    _charts(ctx)
    ctx["latency_svg"] = Markup(ctx["latency_svg"])  # our own matplotlib output, not user text
    for item in ctx["rooflines"] + ctx["runtimes"]["charts"]:
        item["svg"] = Markup(item["svg"])
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("halbench.reports", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["ms"] = fmt_ms
    env.filters["num"] = fmt_num
    return env.get_template("report.html.j2").render(**ctx, halbench_version=__version__)


def write_report(paths: list[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Render and write atomically (a half-written report in a CI artifact helps nobody)."""
    html = render_report(paths)
    from halbench.files import atomic_write

    return atomic_write(out, html, "report")
