"""Stats over raw samples and the comparison verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from halbench.bench.stats import Stats, compare_samples, mann_whitney


def lognormal(median: float, n: int, sigma: float = 0.02, seed: int = 0) -> np.ndarray:
    return median * np.random.default_rng(seed).lognormal(0.0, sigma, n)


def test_summary_statistics_match_numpy() -> None:
    x = lognormal(2.0, 50)
    s = Stats(x)
    assert s.count == 50
    assert s.median == pytest.approx(np.median(x))
    assert s.mean == pytest.approx(x.mean())
    assert s.stdev == pytest.approx(x.std(ddof=1))
    assert s.p10 == pytest.approx(np.percentile(x, 10))
    assert s.p90 == pytest.approx(np.percentile(x, 90))
    assert s.iqr == pytest.approx(np.percentile(x, 75) - np.percentile(x, 25))
    assert s.min <= s.p10 <= s.median <= s.p90 <= s.max


def test_stats_refuses_empty_and_non_finite() -> None:
    with pytest.raises(ValueError):
        Stats([])
    with pytest.raises(ValueError):
        Stats([1.0, float("nan")])


def test_median_ci_is_order_statistics_with_enough_samples() -> None:
    x = lognormal(1.0, 30)
    lo, hi = Stats(x).ci_median()
    assert lo in x and hi in x  # distribution-free: the interval ends are samples
    assert lo < np.median(x) < hi


def test_median_ci_falls_back_to_t_with_few_samples() -> None:
    s = Stats([1.0, 1.1, 0.9])
    lo, hi = s.ci_median()
    assert lo < 0.9 and hi > 1.1  # wider than the samples: 3 samples claim little
    assert Stats([5.0]).ci_median() == (5.0, 5.0)


def test_median_ci_covers_at_its_level() -> None:
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(300):
        lo, hi = Stats(rng.lognormal(0.0, 0.1, 20)).ci_median(0.95)
        hits += lo <= 1.0 <= hi  # the true median of lognormal(0, s) is 1
    assert hits / 300 >= 0.92


def test_noisy_is_relative_iqr_not_one_spike() -> None:
    quiet = list(lognormal(1.0, 40, 0.01))
    assert not Stats(quiet).noisy()
    assert not Stats(quiet + [5.0]).noisy()  # one page-fault spike leaves the median trustworthy
    assert Stats(lognormal(1.0, 40, 0.3)).noisy()


def test_mann_whitney_on_constant_samples() -> None:
    assert mann_whitney([1.0] * 5, [1.0] * 5) == 1.0


@pytest.mark.parametrize(("factor", "verdict"), [(1.0, "same"), (1.5, "slower"), (0.7, "faster"),
                                                 (1.1, "slower")])
def test_compare_verdicts(factor: float, verdict: str) -> None:
    c = compare_samples(lognormal(1.0, 40, seed=1), lognormal(factor, 40, seed=2))
    assert c.verdict == verdict, c.reason
    assert c.method == "mann-whitney"
    assert c.change == pytest.approx(factor - 1, abs=0.02)


def test_compare_noisy_when_spread_hides_a_change() -> None:
    c = compare_samples(lognormal(1.0, 10, 0.4, seed=1), lognormal(1.05, 10, 0.4, seed=2))
    assert c.verdict == "noisy"


def test_compare_few_samples_uses_confidence_intervals() -> None:
    c = compare_samples([1.0, 1.01, 0.99], [1.5, 1.51, 1.49])
    assert c.method == "ci-overlap" and c.p_value is None
    assert c.verdict == "slower"
    same = compare_samples([1.0, 1.01, 0.99], [1.0, 1.02, 0.995])
    assert same.verdict == "same"


def test_one_sided_ignores_speedups() -> None:
    c = compare_samples(lognormal(1.0, 40, seed=1), lognormal(0.5, 40, seed=2), alternative="greater")
    assert not c.significant
