"""The one place the reports format quantities: times, bytes, rates and dispatch names.

Every table and chart of the HTML report goes through these, so a page never shows 32768 raw
bytes beside "2 GiB", or TFLOP/s in one row of a table and GFLOP/s in the next.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["FLOP_PREFIXES", "dispatch_label", "fmt_bytes", "fmt_ms", "fmt_num", "fmt_rate",
           "fmt_tick", "rate_prefix"]

#: FLOP-rate prefixes, as multiples of GFLOP/s.
FLOP_PREFIXES = (("G", 1.0), ("T", 1e3), ("P", 1e6))
_BYTE_UNITS = (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10))


def fmt_ms(value: float | None) -> str:
    """Milliseconds, plain decimals (never an exponent): 1,234.5 / 12.35 / 0.291 / 0.0019."""
    if value is None or not math.isfinite(value):
        return "–"
    if value >= 100:
        return f"{value:,.1f}"
    if value >= 1:
        return f"{value:.2f}"
    if value >= 0.01:
        return f"{value:.3f}"
    return f"{value:.4f}"


def fmt_num(value: float | None, digits: int = 3) -> str:
    """A plain number in ``digits`` significant digits with thousands separators, no exponent."""
    if value is None or not math.isfinite(value):
        return "–"
    if value == 0:
        return "0"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def fmt_bytes(n: float | None) -> str:
    """Binary units throughout: 512 B, 32 KiB, 16 MiB, 2 GiB (3 significant digits at most)."""
    if n is None:
        return "–"
    for unit, scale in _BYTE_UNITS:
        if n >= scale:
            return f"{fmt_num(n / scale)} {unit}"
    return f"{n:,.0f} B"


def rate_prefix(gflop_s: Iterable[float | None]) -> tuple[str, float]:
    """The one FLOP-rate prefix for a table: the one that puts the most values between 1 and
    1,000 (on a tie, the smaller): lavapipe's 40.8 GFLOP/s beside an H100's 28.5, 61.2 and 666
    TFLOP/s reads 0.0408 TFLOP/s, never GFLOP/s in one row and TFLOP/s in the next."""
    values = [v for v in gflop_s if v]
    if not values:
        return FLOP_PREFIXES[0]
    return max(FLOP_PREFIXES, key=lambda p: (sum(1 <= v / p[1] < 1000 for v in values), -p[1]))


def fmt_rate(gflop_s: float | None, prefix: tuple[str, float] | None = None) -> str:
    """A FLOP rate in the table's prefix (``rate_prefix``), else its own."""
    if gflop_s is None:
        return "–"
    name, scale = prefix or rate_prefix([gflop_s])
    return f"{fmt_num(gflop_s / scale)} {name}FLOP/s"


def fmt_tick(ms: float) -> str:
    """An axis tick in ms: 0.2, 0.5, 1, 2, 10, 1,000 (no exponent, no trailing zeros)."""
    if ms >= 1:
        return f"{ms:,.0f}" if ms >= 10 or ms == int(ms) else f"{ms:g}"
    return f"{ms:.6f}".rstrip("0").rstrip(".")


def dispatch_label(name: str, nodes: Sequence[str] | None, most: int = 3) -> str:
    """A dispatch named by the ONNX nodes it computes: ``conv+elementwise · conv_Conv, relu_Relu``;
    past ``most`` nodes, the first ones and a count. Without recorded nodes, the kind alone."""
    nodes = [n for n in nodes or () if n]
    if not nodes:
        return name
    shown = ", ".join(nodes[:most]) + (f" … +{len(nodes) - most} more" if len(nodes) > most else "")
    return f"{name} · {shown}"
