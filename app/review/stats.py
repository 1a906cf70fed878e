"""Agreement statistics for calibration, in plain numpy: ICC(2,1), quadratic weighted kappa,
Pearson's r, the standardized mean difference, and a bootstrap percentile interval that
resamples rounds.

Units. Every statistic here is unitless. A *unit* of resampling is one round (a target that
raters scored): a matrix is rounds x raters, a pair of vectors holds one value per round.
Levels are the scorecard's 1-4 scale (poor, mixed, good, excellent).

Every statistic takes arrays with optional leading batch axes (`(..., n)` or `(..., n, k)`)
and reduces only the last one or two, so the bootstrap evaluates all its resamples in one
call instead of a Python loop: 2,000 resamples of 200 rounds take a few milliseconds. A
statistic that is undefined for a sample (no variance: every level the same) is NaN.

Sources:
- Shrout, P. E. & Fleiss, J. L. (1979). Intraclass correlations: uses in assessing rater
  reliability. Psychological Bulletin 86(2), 420-428. ICC(2,1): Table 1 and eq. for case 2.
- Cohen, J. (1968). Weighted kappa: nominal scale agreement with provision for scaled
  disagreement or partial credit. Psychological Bulletin 70(4), 213-220.
- Fleiss, J. L. & Cohen, J. (1973). The equivalence of weighted kappa and the intraclass
  correlation coefficient as measures of reliability. Educational and Psychological
  Measurement 33, 613-619: with quadratic weights, kappa = 2 s_ab / (s_a^2 + s_b^2 +
  (m_a - m_b)^2), moments taken with denominator n. `qwk` computes it that way.
- Williamson, D. M., Xi, X. & Breyer, F. J. (2012). A framework for evaluation and use of
  automated scoring. Educational Measurement: Issues and Practice 31(1), 2-13: the
  standardized mean difference and the thresholds in THRESHOLDS.
- Efron, B. & Tibshirani, R. J. (1993). An Introduction to the Bootstrap, ch. 13: the
  percentile interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

LEVELS = (1, 2, 3, 4)

# The bars automated scoring is held to in practice (Williamson, Xi & Breyer 2012, p. 9-10):
# agreement with a human at least 0.70 (QWK and Pearson r), no more than 0.10 below the
# agreement between two humans, and a mean within 0.15 pooled standard deviations of the
# humans' mean.
THRESHOLDS = {"qwk_min": 0.70, "r_min": 0.70, "drop_max": 0.10, "smd_abs_max": 0.15}

# The bootstrap holds at most this many values in memory at once (8 bytes each: 32 MB);
# past it the resamples are evaluated in chunks.
MAX_CELLS_PER_CHUNK = 4_000_000


def _f(x):
    """A 0-d result as a Python float; batched results stay arrays."""
    return float(x) if np.ndim(x) == 0 else x


def icc_2_1(matrix) -> float | np.ndarray:
    """ICC(2,1) of Shrout & Fleiss (1979): two-way random effects (rounds and raters both
    samples of larger populations), one rater's score, absolute agreement (a rater who
    scores everyone a level higher lowers it).

    `matrix`: (..., n rounds, k raters), complete (no missing cells), n >= 2 and k >= 2.

        ICC(2,1) = (BMS - EMS) / (BMS + (k-1) EMS + k (JMS - EMS) / n)

    BMS: between-rounds mean square, JMS: between-raters (judges) mean square, EMS: residual
    mean square of the two-way ANOVA without replication."""
    x = np.asarray(matrix, dtype=float)
    n, k = x.shape[-2], x.shape[-1]
    if n < 2 or k < 2:
        raise ValueError(f"ICC(2,1) needs at least 2 rounds and 2 raters, got {n} x {k}")
    grand = x.mean(axis=(-2, -1), keepdims=True)
    rows = x.mean(axis=-1, keepdims=True)
    cols = x.mean(axis=-2, keepdims=True)
    ss_rows = k * ((rows - grand) ** 2).sum(axis=(-2, -1))
    ss_cols = n * ((cols - grand) ** 2).sum(axis=(-2, -1))
    ss_err = ((x - rows - cols + grand) ** 2).sum(axis=(-2, -1))
    bms, jms, ems = ss_rows / (n - 1), ss_cols / (k - 1), ss_err / ((n - 1) * (k - 1))
    denom = bms + (k - 1) * ems + k * (jms - ems) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(denom > 0, (bms - ems) / np.where(denom > 0, denom, 1.0), np.nan)
    return _f(out)


def _check_levels(values: np.ndarray, levels: tuple[int, ...]) -> None:
    bad = ~np.isin(values, levels)
    if bad.any():
        raise ValueError(f"levels are {', '.join(map(str, levels))}; got {values[bad].flat[0]!r}")


def qwk(a, b, levels: tuple[int, ...] = LEVELS) -> float | np.ndarray:
    """Quadratic weighted kappa (Cohen 1968) between two raters' levels of the same rounds.

    `a`, `b`: (..., n) levels from `levels` (integers 1-4 on the scorecard). With weights
    w_ij = (i - j)^2 / (K - 1)^2 on the disagreement between levels i and j and expected
    counts from the two raters' marginals, kappa = 1 - sum w O / sum w E; this equals
    (Fleiss & Cohen 1973) 2 cov(a, b) / (var a + var b + (mean a - mean b)^2) with
    denominators n, which is what is computed (no K x K table per resample). `levels`
    checks the input; the scale factor (K - 1)^2 cancels. NaN when both raters give one
    level throughout (no disagreement is possible, nor agreement beyond chance)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"qwk needs paired levels, got shapes {a.shape} and {b.shape}")
    if a.ndim == 1:  # batches come from the bootstrap, whose input was checked once
        _check_levels(a, levels)
        _check_levels(b, levels)
    ma, mb = a.mean(axis=-1), b.mean(axis=-1)
    da, db = a - ma[..., None], b - mb[..., None]
    cov = (da * db).mean(axis=-1)
    denom = (da ** 2).mean(axis=-1) + (db ** 2).mean(axis=-1) + (ma - mb) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(denom > 0, 2 * cov / np.where(denom > 0, denom, 1.0), np.nan)
    return _f(out)


def pearson_r(x, y) -> float | np.ndarray:
    """Pearson's product-moment correlation of paired values (..., n); NaN if either side
    has no variance."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    dx, dy = x - x.mean(axis=-1, keepdims=True), y - y.mean(axis=-1, keepdims=True)
    denom = np.sqrt((dx ** 2).sum(axis=-1) * (dy ** 2).sum(axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(denom > 0, (dx * dy).sum(axis=-1) / np.where(denom > 0, denom, 1.0), np.nan)
    return _f(out)


def smd(auto, human) -> float | np.ndarray:
    """Standardized mean difference of the automatic score from the human one, as
    Williamson, Xi & Breyer (2012) define it:

        (mean_auto - mean_human) / sqrt((var_auto + var_human) / 2)

    with sample variances (denominator n - 1), in pooled standard deviations: positive means
    the machine scores higher. NaN when neither side varies."""
    a, h = np.asarray(auto, dtype=float), np.asarray(human, dtype=float)
    pooled = np.sqrt((a.var(axis=-1, ddof=1) + h.var(axis=-1, ddof=1)) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(pooled > 0, (a.mean(axis=-1) - h.mean(axis=-1)) / np.where(pooled > 0, pooled, 1.0), np.nan)
    return _f(out)


@dataclass(frozen=True)
class Interval:
    lo: float | None
    hi: float | None
    n_resamples: int
    undefined: int  # resamples where the statistic was NaN (e.g. every level the same)

    def as_list(self) -> list[float] | None:
        return None if self.lo is None else [self.lo, self.hi]


def bootstrap_ci(stat: Callable[..., np.ndarray], *samples, n_resamples: int = 2000, seed: int = 0,
                 level: float = 0.95) -> Interval:
    """A percentile bootstrap interval (Efron & Tibshirani 1993, ch. 13) for `stat` of the
    samples, resampling units (rounds: the first axis of every sample, together, so pairs
    and matrix rows stay whole) with replacement.

    Deterministic: the same samples, `n_resamples` and `seed` give the same interval.
    `stat` must accept a leading resample axis (every statistic in this module does): the
    resamples are evaluated in a few vectorised calls, not one at a time. Resamples where
    the statistic is undefined (NaN) are left out and counted; if more than half are, the
    interval is undefined too (lo = hi = None)."""
    arrays = [np.asarray(s, dtype=float) for s in samples]
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays):
        raise ValueError("every sample needs one entry per unit (round)")
    if n < 2:
        return Interval(None, None, n_resamples, n_resamples)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    per_resample = max(1, sum(a.size for a in arrays))
    chunk = max(1, MAX_CELLS_PER_CHUNK // per_resample)
    vals = np.concatenate([np.asarray(stat(*(a[idx[i:i + chunk]] for a in arrays)), dtype=float).reshape(-1)
                           for i in range(0, n_resamples, chunk)])
    ok = vals[np.isfinite(vals)]
    undefined = int(n_resamples - ok.size)
    if ok.size * 2 < n_resamples:
        return Interval(None, None, n_resamples, undefined)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ok, [tail, 100 - tail])
    return Interval(float(lo), float(hi), n_resamples, undefined)
