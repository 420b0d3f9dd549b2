"""Static charts for the HTML report: matplotlib figures as inline SVG strings.

Text stays text (svg.fonttype 'none') so a chart is a few tens of KB, and each chart gets its
own id salt so several SVGs in one page never share clip-path ids.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Ceiling", "Series", "latency_chart", "roofline_chart", "runtime_chart"]

PALETTE = ["#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2",
           "#97bbf5", "#9c6b4e", "#9498a0"]


@dataclass(frozen=True)
class Series:
    """One column of the latency chart: (label, [(model, median, p10, p90) or None per model])."""

    label: str
    points: Sequence[tuple[float, float, float] | None]


@dataclass(frozen=True)
class Ceiling:
    label: str
    gflop_s: float | None = None  # a compute roof
    gb_s: float | None = None  # a bandwidth slope
    measured: bool = True


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # no display, ever: reports render on CI machines
    import matplotlib.pyplot as plt

    return matplotlib, plt


def _svg(fig, salt: str) -> str:
    matplotlib, plt = _plt()
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: inline SVG needs neither
    # The RDF metadata names external vocabularies (purl.org, creativecommons.org); drop it.
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.DOTALL)
    # Scale with the page instead of a fixed size in points.
    return re.sub(r'<svg([^>]*?) width="[\d.]+pt" height="[\d.]+pt"',
                  r'<svg\1 class="chart" preserveAspectRatio="xMinYMin meet"', text, count=1)


def _plain_log_axis(axis, lo: float, hi: float) -> None:
    """Log-scale ticks as plain decimals (0.2, 0.5, 1, 2, 5), never 3×10⁻¹: majors at 1-2-5 of
    each decade (only 1s when the range spans many decades, so labels never overlap), minors
    unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from halbench.reports.units import fmt_tick

    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    subs = (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0, 3.0) if decades <= 4 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt_tick(v)))
    axis.set_minor_locator(LogLocator(base=10, subs=[s for s in range(2, 10) if s not in subs]))
    axis.set_minor_formatter(NullFormatter())


def _style(ax) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(True, which="major", color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)


def latency_chart(models: Sequence[str], series: Sequence[Series], salt: str = "latency") -> str:
    """A dot plot: one row per model, a dot per column at the median, a bar for p10-p90."""
    _, plt = _plt()
    n = len(models)
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.32 * n * max(1, len(series)) ** 0.5))
    step = 0.7 / max(1, len(series))
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        ys, meds, lo, hi = [], [], [], []
        for j, p in enumerate(s.points):
            if p is None:
                continue
            y = j + (i - (len(series) - 1) / 2) * step
            ys.append(y)
            meds.append(p[0])
            lo.append(p[0] - p[1])
            hi.append(p[2] - p[0])
        ax.errorbar(meds, ys, xerr=[lo, hi], fmt="o", color=color, markersize=4, elinewidth=1.4,
                    capsize=0, label=s.label)
    ax.set_yticks(range(n), models)
    ax.invert_yaxis()
    ax.set_xscale("log")
    lows = [p[1] for s in series for p in s.points if p]
    highs = [p[2] for s in series for p in s.points if p]
    if lows and highs and min(lows) > 0:
        # A little room either side; the axis ends at whole ticks' neighbours, not mid-label.
        ax.set_xlim(min(lows) / 1.25, max(highs) * 1.25)
        _plain_log_axis(ax.xaxis, min(lows) / 1.25, max(highs) * 1.25)
    ax.set_xlabel("latency per run, ms (median, bar p10-p90; log scale)")
    _style(ax)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / (n + 2)), ncol=min(3, len(series)),
              frameon=False, fontsize=8)
    return _svg(fig, salt)


def roofline_chart(title: str, points: dict[str, list[tuple[float, float]]],
                   ceilings: Sequence[Ceiling], salt: str,
                   flagged: Sequence[tuple[float, float]] = ()) -> str:
    """Achieved GFLOP/s against arithmetic intensity (flop/byte), log-log, under the roofs.

    ``points``: label (a model) -> [(intensity, GFLOP/s)] of its dispatches. ``flagged``: points
    above the measured ceiling, ringed in red.
    """
    _, plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    xs = [x for pts in points.values() for x, _ in pts]
    ys = [y for pts in points.values() for _, y in pts]
    x_lo = min(xs + [0.1]) / 2
    x_hi = max(xs + [100.0]) * 2
    roofs = [c for c in ceilings if c.gflop_s]
    slopes = [c for c in ceilings if c.gb_s]
    # Extend the x range to show where the best slope meets the best roof (the ridge point).
    if roofs and slopes:
        ridge = max(c.gflop_s for c in roofs) / max(c.gb_s for c in slopes)
        x_hi = max(x_hi, ridge * 4)
        x_lo = min(x_lo, ridge / 1000)
    grid = [x_lo * (x_hi / x_lo) ** (k / 200) for k in range(201)]
    top_roof = max((c.gflop_s for c in roofs), default=math.inf)
    for c in slopes:
        style = "-" if c.measured else "--"
        ax.plot(grid, [min(c.gb_s * x, top_roof) for x in grid], style, color="#333" if c.measured
                else "#999", linewidth=1.2)
        # Measured labels sit above their line, published ones below, so close figures never overlap.
        at = grid[8] if c.measured else grid[40]
        ax.annotate(f"{c.label}: {c.gb_s:,.0f} GB/s", (at, c.gb_s * at), fontsize=7,
                    xytext=(2, 6) if c.measured else (6, -10), textcoords="offset points",
                    color="#333" if c.measured else "#777")
    best_slope = max((c.gb_s for c in slopes), default=None)
    y_top = max(ys + [c.gflop_s for c in roofs] + [1.0]) * 3
    y_bot = min(ys + [y_top / 1e5]) / 3
    # Roof labels sit right of the plot, each at least a text line above the one below, so close
    # roofs (fma/f16 beside fma/f32, measured beside published) never print over each other or
    # over a line.
    per_decade = 250.0 / max(math.log10(y_top / y_bot), 1.0)  # points per decade of the y axis
    last = -math.inf
    for c in sorted(roofs, key=lambda c: c.gflop_s):
        start = c.gflop_s / best_slope if best_slope else x_lo
        style = "-" if c.measured else "--"
        ax.plot([start, x_hi], [c.gflop_s, c.gflop_s], style, color="#333" if c.measured else "#999",
                linewidth=1.2)
        natural = math.log10(c.gflop_s) * per_decade
        placed = max(natural, last + 8.5)
        last = placed
        ax.annotate(f"{'published ' if not c.measured and not c.label.startswith('published') else ''}"
                    f"{c.label}: {c.gflop_s:,.0f} GFLOP/s", (x_hi, c.gflop_s), fontsize=7, ha="left",
                    va="center", xytext=(4, placed - natural), textcoords="offset points",
                    annotation_clip=False, color="#333" if c.measured else "#777")
    for i, (label, pts) in enumerate(points.items()):
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, alpha=0.75,
                       color=PALETTE[i % len(PALETTE)], label=label, linewidths=0)
    if flagged:
        ax.scatter([p[0] for p in flagged], [p[1] for p in flagged], s=60, facecolors="none",
                   edgecolors="#cf222e", linewidths=1.2,
                   label=f"above the measured ceiling ({len(flagged)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_bot, y_top)
    ax.set_xlabel("arithmetic intensity, FLOP/byte")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(title, fontsize=10, loc="left")
    _style(ax)
    _plain_log_axis(ax.xaxis, x_lo, x_hi)
    _plain_log_axis(ax.yaxis, y_bot, y_top)
    if points:
        ax.legend(fontsize=7, frameon=False, loc="lower right", markerscale=1.5)
    return _svg(fig, salt)


def runtime_chart(title: str, models: Sequence[str], runtimes: Sequence[str],
                  values: Sequence[Sequence[tuple[float, float] | None]],
                  colors: dict[str, str], salt: str) -> str:
    """Grouped bars: per model, one bar per runtime as long as its time relative to the fastest
    runtime of that model (1 = fastest), labelled with the median and the ratio.

    ``values[model][runtime]``: (median ms, ratio) or None where that runtime has no time.
    """
    _, plt = _plt()
    k = max(1, len(runtimes))
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.24 * len(models) * k))
    step = 0.8 / k
    top = max((v[1] for row in values for v in row if v), default=1.0)
    for i, runtime in enumerate(runtimes):
        ys, ratios, labels = [], [], []
        for j, row in enumerate(values):
            v = row[i]
            y = j + (i - (k - 1) / 2) * step
            if v is None:
                ax.text(0.02 * top, y, "no time", va="center", fontsize=7, color="#999")
                continue
            ys.append(y)
            ratios.append(v[1])
            labels.append(f"{_ms(v[0])} ms · {v[1]:.2f}×")
        bars = ax.barh(ys, ratios, height=step * 0.9, color=colors[runtime], label=runtime)
        for bar, text in zip(bars, labels):
            ax.text(bar.get_width() + 0.01 * top, bar.get_y() + bar.get_height() / 2, text,
                    va="center", fontsize=7, color="#333")
    ax.axvline(1.0, color="#333", linewidth=0.8)
    ax.set_xlim(0, top * 1.3)
    ax.set_yticks(range(len(models)), models)
    ax.invert_yaxis()
    ax.set_xlabel("time per run relative to the fastest runtime of the model (1× = fastest)")
    ax.set_title(title, fontsize=10, loc="left")
    _style(ax)
    ax.grid(False, axis="y")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / (len(models) + 1) - 0.1),
              ncol=min(4, k), frameon=False, fontsize=8)
    return _svg(fig, salt)


def _ms(value: float) -> str:
    return f"{value:,.1f}" if value >= 100 else f"{value:.3g}"
