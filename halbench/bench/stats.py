"""Statistics over raw samples, and the comparison of two sets of samples.

Pure functions of the numbers: no files, no devices. ``compare`` and ``gate`` both judge with
``halbench.reports.decision``, built on the noise estimators at the end of this module.

Why these statistics:
- Timings are skewed (a floor plus occasional slow outliers), so the centre is the median and
  the spread is p10-p90 / IQR, not mean +- stdev.
- The median's confidence interval is distribution-free (binomial order statistics) when there
  are enough samples for it to reach its level (n >= 6 at 95%); below that a t interval on the
  samples is used, which is wide on purpose: with 3 samples little can be claimed.
- Significance is a Mann-Whitney U test (scipy.stats), which assumes no distribution; with
  fewer than MIN_SAMPLES_FOR_TEST samples per side it has too little power, so non-overlapping
  confidence intervals decide instead.
- "Noisy" is IQR / median above a threshold: robust to the single spike (a page fault, a clock
  ramp) that inflates the coefficient of variation without making the median less trustworthy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = [
    "MIN_SAMPLES_FOR_TEST",
    "NOISE_THRESHOLD",
    "Comparison",
    "Stats",
    "compare_samples",
    "log_centre_se",
    "mann_whitney",
    "noisy_warning",
    "repetition_medians",
    "repetition_sd",
]

#: Below this many samples on either side, confidence intervals decide instead of Mann-Whitney U.
MIN_SAMPLES_FOR_TEST = 5
#: IQR / median above this marks a benchmark noisy.
NOISE_THRESHOLD = 0.10


@dataclass(frozen=True)
class Stats:
    """Summary statistics of one benchmark's raw samples (any unit; halbench stores ms)."""

    samples: tuple[float, ...]

    def __init__(self, samples: Sequence[float] | np.ndarray):
        values = tuple(float(x) for x in np.asarray(samples, dtype=float).ravel())
        if not values:
            raise ValueError("Stats needs at least one sample")
        if not all(math.isfinite(v) for v in values):
            raise ValueError("Stats samples must be finite numbers")
        object.__setattr__(self, "samples", values)

    @cached_property
    def _array(self) -> np.ndarray:
        return np.sort(np.asarray(self.samples))

    @property
    def count(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return float(np.median(self._array))

    @property
    def mean(self) -> float:
        return float(self._array.mean())

    @property
    def stdev(self) -> float:
        return float(self._array.std(ddof=1)) if self.count > 1 else 0.0

    @property
    def min(self) -> float:
        return float(self._array[0])

    @property
    def max(self) -> float:
        return float(self._array[-1])

    def percentile(self, q: float) -> float:
        return float(np.percentile(self._array, q))

    @property
    def p10(self) -> float:
        return self.percentile(10)

    @property
    def p90(self) -> float:
        return self.percentile(90)

    @property
    def iqr(self) -> float:
        return self.percentile(75) - self.percentile(25)

    @property
    def cv(self) -> float:
        """Coefficient of variation (stdev / mean); reported, but not what 'noisy' means."""
        return self.stdev / self.mean if self.mean else math.inf

    @property
    def rel_iqr(self) -> float:
        return self.iqr / self.median if self.median else math.inf

    def noisy(self, threshold: float = NOISE_THRESHOLD) -> bool:
        return self.rel_iqr > threshold

    def ci_median(self, level: float = 0.95) -> tuple[float, float]:
        """A confidence interval of the median at ``level``."""
        from scipy import stats as st

        n, x = self.count, self._array
        if n == 1:
            return (x[0], x[0])
        alpha = 1.0 - level
        # Order-statistic interval: the smallest symmetric pair of ranks (j, n-1-j) that covers
        # the median with probability >= level, P = 1 - 2 * BinomCDF(j; n, 1/2).
        j = int(st.binom.ppf(alpha / 2, n, 0.5)) - 1
        if j >= 0 and 1 - 2 * st.binom.cdf(j, n, 0.5) >= level:
            return (float(x[j]), float(x[n - 1 - j]))
        # Too few samples for a distribution-free interval at this level: a t interval.
        half = float(st.t.ppf(1 - alpha / 2, n - 1)) * self.stdev / math.sqrt(n)
        return (self.median - half, self.median + half)

    def to_dict(self) -> dict[str, float | int]:
        lo, hi = self.ci_median()
        return {"count": self.count, "median": self.median, "mean": self.mean, "stdev": self.stdev,
                "min": self.min, "max": self.max, "p10": self.p10, "p90": self.p90, "iqr": self.iqr,
                "cv": self.cv, "rel_iqr": self.rel_iqr, "ci_low": lo, "ci_high": hi}


def mann_whitney(base: Sequence[float], new: Sequence[float], alternative: str = "two-sided") -> float:
    """p-value of the Mann-Whitney U test; ``alternative='greater'`` tests new > base (slower)."""
    from scipy import stats as st

    if len(set(base) | set(new)) == 1:
        return 1.0  # identical constant samples: nothing differs (scipy would warn and return nan)
    return float(st.mannwhitneyu(new, base, alternative=alternative).pvalue)


@dataclass(frozen=True)
class Comparison:
    """How ``new`` differs from ``base``: the relative change, its significance, a verdict."""

    base: Stats
    new: Stats
    change: float  # new.median / base.median - 1: +0.10 is 10% slower
    delta: float  # new.median - base.median, in the samples' unit
    method: str  # "mann-whitney" | "ci-overlap"
    p_value: float | None  # None when confidence intervals decided
    significant: bool
    verdict: str  # faster | slower | same | noisy
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"base": self.base.to_dict(), "new": self.new.to_dict(), "change": self.change,
                "delta": self.delta, "method": self.method, "p_value": self.p_value,
                "significant": self.significant, "verdict": self.verdict, "reason": self.reason}


def compare_samples(base: Sequence[float] | Stats, new: Sequence[float] | Stats, *,
                    alpha: float = 0.01, min_change: float = 0.01,
                    alternative: str = "two-sided",
                    noise_threshold: float = NOISE_THRESHOLD) -> Comparison:
    """Compare two sets of timings (lower is better), sample against sample.

    Not what ``compare`` and ``gate`` decide by: that is ``halbench.reports.decision``, which
    also weighs the repetitions. ``alternative='greater'`` asks only "is new slower?";
    'two-sided' asks "did it change?". A change is reported as faster/slower only when it is significant and at
    least ``min_change`` in relative size; otherwise the verdict is 'noisy' when either side is
    noisy (the test could not have seen a small change), else 'same'.
    """
    b = base if isinstance(base, Stats) else Stats(base)
    n = new if isinstance(new, Stats) else Stats(new)
    change = n.median / b.median - 1.0 if b.median else math.inf
    delta = n.median - b.median
    if min(b.count, n.count) >= MIN_SAMPLES_FOR_TEST:
        method = "mann-whitney"
        p = mann_whitney(b.samples, n.samples, alternative)
        significant = p < alpha
        why = f"Mann-Whitney U p={p:.2g} {'<' if significant else '>='} {alpha:g}"
    else:
        method, p = "ci-overlap", None
        level = 1 - alpha if alternative == "two-sided" else 1 - 2 * alpha
        (blo, bhi), (nlo, nhi) = b.ci_median(level), n.ci_median(level)
        slower, faster = nlo > bhi, nhi < blo
        significant = slower or (faster and alternative == "two-sided")
        why = (f"{level:.0%} CIs of the median {'do not overlap' if significant else 'overlap'} "
               f"(fewer than {MIN_SAMPLES_FOR_TEST} samples)")
    noisy = b.noisy(noise_threshold) or n.noisy(noise_threshold)
    if significant and abs(change) >= min_change:
        verdict = "slower" if change > 0 else "faster"
    elif noisy:
        verdict = "noisy"
        why += f"; IQR/median {max(b.rel_iqr, n.rel_iqr):.0%} > {noise_threshold:.0%}"
    else:
        verdict = "same"
        if significant:
            why += f"; |change| {abs(change):.1%} < {min_change:.0%}"
    return Comparison(b, n, change, delta, method, p, significant, verdict, why)


def noisy_warning(s: Stats) -> str | None:
    """The one wording of the "noisy" warning (runner and report), or None when not noisy."""
    return f"noisy (IQR/median {s.rel_iqr:.0%} > {NOISE_THRESHOLD:.0%})" if s.noisy() else None


# ---------------------------------------------------------------------------------------------
# Noise of a benchmark's centre, on the log scale (a ratio of timings is a difference of logs).
# Every estimator is robust: one outlier sample or repetition must not widen what the gate allows.

# sd of a sample median ~ MEDIAN_SE * sd / sqrt(n) (normal data; conservative for 2-3 values).
_MEDIAN_SE = math.sqrt(math.pi / 2)
_MAD_SD = 1.482602218505602  # sd = 1.4826 * median |x - median| for normal data
_PAIR_SD = 1 / (0.6744897501960817 * math.sqrt(2))  # sd = 1.0483 * median |x_i - x_j|


def repetition_medians(samples: Sequence[float], blocks: Sequence[int] | None) -> list[float]:
    """The median of each repetition's samples (``blocks``: samples per repetition), or the
    median of all samples when ``blocks`` is absent or does not add up."""
    if not blocks or sum(blocks) != len(samples) or any(n <= 0 for n in blocks):
        return [float(np.median(samples))]
    out, start = [], 0
    for n in blocks:
        out.append(float(np.median(samples[start:start + n])))
        start += n
    return out


def log_centre_se(samples: Sequence[float], blocks: Sequence[int] | None) -> float:
    """Standard error of log(median of repetition medians) from the scatter of samples within
    their repetitions (positive samples; between-repetition differences are not counted here)."""
    x = np.log(np.asarray(samples, dtype=float))
    k = len(repetition_medians(samples, blocks))
    parts = np.split(x, np.cumsum(blocks)[:-1]) if k > 1 else [x]
    residuals = np.concatenate([p - np.median(p) for p in parts])
    sd = _MAD_SD * float(np.median(np.abs(residuals)))
    # A median of k repetition medians of len/k samples each loses efficiency twice.
    return _MEDIAN_SE * sd / math.sqrt(len(x)) * (_MEDIAN_SE if k > 2 else 1.0)


def repetition_sd(*sides: Sequence[float]) -> float:
    """Robust sd of log repetition medians: the median absolute difference between two
    repetitions of one side, pooled over the sides (one outlier repetition in three changes only
    the largest differences)."""
    diffs = [abs(math.log(a / b)) for side in sides for i, a in enumerate(side) for b in side[i + 1:]]
    return _PAIR_SD * float(np.median(diffs)) if diffs else 0.0

