"""Agreement statistics for calibration, in plain numpy: ICC(2,1), quadratic weighted kappa,
Pearson's r, the standardized mean difference, and a bootstrap percentile interval that
resamples rounds.

Units. Every statistic here is unitless. A *unit* of resampling is one round (a target that
raters scored): a matrix is rounds x raters, a pair of vectors holds one value per round.
Levels are the scorecard's 1-4 scale (poor, mixed, good, excellent).

Every statistic takes the sample and, optionally, `weights`: a (B, n) matrix of how many
times each round appears in each of B bootstrap resamples (each row sums to n). A
statistic needs only weighted sums over rounds, so B resamples cost one (B, n) x (n, m)
matrix product instead of B copies of the data: 1,000 resamples of 1,000 rounds take
milliseconds. Without weights the answer is a float; with them, an array of B. A statistic
that is undefined for a sample (no variance: every level the same) is NaN.

Sources:
- Shrout, P. E. & Fleiss, J. L. (1979). Intraclass correlations: uses in assessing rater
  reliability. Psychological Bulletin 86(2), 420-428. ICC(2,1) is their Case 2, one rater.
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

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

LEVELS = (1, 2, 3, 4)

# The bars automated scoring is held to in practice (Williamson, Xi & Breyer 2012):
# agreement with a human at least 0.70 (QWK and Pearson r), no more than 0.10 below the
# agreement between two humans, and a mean within 0.15 pooled standard deviations of the
# humans' mean.
THRESHOLDS = {"qwk_min": 0.70, "r_min": 0.70, "drop_max": 0.10, "smd_abs_max": 0.15}

# The bootstrap holds at most this many resample counts at once (8 bytes each: 16 MB);
# past it the resamples are drawn and evaluated in blocks.
MAX_CELLS_PER_CHUNK = 2_000_000


def _weights(n: int, weights) -> tuple[np.ndarray, bool]:
    """(B, n) counts per round, and whether the caller gave them (else one resample: the
    sample itself)."""
    if weights is None:
        return np.ones((1, n)), False
    w = np.asarray(weights, dtype=float)
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"weights are (resamples, {n} rounds), got {w.shape}")
    return w, True


def _out(x: np.ndarray, batched: bool):
    return x if batched else float(x[0])


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 1e-12, num / np.where(den > 1e-12, den, 1.0), np.nan)


def icc_2_1(matrix, weights=None) -> float | np.ndarray:
    """ICC(2,1) of Shrout & Fleiss (1979): two-way random effects (rounds and raters both
    samples of larger populations), one rater's score, absolute agreement (a rater who
    scores everyone a level higher lowers it).

    `matrix`: (n rounds, k raters), complete (no missing cells), n >= 2 and k >= 2.

        ICC(2,1) = (BMS - EMS) / (BMS + (k-1) EMS + k (JMS - EMS) / n)

    BMS: between-rounds mean square, JMS: between-raters (judges) mean square, EMS: residual
    mean square of the two-way ANOVA without replication. With `weights`, each round's row
    counts as often as its weight (a bootstrap resample of rounds)."""
    x = np.asarray(matrix, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"ICC(2,1) takes a rounds x raters matrix, got shape {x.shape}")
    n, k = x.shape
    if n < 2 or k < 2:
        raise ValueError(f"ICC(2,1) needs at least 2 rounds and 2 raters, got {n} x {k}")
    x = x - x.mean()  # the ICC ignores a shift; centring keeps the sums of squares exact
    w, batched = _weights(n, weights)
    row_mean = x.mean(axis=1)
    grand = w @ row_mean / n                                    # (B,)
    ss_rows = k * (w @ row_mean ** 2 - n * grand ** 2)
    col_mean = w @ x / n                                        # (B, k)
    ss_cols = n * ((col_mean - grand[:, None]) ** 2).sum(axis=1)
    ss_total = w @ (x ** 2).sum(axis=1) - n * k * grand ** 2
    ss_err = ss_total - ss_rows - ss_cols
    bms, jms, ems = ss_rows / (n - 1), ss_cols / (k - 1), ss_err / ((n - 1) * (k - 1))
    return _out(_safe_div(bms - ems, bms + (k - 1) * ems + k * (jms - ems) / n), batched)


def _check_levels(values: np.ndarray, levels: tuple[int, ...]) -> None:
    bad = ~np.isin(values, levels)
    if bad.any():
        raise ValueError(f"levels are {', '.join(map(str, levels))}; got {values[bad].flat[0]!r}")


def _paired(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"paired values: two vectors of one value per round, got shapes {a.shape} and {b.shape}")
    return a, b


def _moments(a: np.ndarray, b: np.ndarray, w: np.ndarray):
    """Weighted means, variances and covariance (denominator n) over rounds, per resample."""
    n = a.shape[0]
    c = (a.mean() + b.mean()) / 2  # one shift for both: differences of means survive it
    a, b = a - c, b - c
    sums = w @ np.stack([a, b, a * a, b * b, a * b], axis=1) / n   # (B, 5)
    ma, mb = sums[:, 0], sums[:, 1]
    return ma, mb, sums[:, 2] - ma ** 2, sums[:, 3] - mb ** 2, sums[:, 4] - ma * mb


def qwk(a, b, levels: tuple[int, ...] = LEVELS, weights=None) -> float | np.ndarray:
    """Quadratic weighted kappa (Cohen 1968) between two raters' levels of the same rounds.

    `a`, `b`: one level from `levels` per round (integers 1-4 on the scorecard). With
    weights (i - j)^2 / (K - 1)^2 on the disagreement between levels i and j and expected
    counts from the two raters' marginals, kappa = 1 - sum w O / sum w E; this equals
    (Fleiss & Cohen 1973) 2 cov(a, b) / (var a + var b + (mean a - mean b)^2) with
    denominators n, which is what is computed (no K x K table per resample). `levels`
    checks the input; the scale factor (K - 1)^2 cancels. NaN when both raters give one
    level throughout (no disagreement is possible, nor agreement beyond chance)."""
    a, b = _paired(a, b)
    _check_levels(a, levels)
    _check_levels(b, levels)
    w, batched = _weights(a.shape[0], weights)
    ma, mb, va, vb, cov = _moments(a, b, w)
    return _out(_safe_div(2 * cov, va + vb + (ma - mb) ** 2), batched)


def pearson_r(x, y, weights=None) -> float | np.ndarray:
    """Pearson's product-moment correlation of paired values; NaN if either side has no
    variance."""
    x, y = _paired(x, y)
    w, batched = _weights(x.shape[0], weights)
    _, _, vx, vy, cov = _moments(x, y, w)
    return _out(_safe_div(cov, np.sqrt(np.clip(vx, 0, None) * np.clip(vy, 0, None))), batched)


def smd(auto, human, weights=None) -> float | np.ndarray:
    """Standardized mean difference of the automatic score from the human one, as
    Williamson, Xi & Breyer (2012) define it:

        (mean_auto - mean_human) / sqrt((var_auto + var_human) / 2)

    with sample variances (denominator n - 1), in pooled standard deviations: positive means
    the machine scores higher. NaN when neither side varies."""
    a, h = _paired(auto, human)
    n = a.shape[0]
    w, batched = _weights(n, weights)
    ma, mh, va, vh, _ = _moments(a, h, w)
    pooled = np.sqrt(np.clip((va + vh) * n / (n - 1) / 2, 0, None)) if n > 1 else np.zeros_like(ma)
    return _out(_safe_div(ma - mh, pooled), batched)


def mean(x, weights=None) -> float | np.ndarray:
    """The plain mean of one value per round (a rater's leniency over the rounds they
    shared), resampled like the others."""
    x = np.asarray(x, dtype=float)
    w, batched = _weights(x.shape[0], weights)
    return _out(w @ x / x.shape[0], batched)


@dataclass(frozen=True)
class Interval:
    lo: float | None
    hi: float | None
    n_resamples: int
    undefined: int  # resamples where the statistic was NaN (e.g. every level the same)

    def as_list(self) -> list[float] | None:
        return None if self.lo is None else [self.lo, self.hi]


def resample_counts(n: int, n_resamples: int, seed: int):
    """How often each of n rounds appears in each resample: (B, n) blocks of at most
    MAX_CELLS_PER_CHUNK cells, B rows in all, each row summing to n. Drawn as B x n
    uniform indices (resampling with replacement), so the same (n, n_resamples, seed) always
    gives the same resamples."""
    with _COUNTS_LOCK:
        kept = _COUNTS.get((n, n_resamples, seed))
    if kept is not None:
        yield from kept
        return
    rng = np.random.default_rng(seed)
    chunk = max(1, MAX_CELLS_PER_CHUNK // max(1, n))
    blocks = []
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
        block = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n).astype(float)
        blocks.append(block)
        yield block
    if n * n_resamples <= CACHE_CELLS:
        with _COUNTS_LOCK:  # the web layer's threads share it
            while len(_COUNTS) >= CACHE_ENTRIES:
                _COUNTS.pop(next(iter(_COUNTS)))
            _COUNTS[(n, n_resamples, seed)] = blocks


# A page asks for dozens of intervals on the same few numbers of rounds, one after another:
# their resamples are kept (at most 4 sets of up to 1,000,000 counts: 32 MB) rather than
# drawn again each time (6 ms a set at 1,000 rounds x 1,000 resamples).
CACHE_CELLS = 1_000_000
CACHE_ENTRIES = 4
_COUNTS: dict[tuple[int, int, int], list[np.ndarray]] = {}
_COUNTS_LOCK = threading.Lock()


def bootstrap_ci(stat: Callable[..., np.ndarray], *samples, n_resamples: int = 2000, seed: int = 0,
                 level: float = 0.95) -> Interval:
    """A percentile bootstrap interval (Efron & Tibshirani 1993, ch. 13) for `stat` of the
    samples, resampling units (rounds: the first axis of every sample, together, so pairs
    and matrix rows stay whole) with replacement.

    Deterministic: the same samples, `n_resamples` and `seed` give the same interval.
    `stat(*samples, weights=W)` must take the resamples as counts per round (every
    statistic in this module does). Resamples where the statistic is undefined (NaN) are
    left out and counted; if more than half are, the interval is undefined too (lo = hi =
    None)."""
    arrays = [np.asarray(s, dtype=float) for s in samples]
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays):
        raise ValueError("every sample needs one entry per unit (round)")
    if n < 2:
        return Interval(None, None, n_resamples, n_resamples)
    vals = np.concatenate([np.asarray(stat(*arrays, weights=w), dtype=float).reshape(-1)
                           for w in resample_counts(n, n_resamples, seed)])
    ok = vals[np.isfinite(vals)]
    undefined = int(n_resamples - ok.size)
    if ok.size * 2 < n_resamples:
        return Interval(None, None, n_resamples, undefined)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ok, [tail, 100 - tail])
    return Interval(float(lo), float(hi), n_resamples, undefined)
