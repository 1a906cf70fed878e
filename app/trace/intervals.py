"""Interval arithmetic on sorted int64 ns arrays, for keys computed from emitted timings."""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping [start, end) intervals; returns sorted disjoint intervals."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[order], np.asarray(ends)[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.maximum.reduceat(run_end, idx)
    return out_s, out_e


def busy_ns(starts, ends, lo: int, hi: int) -> int:
    """Length of the union of intervals inside [lo, hi)."""
    s, e = union(np.asarray(starts), np.asarray(ends))
    s, e = np.clip(s, lo, hi), np.clip(e, lo, hi)
    return int((e - s).sum())


def gaps(starts, ends, lo: int, hi: int) -> list[tuple[int, int]]:
    """Idle intervals inside [lo, hi) not covered by any interval, in time order."""
    return gaps_merged(*union(np.asarray(starts), np.asarray(ends)), lo, hi)


def clip(us: np.ndarray, ue: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The part of already merged, sorted intervals inside [lo, hi) (searchsorted: cheap per window)."""
    i = int(np.searchsorted(ue, lo, side="right"))
    j = int(np.searchsorted(us, hi, side="left"))
    return np.clip(us[i:j], lo, hi), np.clip(ue[i:j], lo, hi)


def gaps_merged(us: np.ndarray, ue: np.ndarray, lo: float, hi: float) -> list[tuple[float, float]]:
    """Idle intervals in [lo, hi) given merged, sorted intervals."""
    s, e = clip(us, ue, lo, hi)
    edges_s = np.concatenate([[lo], e])
    edges_e = np.concatenate([s, [hi]])
    keep = edges_e > edges_s
    return list(zip(edges_s[keep].tolist(), edges_e[keep].tolist()))


def intersection_len(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Length of the intersection of two sets of merged, sorted intervals."""
    (as_, ae), (bs, be) = a, b
    total, i, j = 0.0, 0, 0
    while i < len(as_) and j < len(bs):
        lo, hi = max(as_[i], bs[j]), min(ae[i], be[j])
        if hi > lo:
            total += hi - lo
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return float(total)
