"""Statistics over a handful of seeds, as the field reports them: a run's final return, the
interquartile mean and a bootstrap confidence interval of the mean (rliable's aggregates), and the
mean curve with its band across runs. Pure functions of numbers."""

from __future__ import annotations

import math

__all__ = ["LAST_EPISODES", "iqm", "confidence_interval", "band"]

#: A run's final return: the mean of its last episodes, as :meth:`RunResult.mean_return` reads it.
LAST_EPISODES = 20


def iqm(values: list[float]) -> float:
    """The interquartile mean: the mean of the middle half (rliable's aggregate, robust to one outlier
    seed), with the quartiles' runs weighted by the share of them inside, as rliable's ``trim_mean``."""
    from scipy import stats

    return float(stats.trim_mean(values, 0.25)) if values else float("nan")


def confidence_interval(values: list[float], level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """A bootstrap confidence interval of the mean (scipy.stats.bootstrap, percentile method: BCa needs
    more than the handful of seeds a sweep has); one value gives (value, value)."""
    if len(values) < 2 or max(values) == min(values):
        v = values[0] if values else float("nan")
        return v, v
    from scipy import stats

    res = stats.bootstrap(
        (list(values),), _mean, confidence_level=level, method="percentile", n_resamples=2000, random_state=seed
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _mean(x, axis=-1):
    import numpy as np

    return np.mean(x, axis=axis)


def band(
    curves: list[list[tuple[int, float]]], points: int = 40
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per configuration's runs, each a list of (env steps, mean return so far): a common grid of env
    steps up to the shortest run's last, each run's value there (its last report at or before it),
    and the mean with a 95 % bootstrap interval across runs at each grid point."""
    curves = [c for c in curves if c]
    if not curves:
        return [], [], [], []
    end = min(c[-1][0] for c in curves)
    start = max(c[0][0] for c in curves)
    if end <= start:
        grid = [end]
    else:
        grid = [start + (end - start) * i / (points - 1) for i in range(points)]
    xs, mean, low, high = [], [], [], []
    for x in grid:
        at = [next((r for s, r in reversed(c) if s <= x), None) for c in curves]
        at = [v for v in at if v is not None and not math.isnan(v)]
        if not at:
            continue
        lo, hi = confidence_interval(at)
        xs.append(x)
        mean.append(sum(at) / len(at))
        low.append(lo)
        high.append(hi)
    return xs, mean, low, high
