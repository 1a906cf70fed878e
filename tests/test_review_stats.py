"""The calibration statistics (app/review/stats.py) against published and hand-computed
values, and the bootstrap's determinism, speed and coverage."""

from __future__ import annotations

import time

import numpy as np
import pytest

from app.review import stats
from app.review.stats import bootstrap_ci, icc_2_1, pearson_r, qwk, smd

# Shrout & Fleiss (1979), Table 2: four judges rate six targets (rows) on a 10-point scale.
SHROUT_FLEISS = np.array([
    [9, 2, 5, 8],
    [6, 1, 3, 2],
    [8, 4, 6, 8],
    [7, 1, 2, 6],
    [10, 5, 6, 9],
    [6, 2, 4, 7],
])


def test_icc_2_1_on_shrout_and_fleiss_table_2():
    # The paper reports ICC(2,1) = .29 for these data, from the mean squares of their
    # two-way ANOVA (BMS 11.24, JMS 32.49, EMS 1.02; n = 6, k = 4): (11.24 - 1.02) / (11.24 + 3 x 1.02 + 4 x (32.49 - 1.02) / 6)
    # = 10.22 / 35.28 = 0.2897.
    assert round(icc_2_1(SHROUT_FLEISS), 2) == 0.29
    assert icc_2_1(SHROUT_FLEISS) == pytest.approx(10.22 / 35.28, abs=5e-4)


def test_icc_2_1_punishes_a_constant_offset_and_rewards_agreement():
    # absolute agreement: one rater a level above the other lowers the ICC, though the
    # two correlate perfectly
    base = np.array([1, 2, 3, 4, 2, 3], dtype=float)
    assert icc_2_1(np.stack([base, base], axis=1)) == pytest.approx(1.0)
    assert icc_2_1(np.stack([base, base + 1], axis=1)) < 0.8
    assert np.isnan(icc_2_1(np.full((5, 3), 2.0)))  # no variance at all: undefined
    with pytest.raises(ValueError):
        icc_2_1(np.ones((1, 3)))


def test_resample_weights_equal_resampled_copies():
    # the bootstrap passes each resample as counts per round; the statistic on counts must be
    # the statistic of the resampled rows themselves
    rng = np.random.default_rng(3)
    m = rng.normal(size=(12, 3))
    a, b = rng.integers(1, 5, 12), rng.integers(1, 5, 12)
    idx = rng.integers(0, 12, size=(7, 12))
    w = np.stack([np.bincount(i, minlength=12) for i in idx])
    assert np.allclose(icc_2_1(m, weights=w), [icc_2_1(m[i]) for i in idx])
    assert np.allclose(qwk(a, b, weights=w), [qwk(a[i], b[i]) for i in idx], equal_nan=True)
    assert np.allclose(pearson_r(a, b, weights=w), [pearson_r(a[i], b[i]) for i in idx], equal_nan=True)
    assert np.allclose(smd(a, b, weights=w), [smd(a[i], b[i]) for i in idx], equal_nan=True)


def test_qwk_hand_computed():
    a = [1, 2, 3, 4, 4, 2]
    b = [1, 3, 3, 4, 3, 2]
    # Observed table O (rows a, columns b): (1,1) (2,3) (2,2) (3,3) (4,4) (4,3), one each.
    # Disagreement weights (i - j)^2: the observed disagreement is O(2,3) + O(4,3) = 1 + 1 = 2.
    # Marginals: a has 1,2,1,2 of levels 1-4; b has 1,1,3,1. Expected E_ij = a_i b_j / 6, so
    # sum (i-j)^2 a_i b_j = 1*(0+1+12+9) + 2*(1+0+3+4) + 1*(4+1+0+1) + 2*(9+4+3+0)
    #                     = 22 + 16 + 6 + 32 = 76, and the expected disagreement is 76 / 6.
    # kappa = 1 - 2 / (76 / 6) = 1 - 12/76 = 64/76 = 16/19 = 0.8421.
    assert qwk(a, b) == pytest.approx(16 / 19)
    assert qwk([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(1.0)
    # a complete reversal: 2 cov / (var + var + 0) = 2 (-1.25) / 2.5
    assert qwk([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(qwk([2, 2, 2], [2, 2, 2]))
    with pytest.raises(ValueError):
        qwk([0, 1], [1, 2])


def _cohen_table_qwk(a, b, levels=(1, 2, 3, 4)) -> float:
    """Cohen's (1968) definition, table by table: 1 - sum w O / sum w E."""
    k = len(levels)
    o = np.zeros((k, k))
    for x, y in zip(a, b):
        o[levels.index(x), levels.index(y)] += 1
    e = np.outer(o.sum(1), o.sum(0)) / o.sum()
    w = (np.subtract.outer(np.arange(k), np.arange(k)) ** 2) / (k - 1) ** 2
    return 1 - (w * o).sum() / (w * e).sum()


def test_qwk_equals_cohens_table_definition():
    # the moment form (Fleiss & Cohen 1973) used for speed is the same number
    rng = np.random.default_rng(11)
    for _ in range(50):
        n = int(rng.integers(5, 40))
        a = rng.integers(1, 5, n)
        b = np.clip(a + rng.integers(-1, 2, n), 1, 4)
        if len(set(a)) > 1:
            assert qwk(a, b) == pytest.approx(_cohen_table_qwk(list(a), list(b)))


def test_pearson_and_smd_by_hand():
    # x - 3 = -2,-1,0,1,2; y - 4 = -2,0,1,0,1; sum of products 6, sums of squares 10 and 6
    assert pearson_r([1, 2, 3, 4, 5], [2, 4, 5, 4, 5]) == pytest.approx(6 / np.sqrt(60))
    # auto mean 3, variance (1+0+1+0)/3 = 2/3; human mean 2, variance (1+1+1+1)/3 = 4/3;
    # pooled sqrt((2/3 + 4/3) / 2) = 1, so SMD = (3 - 2) / 1 = 1.0 (the machine a level high)
    assert smd([2, 3, 4, 3], [1, 1, 3, 3]) == pytest.approx(1.0)
    assert smd([1, 1, 3, 3], [2, 3, 4, 3]) == pytest.approx(-1.0)
    assert np.isnan(pearson_r([1, 1, 1], [1, 2, 3]))


def test_bootstrap_is_deterministic_and_resamples_rounds_whole():
    rng = np.random.default_rng(5)
    m = rng.integers(1, 5, size=(30, 3)).astype(float)
    one, two = bootstrap_ci(icc_2_1, m, seed=7), bootstrap_ci(icc_2_1, m, seed=7)
    assert one == two and one.lo < icc_2_1(m) < one.hi
    assert bootstrap_ci(icc_2_1, m, seed=8) != one
    stats._COUNTS.clear()  # drawn afresh rather than kept: the same resamples
    assert bootstrap_ci(icc_2_1, m, seed=7) == one
    # pairs stay pairs: identical raters give an interval of exactly [1, 1]
    a = rng.integers(1, 5, 25)
    assert bootstrap_ci(qwk, a, a).as_list() == [1.0, 1.0]
    # an undefined statistic gives an undefined interval, not a number
    flat = bootstrap_ci(qwk, np.full(10, 2), np.full(10, 2))
    assert flat.lo is None and flat.undefined == flat.n_resamples


@pytest.mark.timed
def test_bootstrap_is_fast():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(200, 4))
    a, b = rng.integers(1, 5, 200), rng.integers(1, 5, 200)
    bootstrap_ci(icc_2_1, m)  # first call pays numpy's warm-up
    big_a, big_b = rng.integers(1, 5, 1000), rng.integers(1, 5, 1000)
    stats._COUNTS.clear()
    t = time.perf_counter()
    bootstrap_ci(icc_2_1, m, n_resamples=2000)
    bootstrap_ci(qwk, a, b, n_resamples=2000)
    bootstrap_ci(qwk, big_a, big_b, n_resamples=2000)  # 1,000 rounds: past the cache, drawn in blocks
    assert time.perf_counter() - t < 0.5


def test_bootstrap_interval_covers_the_true_correlation_about_95_percent_of_the_time():
    # 200 samples of 60 rounds from a bivariate normal with r = 0.7: the percentile
    # interval should hold 0.7 in roughly 95% of them (it runs a little short at this n).
    rng = np.random.default_rng(2024)
    cov = [[1, 0.7], [0.7, 1]]
    hits = 0
    for i in range(200):
        xy = rng.multivariate_normal([0, 0], cov, size=60)
        ci = bootstrap_ci(pearson_r, xy[:, 0], xy[:, 1], n_resamples=1000, seed=i)
        hits += ci.lo <= 0.7 <= ci.hi
    assert 0.88 <= hits / 200 <= 0.99
