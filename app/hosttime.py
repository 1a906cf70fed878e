"""How long the host's side of a step takes: the times between and inside the rows a
CPU thread writes while it launches work (issue 13).

Version 1 of every scenario drew these as constants or narrow uniforms: kernels on a busy
stream exactly 1.2 µs apart, a launch's kernel ready exactly 3 µs after its call returns,
cudaLaunchKernel uniform on 4-8 µs, consecutive ops touching with no time between them,
zero_grad always 300 µs. One SQL query finds each (`python -m bench realism`). `V1` keeps
them, draw for draw, so version 1 instances stay byte-identical (contract 1); `MEASURED`
draws them as real traces show them. A scenario picks one by the version it builds
(`app.scenario.building()`), and hands it to the shared helpers.

MEASURED, from the real torch.profiler traces in ../shared/fixtures/kineto (HTA's: an
NCCL-heavy training rank with ns timestamps, and two ranks with µs timestamps):
- back-to-back kernels on a busy stream: p10 ~1.05, median ~1.2 µs, with a tail (a
  lognormal, floored at the ~0.6 µs the GPU front end needs);
- cudaLaunchKernel's own time: median 7-10 µs, p99 20-25 µs, max 44-76 µs;
- a launch's kernel starting on an idle GPU: p10 1.1, median 1.6, p90 3.4 µs after the
  call returns;
- between consecutive ops of a thread: p10 8, median 16, p90 85 µs (Python and the
  dispatcher; never zero);
- host work of a nominal length (zero_grad, the DataLoader's next, the collective's
  bookkeeping): that length, give or take ~10% step to step.

MEASURED_2 (the fidelity page's yardstick, app/analysis/fidelity.py, showed MEASURED's
kernel gaps too tight: p90 2.2 µs where the real NCCL-heavy rank has 7.1 and the sampled
ranks 16): gaps on a busy stream are two populations, ~78% back-to-back at p50 1.15 µs
(p25 1.09, p75 1.9) and ~22% of 3-20 µs where the next kernel waited on something (an
event, a stream dependency, the front end switching launch configurations): a mixture of
two floored lognormals. Everything else is MEASURED's. Versions made after ddp 2 and
launch-bound 2 take it; those two keep MEASURED, draw for draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _lognormal_ns(rng: np.random.Generator, n: int, floor_us: float, median_us: float, sigma: float,
                  cap_us: float) -> np.ndarray:
    """A floor plus a lognormal: the shape of host and launch times. Clipping a plain
    lognormal at a floor would pile a few percent of the draws on one value, a constant of
    its own for the query to find; the cap is far enough out to be met almost never."""
    x = floor_us + rng.lognormal(np.log(median_us - floor_us), sigma, n)
    return (np.minimum(x, cap_us) * 1e3).astype(np.int64)


@dataclass(frozen=True)
class HostTiming:
    measured: bool
    gap_tail_share: float = 0.0  # share of kernel gaps from the waited-on population (MEASURED_2)
    early_share: float = 0.0  # share of kernels timestamped before their launch call returns (MEASURED_2)

    def kernel_gaps_ns(self, rng: np.random.Generator, n: int, v1_ns: int = 1_200) -> np.ndarray | int:
        """Idle between consecutive kernels on one stream when the next is already queued."""
        if not self.measured:
            return v1_ns
        if not self.gap_tail_share:
            return _lognormal_ns(rng, n, 0.6, 1.25, 0.7, 60.0)
        tight = _lognormal_ns(rng, n, 0.9, 1.15, 0.9, 60.0)
        waited = _lognormal_ns(rng, n, 2.5, 6.5, 0.6, 60.0)
        return np.where(rng.random(n) < self.gap_tail_share, waited, tight)

    def launch_calls_ns(self, rng: np.random.Generator, n: int, lo_us: float = 4.0, hi_us: float = 8.0,
                        mean_us: float | None = None) -> np.ndarray:
        """cudaLaunchKernel's own time; `mean_us`: the measured shape scaled to that mean (a
        scenario whose physics counts launch time per kernel keeps its total)."""
        if not self.measured:
            return (rng.uniform(lo_us, hi_us, n) * 1e3).astype(np.int64)
        floor, median, sigma = 3.0, 7.5, 0.62
        x = _lognormal_ns(rng, n, floor, median, sigma, 150.0)
        if mean_us is None:
            return x
        shape_mean = floor + (median - floor) * np.exp(sigma ** 2 / 2)
        return (x * (mean_us / shape_mean)).astype(np.int64)

    def launch_latency_ns(self, rng: np.random.Generator, n: int) -> np.ndarray | int:
        """From a launch call's return to its kernel being ready to run on an idle GPU."""
        if not self.measured:
            return 3_000
        late = _lognormal_ns(rng, n, 0.3, 1.6, 0.5, 20.0)
        if not self.early_share:
            return late
        # A kernel can start before cudaLaunchKernel returns (the call's tail runs after the
        # doorbell), and CUPTI's GPU clock is correlated to the host's, not identical: the
        # sampled HTA traces show p10 -1 to -3 µs. schedule.launch_and_run keeps such a
        # start after the call began.
        early = -_lognormal_ns(rng, n, 0.05, 0.8, 0.6, 2.5)
        return np.where(rng.random(n) < self.early_share, early, late)

    def between_ops_ns(self, rng: np.random.Generator, n: int) -> np.ndarray | None:
        """Python and dispatcher time between one op's end and the next op's start."""
        if not self.measured:
            return None
        return _lognormal_ns(rng, n, 2.0, 14.0, 1.0, 1_000.0)

    def host_ns(self, rng: np.random.Generator, nominal_ns: int) -> int:
        """A host task of a nominal length, as it varies from step to step."""
        if not self.measured:
            return int(nominal_ns)
        return int(nominal_ns * min(max(float(rng.lognormal(0.0, 0.1)), 0.75), 1.35))  # np.clip: 40x slower on a scalar


V1 = HostTiming(measured=False)
MEASURED = HostTiming(measured=True)
MEASURED_2 = HostTiming(measured=True, gap_tail_share=0.22, early_share=0.15)
