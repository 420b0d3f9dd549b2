"""The one decision behind ``compare`` and ``gate``: faster, same, slower or inconclusive.

Both commands call :func:`decide_all` with the same samples and the same limits, so a table row
and a CI verdict cannot disagree. The rule, per benchmark (lower times are better):

1. Centre: each side's median of its repetition medians (``samples.blocks``; a run without
   repetitions is one repetition). The change is ``new / base - 1``, judged as a log ratio.
2. Allowance: the slowdown that is acceptable, ``max(threshold, noise_floor_ms / base)``.
3. Noise: the standard error of the log ratio. With at least 2 repetitions a side it comes from
   how much repetition medians differ -- the median pairwise difference within a side, pooled over
   both sides, so one outlier repetition cannot widen it -- taking the larger of this benchmark's
   spread and its device's (the median spread of the device's benchmarks in the same two runs:
   three repetitions can agree by luck on a machine whose load changes, and the other benchmarks
   show that). It is never less than the samples' own scatter allows. Without repetitions only
   the samples are there, and the noise between runs is not measured.
4. Device move: from 4 benchmarks of a device on (MIN_SHIFT_GROUP), the median change of the
   device's benchmarks between the same two runs. A machine whose load or clocks changed between
   the runs moves them all; so does a change that slows everything alike, and one pair of runs
   cannot tell those apart. A change counts as the code's only as far as it also stands out from
   its device's move: ``up = min(change, change - move)`` and ``down = max(change, change - move)``.
5. Bounds: ``low = up - t(1-alpha)*se`` and ``high = down + t(1-beta)*se`` (Student t, degrees
   of freedom: repetitions, else samples, minus 2).
6. Verdict:
   - ``slower`` (the gate's REGRESSION), all of: ``low > allowance``; the candidate's fastest
     repetition slower than the baseline's slowest by more than the allowance and by more than
     either side's repetitions stray towards the other (a repetition that strays towards the other
     side shows how far the machine alone moves this benchmark; one that strays away, like one
     slow repetition of a slow candidate, is ignored); and the samples agree (one-sided
     Mann-Whitney U p < alpha; below 5 samples a side, confidence intervals that do not overlap);
   - ``faster``: the mirror image (``down + t(1-alpha)*se < -allowance``, ...);
   - ``same`` (PASS): ``high <= allowance``: no slowdown beyond the allowance hides in the noise;
   - ``inconclusive``: anything else. The reason says why: what slowdown the noise could hide and
     about how many repetitions per side would detect one of the allowance's size; or that the
     repetitions, or the whole device, moved as much as the change.

A zero median (below the timer's resolution) has no ratio: then milliseconds are compared with
the noise floor, and the change is ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from halbench.bench.stats import (
    MIN_SAMPLES_FOR_TEST,
    Stats,
    log_centre_se,
    mann_whitney,
    repetition_medians,
    repetition_sd,
)

__all__ = [
    "ALPHA",
    "BETA",
    "DEFAULT_THRESHOLD",
    "MIN_SHIFT_GROUP",
    "VERDICTS",
    "Decision",
    "Limits",
    "Pair",
    "decide",
    "decide_all",
]

#: False-alarm rate of ``slower`` and ``faster``, one-sided, per benchmark.
ALPHA = 0.01
#: Miss rate of ``same``: a slowdown of the allowance's size reads ``same`` at most this often.
BETA = 0.05
DEFAULT_THRESHOLD = 0.05
VERDICTS = ("faster", "same", "slower", "inconclusive")
#: Benchmarks of one device (in the same two runs) needed to read a move of the whole device.
MIN_SHIFT_GROUP = 4
_MAX_NEEDED = 1000  # above this, "repetitions needed" reads "more than"
_MEDIAN_SE = math.sqrt(math.pi / 2)


@dataclass(frozen=True)
class Limits:
    """What one benchmark may lose before it counts: relative threshold, absolute noise floor."""

    threshold: float = DEFAULT_THRESHOLD
    noise_floor_ms: float = 0.0
    alpha: float = ALPHA


@dataclass(frozen=True)
class Pair:
    """One benchmark's samples on both sides; ``group`` (its device) shares its noise level."""

    base: Sequence[float]
    new: Sequence[float]
    limits: Limits = field(default_factory=Limits)
    base_blocks: Sequence[int] | None = None
    new_blocks: Sequence[int] | None = None
    group: str = ""


@dataclass(frozen=True)
class Decision:
    """The verdict on one benchmark and the numbers behind it (ms; changes as fractions)."""

    verdict: str  # faster | same | slower | inconclusive
    base_ms: float  # centre: median of repetition medians
    new_ms: float
    change: float | None  # new / base - 1; None when the baseline's median is 0
    delta_ms: float
    low: float | None  # the change's one-sided (1 - alpha) lower bound
    high: float | None  # its (1 - beta) upper bound: the largest slowdown that could hide
    allowance: float | None  # max(threshold, noise_floor_ms / base_ms); None without a ratio
    noise: float | None  # standard error of log(new / base)
    noise_source: str  # "repetitions" | "samples"
    repetition_sd: float | None  # sd of this benchmark's log repetition medians (robust)
    device_repetition_sd: float | None  # the median of that over its device's benchmarks
    device_shift: float | None  # the median change of its device's benchmarks; None: too few
    repetitions: tuple[int, int]  # (base, new)
    samples: tuple[int, int]
    method: str  # "mann-whitney" | "ci-overlap": the sample-level test
    p_value: float | None  # one-sided, in the direction of the change; None: intervals decided
    needed: int | None  # repetitions (samples, without repetitions) per side to see the allowance
    reason: str
    limits: Limits

    @property
    def passed(self) -> bool:
        return self.verdict in ("faster", "same")

    def to_dict(self) -> dict[str, object]:
        """Plain JSON values only: a number that does not exist is None, never NaN or Infinity."""
        d = asdict(self)
        d["repetitions"], d["samples"] = list(self.repetitions), list(self.samples)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in d.items()}


def decide_all(pairs: Sequence[Pair], *, beta: float = BETA, device_shift: bool = True
               ) -> list[Decision]:
    """Judge every pair with what its group (device) shows in the same two runs: the median
    repetition spread (a floor on each benchmark's own) and, from MIN_SHIFT_GROUP benchmarks
    on, the median change (a move of the whole device, which one pair of runs cannot pin on the
    code). ``device_shift=False`` leaves the move out: between two runtimes of one run the
    median change is the runtimes' gap, which is what is judged."""
    spreads: dict[str, list[float]] = {}
    moves: dict[str, list[float]] = {}
    for p in pairs:
        bm, nm = repetition_medians(p.base, p.base_blocks), repetition_medians(p.new, p.new_blocks)
        if min(bm + nm) <= 0:
            continue
        moves.setdefault(p.group, []).append(math.log(float(np.median(nm)) / float(np.median(bm))))
        if len(bm) >= 2 and len(nm) >= 2:
            spreads.setdefault(p.group, []).append(repetition_sd(bm, nm))
    level = {g: float(np.median(v)) for g, v in spreads.items()}
    shift = {g: float(np.median(v)) for g, v in moves.items()
             if device_shift and len(v) >= MIN_SHIFT_GROUP}
    return [decide(p.base, p.new, p.limits, base_blocks=p.base_blocks, new_blocks=p.new_blocks,
                   beta=beta, device_repetition_sd=level.get(p.group),
                   device_shift=shift.get(p.group)) for p in pairs]


def decide(base: Sequence[float], new: Sequence[float], limits: Limits = Limits(), *,
           base_blocks: Sequence[int] | None = None, new_blocks: Sequence[int] | None = None,
           beta: float = BETA, device_repetition_sd: float | None = None,
           device_shift: float | None = None) -> Decision:
    """Judge ``new`` against ``base`` (timings, lower is better); see the module docstring.

    From :func:`decide_all`: ``device_repetition_sd`` is the device's noise level, a floor on
    this benchmark's own repetition spread; ``device_shift`` the median log change of the
    device's benchmarks, which a change must exceed to be the code's.
    """
    if not len(base) or not len(new):
        raise ValueError("decide needs at least one sample on each side")
    bm, nm = repetition_medians(base, base_blocks), repetition_medians(new, new_blocks)
    b0, n0 = float(np.median(bm)), float(np.median(nm))
    common = {"base_ms": b0, "new_ms": n0, "delta_ms": n0 - b0, "repetitions": (len(bm), len(nm)),
              "samples": (len(base), len(new)), "limits": limits}
    if min(bm + nm) <= 0:
        return _decide_absolute(base, new, common)
    # A few samples of 0 ms (below the timer's resolution) have no logarithm: for the noise
    # estimate only, they count as the smallest positive sample.
    tiny = min(x for x in (*base, *new) if x > 0)
    base = [max(x, tiny) for x in base]
    new = [max(x, tiny) for x in new]
    return _decide_ratio(base, new, bm, nm, common, beta, device_repetition_sd, device_shift,
                         base_blocks if len(bm) > 1 else None, new_blocks if len(nm) > 1 else None)


def _sample_test(base: Sequence[float], new: Sequence[float], alpha: float, slower: bool
                 ) -> tuple[str, float | None, bool]:
    """(method, one-sided p or None, significant) for "new is slower" (or faster)."""
    if min(len(base), len(new)) >= MIN_SAMPLES_FOR_TEST:
        p = mann_whitney(list(base), list(new), "greater" if slower else "less")
        return "mann-whitney", p, p < alpha
    level = 1 - 2 * alpha  # each interval leaves alpha out on the side that matters
    (blo, bhi), (nlo, nhi) = Stats(base).ci_median(level), Stats(new).ci_median(level)
    return "ci-overlap", None, (nlo > bhi) if slower else (nhi < blo)


def _noise(base, new, bm, nm, bblocks, nblocks, device_sd: float | None
           ) -> tuple[float, dict[str, object], tuple[int, int]]:
    """(se of the log ratio, its description for the Decision, units per side)."""
    se_samples = math.hypot(log_centre_se(base, bblocks), log_centre_se(new, nblocks))
    if len(bm) < 2 or len(nm) < 2:
        return se_samples, {"noise_source": "samples", "repetition_sd": None,
                            "device_repetition_sd": None}, (len(base), len(new))
    own = repetition_sd(bm, nm)
    spread = max(own, device_sd or 0.0)
    se = max(_MEDIAN_SE * spread * math.sqrt(1 / len(bm) + 1 / len(nm)), se_samples)
    return se, {"noise_source": "repetitions", "repetition_sd": own,
                "device_repetition_sd": device_sd}, (len(bm), len(nm))


def _gap(bm: list[float], nm: list[float], b0: float, n0: float, slower: bool) -> tuple[float, float]:
    """(how far apart the closest repetitions of the two sides are, in the change's direction;
    how far either side's repetitions stray towards the other), as log ratios."""
    if not slower:
        return _gap(nm, bm, n0, b0, True)
    return math.log(min(nm) / max(bm)), max(math.log(n0 / min(nm)), math.log(max(bm) / b0))


def _decide_ratio(base, new, bm, nm, common, beta, device_sd, device_shift, bblocks, nblocks
                  ) -> Decision:
    lim: Limits = common["limits"]
    b0, n0 = common["base_ms"], common["new_ms"]
    change, d = n0 / b0 - 1, math.log(n0 / b0)
    allowance = max(lim.threshold, lim.noise_floor_ms / b0)
    tau = math.log1p(allowance)
    se, described, units = _noise(base, new, bm, nm, bblocks, nblocks, device_sd)
    repeated = described["noise_source"] == "repetitions"
    # A change counts for the code only as far as it also stands out from its device's move.
    up, down = min(d, d - (device_shift or 0.0)), max(d, d - (device_shift or 0.0))
    numbers = {"change": change, "allowance": allowance, "noise": se, **described,
               "device_shift": None if device_shift is None else math.expm1(device_shift)}
    df = units[0] + units[1] - 2
    if df < 1:
        return Decision("inconclusive", low=None, high=None, method="none", p_value=None,
                        needed=None, reason="one sample on each side: no estimate of the noise",
                        **numbers, **common)
    from scipy import stats as st

    q_alpha, q_beta = float(st.t.ppf(1 - lim.alpha, df)), float(st.t.ppf(1 - beta, df))
    method, p, significant = _sample_test(base, new, lim.alpha, slower=d >= 0)
    gap, stray = _gap(bm, nm, b0, n0, d >= 0) if repeated else (abs(d), 0.0)
    clear = gap > max(tau, stray)  # the repetitions separate by more than the machine moves them
    needed = _needed(se, units, tau, lim.alpha, beta)
    low, high = math.expm1(up - q_alpha * se), math.expm1(down + q_beta * se)
    what = f"{change:+.1%}"
    allow = f"+{allowance:.1%}" + (" (noise floor)" if allowance > lim.threshold else "")
    hides = (f"the noise could hide a slowdown up to {high:+.1%} > {allow}; "
             f"{_needed_text(needed, 'repetitions' if repeated else 'samples')}")
    moved = f"the device's benchmarks moved {math.expm1(device_shift or 0):+.1%} together"
    if up - q_alpha * se > tau and significant and clear:
        verdict, reason = "slower", f"slower {what}: surely more than {allow} (at least {low:+.1%})"
    elif down + q_alpha * se < -tau and significant and clear:
        verdict, reason = "faster", f"faster {what}: surely faster than -{allowance:.1%}"
    elif down + q_beta * se <= tau:
        verdict, reason = "same", f"{what}: no slowdown beyond {allow} (at most {high:+.1%})"
        if repeated and max(nm) / b0 - 1 > allowance:
            reason += (f"; the slowest candidate repetition was {max(nm) / b0 - 1:+.0%}, an "
                       f"outlier next to the others")
    elif d - q_alpha * se > tau and significant and clear:
        verdict = "inconclusive"
        reason = (f"slower {what}, but {moved} between the two runs: a change of the machine, or "
                  f"one that slows everything alike, which one pair of runs cannot tell apart; "
                  f"{_needed_text(None, 'repetitions')}")
    elif d - q_alpha * se > tau and significant:
        verdict = "inconclusive"
        reason = (f"slower {what}, but the repetitions do not separate by more than the machine "
                  f"moves them ({_ms(bm)} -> {_ms(nm)} ms): the machine may have changed, not "
                  f"the code; {_needed_text(None, 'repetitions')}")
    elif d + q_beta * se <= tau:
        verdict = "inconclusive"
        reason = f"{what}, but {moved}: a slowdown up to {high:+.1%} could hide under a faster machine"
    elif d - q_alpha * se > 0 and significant:
        verdict, reason = "inconclusive", f"slower {what} (significant), but {hides}"
    else:
        verdict, reason = "inconclusive", f"{what}, but {hides}"
    reason += f" [{_noise_text(se, described)}]"
    return Decision(verdict, low=low, high=high, method=method, p_value=p, needed=needed,
                    reason=reason, **numbers, **common)


def _ms(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def _needed(se: float, units: tuple[int, int], tau: float, alpha: float, beta: float) -> int:
    """Units (repetitions, or samples) per side for a test at alpha to see a slowdown of tau with
    power 1 - beta, at the noise measured."""
    from scipy import stats as st

    z = float(st.norm.ppf(1 - alpha) + st.norm.ppf(1 - beta))
    kb, kn = units
    unit_var = se ** 2 * kb * kn / (kb + kn)  # the variance of one repetition (or sample)
    return max(2, math.ceil(2 * unit_var * (z / tau) ** 2))


def _needed_text(needed: int | None, unit: str) -> str:
    if needed is None:
        return "re-run baseline and candidate back to back on a quieter machine"
    if needed > _MAX_NEEDED:
        return (f"more than {_MAX_NEEDED} {unit} per side would be needed to detect a slowdown of "
                f"the allowance's size: quiet the machine or raise the threshold")
    return f"about {needed} {unit} per side would detect a slowdown of the allowance's size"


def _noise_text(se: float, described: dict[str, object]) -> str:
    if described["noise_source"] == "samples":
        return f"noise ±{se:.1%} from the samples; no repetitions, so the noise between runs is unknown"
    own, dev = described["repetition_sd"], described["device_repetition_sd"]
    device = f", its device's ±{dev:.1%}" if dev is not None else ""
    return f"noise ±{se:.1%}; repetitions differ by ±{own:.1%}{device}"


def _decide_absolute(base, new, common) -> Decision:
    """A zero median has no ratio: compare milliseconds with the noise floor only."""
    lim: Limits = common["limits"]
    b0, n0, delta = common["base_ms"], common["new_ms"], common["delta_ms"]
    slower = delta >= 0
    method, p, significant = _sample_test(base, new, lim.alpha, slower)
    floor = lim.noise_floor_ms
    why = "a median of 0 ms (below the timer's resolution) has no ratio: only ms are compared"
    if abs(delta) <= floor:
        verdict, reason = "same", f"{delta:+.4g} ms is within the noise floor {floor:g} ms; {why}"
    elif significant:
        verdict = "slower" if slower else "faster"
        reason = f"{verdict} by {abs(delta):.4g} ms > noise floor {floor:g} ms, significant; {why}"
    else:
        verdict = "inconclusive"
        reason = f"{delta:+.4g} ms beyond the noise floor {floor:g} ms but not significant; {why}"
    return Decision(verdict, change=(n0 / b0 - 1) if b0 > 0 else None, low=None, high=None,
                    allowance=None, noise=None, noise_source="samples", repetition_sd=None,
                    device_repetition_sd=None, device_shift=None, method=method, p_value=p, needed=None, reason=reason,
                    **common)

